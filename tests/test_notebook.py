"""The lecture (docs/notebooks/lecture.md): executed end to end, rendered to one self-contained HTML page and
to slides, both opened in headless Chromium with no network (the slides as more than one slide); no debug line
in the page; and the rendered page committed beside it (docs/notebooks/lecture.html) checked against its
source.

Executing the notebook takes about a minute, so those tests are ``slow`` (CI runs them in its slow step,
after installing the teach extra and Debian's chromium). Each skips with its reason when the teach extra or
chromium is missing. The image checks have negative controls: a blank image and a page without figures fail
them.
"""

import base64
import html
import io
import json
import os
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest

from georecall.cli import main
from georecall.experiments import lecture

ROOT = pathlib.Path(__file__).parent.parent
SOURCE = ROOT / "docs" / "notebooks" / "lecture.md"
COMMITTED = ROOT / "docs" / "notebooks" / "lecture.html"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

needs_teach = pytest.mark.skipif(not lecture.have_teach(), reason="the lecture needs the teach extra: pip "
                                 "install '.[teach]' (jupytext, nbclient, nbconvert, ipykernel, matplotlib)")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get "
                                    "install -y chromium)")
# Debug lines the page must not show: the figure captions it once printed, and printed dicts
DEBUG = (re.compile(r"\[figure \w+: \d+ x \d+ px\]"), re.compile(r"\{'[\w ]+': "))
IMAGE = re.compile(r'<img[^>]*src="data:image/png;base64,([^"]+)"')
FETCHED = re.compile(r'<(script|img|link)[^>]*(src|href)="(https?:)?//')


def _source_shows() -> list[str]:
    """The figure names the notebook's source draws, in order (read from its text, not from any output)."""
    return re.findall(r'(?<!def )show\(.*?,\s*"(\w+)"\)\s*$', SOURCE.read_text(), re.S | re.M)


def _decode(data: str) -> np.ndarray:
    import matplotlib.image

    return matplotlib.image.imread(io.BytesIO(base64.b64decode(data)), format="png")


def drawn(pixels: np.ndarray) -> bool:
    """An image is drawn when more than 2% of its pixels are not white and it has more than 8 distinct colours
    (a blank, a flat colour or a two-tone placeholder is not a figure)."""
    rgb = pixels[..., :3]
    inked = np.mean(np.any(rgb < 0.95, axis=-1))
    colours = np.unique((rgb * 255).astype(np.uint8).reshape(-1, 3), axis=0).shape[0]
    return bool(inked > 0.02 and colours > 8)


def heatmap_pixels(pixels: np.ndarray) -> int:
    """Pixels in the saturated ends of the heatmaps' red-blue scale (RdBu: deep red, deep blue)."""
    rgb = pixels[..., :3]
    red = (rgb[..., 0] > 0.35) & (rgb[..., 1] < 0.1) & (rgb[..., 2] < 0.2)
    blue = (rgb[..., 0] < 0.1) & (rgb[..., 1] < 0.3) & (rgb[..., 2] > 0.3)
    return int(np.sum(red | blue))


def shown_in(notebook: str) -> list[dict]:
    """The figures of an executed notebook, in order: each one's name and size as ``show`` stated them in the
    output's metadata."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    return [output.get("metadata", {}).get("georecall", {}) for cell in nb.cells if cell.cell_type == "code"
            for output in cell.get("outputs", []) if "image/png" in output.get("data", {})]


def check_figures(page: str, notebook: str | None = None) -> None:
    """Every figure the source draws is in the page, non-blank, at a readable size; with the executed
    notebook, in the source's order and at the size ``show`` measured."""
    images = [_decode(data) for data in IMAGE.findall(page)]
    assert len(images) == len(_source_shows())
    if notebook is not None:
        stated = shown_in(notebook)
        assert [s.get("figure") for s in stated] == _source_shows()
        for s, pixels in zip(stated, images):
            assert abs(pixels.shape[1] - s["width"]) <= 2 and abs(pixels.shape[0] - s["height"]) <= 2, s
    for pixels in images:
        assert 300 <= pixels.shape[1] <= 1100 and 200 <= pixels.shape[0] <= 850, pixels.shape
        assert drawn(pixels)


def debug_lines(page: str) -> list[str]:
    """The lines of a page's text that are debug output (:data:`DEBUG`)."""
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    return [line for line in text.splitlines() if any(p.search(line) for p in DEBUG)]


def test_the_source_draws_every_matrix_and_each_part():
    """The lecture's plan (issue 31): E, Q, W1, W2, U and the attention drawn; the broken gate, the bound, the
    tradeoff and the trained model beside G1."""
    shows = _source_shows()
    assert {"weights_E", "weights_Q", "weights_W1", "weights_W2", "weights_U", "attention", "construction",
            "broken_gate", "bound_vs_size", "tradeoff", "trained_vs_g1"} <= set(shows)
    text = SOURCE.read_text()
    assert text.startswith("---\njupyter:\n  jupytext:")  # a jupytext Markdown notebook: it diffs as text


def test_the_image_checks_fail_on_blank_images():
    white = np.ones((300, 400, 3))
    assert not drawn(white) and heatmap_pixels(white) == 0
    two_tone = white.copy()
    two_tone[:, :200] = 0.0  # half black: inked, but two colours
    assert not drawn(two_tone)
    noise = np.random.default_rng(0).random((300, 400, 3))
    assert drawn(noise)


@needs_teach
def test_the_committed_page_is_rendered_from_the_current_source():
    """docs/notebooks/lecture.html (linked from docs/walkthrough.md) holds every code cell of lecture.md as it
    is now, and every figure drawn; regenerate it with `georecall lecture --out docs/notebooks`."""
    import jupytext

    page = COMMITTED.read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    for cell in jupytext.read(str(SOURCE)).cells:
        if cell.cell_type == "code":
            hidden = "remove-input" in cell.metadata.get("tags", [])  # the setup cell: no code on the page
            assert (cell.source.strip() in text) != hidden, cell.source.splitlines()[0]
    check_figures(page)
    assert not debug_lines(page)
    assert not FETCHED.search(page)  # nothing fetched


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("lecture")
    stdout = io.StringIO()
    from contextlib import redirect_stdout

    with redirect_stdout(stdout):
        code = main(["lecture", "--out", str(out), "--json"])
    assert code == 0, stdout.getvalue()
    return json.loads(stdout.getvalue())


@pytest.mark.slow
@needs_teach
def test_the_lecture_executes_end_to_end(rendered):
    import nbformat

    nb = nbformat.read(rendered["notebook"], as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert rendered["cells"] == len(code) and all(c.get("execution_count") for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert rendered["images"] == len(_source_shows())


@pytest.mark.slow
@needs_teach
def test_the_rendered_page_holds_every_figure_drawn(rendered):
    page = pathlib.Path(rendered["html"]).read_text()
    check_figures(page, rendered["notebook"])
    assert not FETCHED.search(page)  # self-contained


@pytest.mark.slow
@needs_teach
def test_the_lecture_page_and_slides_have_no_debug_lines(rendered):
    for path in (rendered["html"], rendered["slides"]):
        page = pathlib.Path(path).read_text()
        assert not debug_lines(page), debug_lines(page)[:3]
    control = "<pre>[figure weights_Q: 733 x 312 px]\n{'p': 21, 'n': 48}</pre>"  # the lines it once printed
    assert len(debug_lines(control)) == 2


def test_the_source_prints_no_debug_lines():
    """No code cell prints a figure's caption or a dict (the page is read by students)."""
    import ast

    code = "\n".join(re.findall(r"```python[^\n]*\n(.*?)```", SOURCE.read_text(), re.S))
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
            text = ast.unparse(node)
            assert "[figure" not in text and "encoding_fit" not in text, text


def _screenshot(url: str, target: pathlib.Path, height: int = 6000) -> np.ndarray:
    import matplotlib.image

    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size=1200,{height}", f"--screenshot={target}", url],
                   check=True, capture_output=True, timeout=180)
    return matplotlib.image.imread(str(target))


@pytest.mark.slow
@needs_teach
@needs_chromium
def test_chromium_draws_the_page_with_its_figures(rendered, tmp_path):
    """A browser shows the page: the screenshot is not blank and shows the heatmaps' red and blue; a page
    with the same text and no figures (the negative control) shows none of them."""
    page = pathlib.Path(rendered["html"])
    shot = _screenshot(page.as_uri(), tmp_path / "lecture.png")
    assert shot.shape[1] == 1200 and drawn(shot)
    assert heatmap_pixels(shot) > 2000
    bare = tmp_path / "bare.html"
    bare.write_text(IMAGE.sub('<img src="">', page.read_text()))
    control = _screenshot(bare.as_uri(), tmp_path / "bare.png")
    assert drawn(control) and heatmap_pixels(control) < 50


def test_lecture_without_the_teach_extra_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lecture, "_missing", lambda: ["nbclient"])
    code = main(["lecture", "--out", str(tmp_path / "l")])
    err = capsys.readouterr().err
    assert code == 2 and "pip install '.[teach]'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "l").exists()


@needs_teach
def test_lecture_refuses_a_missing_notebook_before_any_work(tmp_path, capsys):
    code = main(["lecture", "--out", str(tmp_path / "l"), "--notebook", str(tmp_path / "none.md")])
    err = capsys.readouterr().err
    assert code == 2 and "no such notebook" in err
    assert not (tmp_path / "l").exists()


def _same_notebook(found: str | None) -> bool:
    """``found`` is this checkout's lecture.md (an editable install), or a copy of it installed with the
    package (a wheel built from this checkout)."""
    return found is not None and (os.path.samefile(found, SOURCE)
                                  or pathlib.Path(found).read_bytes() == SOURCE.read_bytes())


def test_the_default_notebook_is_this_checkouts():
    assert _same_notebook(lecture.default_notebook())


def test_the_default_notebook_is_found_from_any_folder(tmp_path, monkeypatch):
    """Run from a folder outside the checkout, the default is still the notebook of the checkout georecall
    was installed from (the old default looked in <checkout>/src and then the current folder: None)."""
    monkeypatch.chdir(tmp_path)
    assert _same_notebook(lecture.default_notebook())


def test_a_non_editable_install_finds_the_notebook_it_ships(tmp_path, monkeypatch):
    """Installed from a wheel (no checkout above the package), the default is the copy installed with the
    package (lecture.PACKAGED, package data mapped from docs/notebooks/ in pyproject.toml); the control: a
    wheel without it, run outside a checkout, has none."""
    package = tmp_path / "site-packages" / "georecall" / "experiments"
    shipped = package / "notebooks" / "lecture.md"
    shipped.parent.mkdir(parents=True)
    shipped.write_bytes(SOURCE.read_bytes())
    monkeypatch.setattr(lecture, "HERE", str(package))
    monkeypatch.setattr(lecture, "PACKAGED", str(shipped))
    monkeypatch.chdir(tmp_path)
    assert lecture.default_notebook() == str(shipped)
    shipped.unlink()
    assert lecture.default_notebook() is None


def test_the_wheel_ships_the_lecture_notebook():
    """pyproject.toml installs docs/notebooks/lecture.md as the package data that lecture.PACKAGED names."""
    import sys

    if sys.version_info < (3, 11):
        pytest.skip("tomllib needs Python 3.11")
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package = "georecall.experiments.notebooks"
    assert package in config["packages"]
    assert config["package-dir"][package] == "docs/notebooks"
    assert "lecture.md" in config["package-data"][package]
    installed = pathlib.Path(lecture.PACKAGED)
    assert installed.name == "lecture.md" and installed.parent.name == "notebooks"
    assert installed.parent.parent == pathlib.Path(lecture.HERE)  # georecall/experiments/notebooks/


@needs_teach
def test_lecture_runs_from_any_folder(tmp_path, monkeypatch, capsys):
    """`georecall lecture --out X` from a folder outside the checkout finds the lecture and writes its three
    files (the kernel is not started here: the cells' run is replaced by nothing; the slow tests run them)."""
    monkeypatch.setattr(lecture, "_run", lambda client, interrupt: None)
    monkeypatch.chdir(tmp_path)
    code = main(["lecture", "--out", "X", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and _same_notebook(doc["params"]["notebook"]), doc
    assert sorted(p.name for p in (tmp_path / "X").iterdir()) == ["lecture.html", "lecture.ipynb",
                                                                   "lecture.slides.html"]


# ---------------------------------------------------------------------------------------------- slides


def _dom(url: str) -> str:
    """The page's DOM after its scripts ran, in headless Chromium with every network request refused (a proxy
    on a closed port): what a lecture hall without network shows."""
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--proxy-server=127.0.0.1:9", "--virtual-time-budget=5000", "--dump-dom", url],
                          capture_output=True, text=True, timeout=180, check=True)
    return done.stdout


def _slide_shot(url: str, target: pathlib.Path) -> np.ndarray:
    import matplotlib.image

    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--proxy-server=127.0.0.1:9", "--virtual-time-budget=5000", "--window-size=1280,800",
                    f"--screenshot={target}", url], check=True, capture_output=True, timeout=180)
    return matplotlib.image.imread(str(target))


@pytest.mark.slow
@needs_teach
@needs_chromium
def test_the_slides_open_offline_as_more_than_one_slide(rendered, tmp_path):
    """reveal.js (bundled, inlined) runs with no network: it lays the deck out as one present slide and the
    others ahead of it; the first two slides' screenshots are drawn and differ; the negative control, the same
    page without reveal.js, is laid out as no slide."""
    slides = pathlib.Path(rendered["slides"])
    page = slides.read_text()
    assert not FETCHED.search(page)
    dom = _dom(slides.as_uri())
    classes = re.findall(r'<section[^>]*class="([^"]*)"', dom)
    assert sum("present" in c.split() for c in classes) >= 1
    assert sum("future" in c.split() for c in classes) >= 2
    assert rendered["slide_count"] >= 10
    first = _slide_shot(slides.as_uri() + "#/0", tmp_path / "slide0.png")
    second = _slide_shot(slides.as_uri() + "#/1", tmp_path / "slide1.png")
    assert drawn(first) and first.shape == second.shape and np.abs(first - second).max() > 0.5
    import nbformat
    opened = [c for c in nbformat.read(rendered["notebook"], as_version=4).cells
              if c.metadata.get("slideshow", {}).get("slide_type") == "slide"]
    figure = next(i for i, c in enumerate(opened) if any("image/png" in o.get("data", {})
                                                          for o in c.get("outputs", [])))
    shot = _slide_shot(slides.as_uri() + f"#/{figure}", tmp_path / "figure.png")
    assert drawn(shot) and heatmap_pixels(shot) > 2000  # a figure slide shows its heatmap
    without = tmp_path / "without.html"
    without.write_text(re.sub(r"<script>.*?</script>", "", page, flags=re.S))
    assert not re.findall(r'<section[^>]*class="[^"]*(present|future)', _dom(without.as_uri()))


@needs_teach
def test_slides_one_idea_per_slide_and_code_hidden():
    """Each Markdown cell opens a slide, a figure opens its own, text output stays with its slide, a cell with
    no output is skipped; the deck written from such a notebook has no code and inlines reveal.js."""
    import nbformat

    v4 = nbformat.v4
    png = {"image/png": "iVBORw0KGgo="}
    figure = v4.new_code_cell("show()", outputs=[v4.new_output("display_data", png)])
    text = v4.new_code_cell("print('a table')", outputs=[v4.new_output("stream", text="a table\n")])
    silent = v4.new_code_cell("x = secret_code_line = 1")
    nb = v4.new_notebook(cells=[v4.new_markdown_cell("## idea"), text, figure, silent,
                                v4.new_markdown_cell("## next idea")])
    lecture.slide_types(nb)
    kinds = [c.metadata["slideshow"]["slide_type"] for c in nb.cells]
    assert kinds == ["slide", "-", "slide", "skip", "slide"]
    deck = lecture.render_slides(nb)
    assert "secret_code_line" not in deck and "print(&#39;a table" not in deck and "a table" in deck
    assert not FETCHED.search(deck) and "Reveal.initialize" in deck and "reveal.js 5" in deck


def test_lecture_offers_only_options_that_do_something(capsys):
    with pytest.raises(SystemExit):
        main(["lecture", "--help"])
    text = capsys.readouterr().out
    assert "--timeout" in text and "--notebook" in text
    assert "--debug" not in text and "--build-timeout" not in text
    assert main(["lecture", "--debug"]) == 2


def test_trained_vs_g1_is_drawn_where_the_alignment_cannot_interpolate():
    """demo --figures draws trained_vs_g1 at alignment_size(N, R): the alignment (d + 1 parameters) has
    fewer parameters than its fit subjects there, and not at half that size (unless that is below N)."""
    from georecall.experiments import demo

    for N, R in ((8, 2), (8, 1), (16, 4), (64, 2), (64, 8)):
        size = demo.alignment_size(N, R)
        D = int(np.ceil(np.log2(size)))
        assert size >= N and 3 * size // 4 > R * D + R + D + 1
        half = size // 2
        if half >= N:
            D = int(np.ceil(np.log2(half)))
            assert 3 * half // 4 <= R * D + R + D + 1


@pytest.mark.slow
def test_demo_figures_prints_the_held_out_alignment(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main(["demo", "--figures", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("trained_vs_g1:"))
    assert "N = 32" in line and "held-out R²" in line
    assert (tmp_path / "trained_vs_g1.png").exists()


@pytest.mark.slow
@needs_teach
def test_the_slider_cell_offers_live_widgets_where_the_notebook_runs_live(tmp_path):
    """Run live (no GEORECALL_LECTURE_BUILD), the lecture's explore cell offers N, R and the gate as
    ipywidgets sliders; built by georecall lecture it draws the static figure instead (the page and slide
    tests)."""
    pytest.importorskip("ipywidgets")
    import nbformat
    from nbclient import NotebookClient

    nb = lecture.read_notebook(str(SOURCE))
    cut = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "def explore" in c.source)
    live = nbformat.v4.new_notebook(cells=[c for c in nb.cells[: cut + 1] if c.cell_type == "code"])
    env = {k: v for k, v in os.environ.items() if k != "GEORECALL_LECTURE_BUILD"}
    NotebookClient(live, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)
    outputs = live.cells[-1].outputs
    assert not [o for o in outputs if o.output_type == "error"]
    views = [o for o in outputs if lecture.WIDGET in o.get("data", {})]
    assert views, [o.get("data", {}).keys() for o in outputs]
    state = json.dumps(live.metadata.get("widgets", {}))
    for label in ('"N"', '"R"', "gate G'"):
        assert label in state, label


# ------------------------------------------------------------------- the lecture's text against its code


def _cells_run_until(marker: str, monkeypatch) -> tuple[dict, str]:
    """The source's code cells run in this process, in order, up to the first one containing ``marker``
    (figures are not drawn: ``show`` records each figure's title instead): their namespace and what they
    printed."""
    import contextlib

    pytest.importorskip("matplotlib")
    pytest.importorskip("IPython", reason="the lecture's cells import IPython (the teach extra: pip install "
                                          "'.[teach]')")
    monkeypatch.setenv("GEORECALL_LECTURE_BUILD", "1")  # the slider cell draws its static figure
    monkeypatch.setenv("MPLBACKEND", "Agg")
    cells = re.findall(r"```python[^\n]*\n(.*?)```", SOURCE.read_text(), re.S)
    printed = io.StringIO()
    namespace: dict = {}
    titles: list[str] = []

    def show(fig, name):
        titles.append(fig.axes[0].get_title() if fig.axes else "")

    with contextlib.redirect_stdout(printed):
        for source in cells:
            if "F.weights_figures" in source or "F.tradeoff_figure" in source:
                continue  # figures only, nothing later reads them
            exec(compile(source, str(SOURCE), "exec"), namespace)
            namespace["show"] = show
            namespace["titles"] = titles
            if marker in source:
                break
    import matplotlib.pyplot as plt

    plt.close("all")
    return namespace, printed.getvalue()


def test_the_slider_cell_states_the_edge_it_has(monkeypatch):
    """"Try it": the text's edge of c2·G' > c1·max|a| (G' = 2) is the edge of the G1 the cell builds, which it
    computes and shows in its figure's title; at G' = 2 it is on that edge. The old cell built the unit-scale
    G1 (codes ±1/√D: edge 1.155 at N = 8, its default gate 2.309) under a text that said 2."""
    from georecall.constructions.single_hop import build_g1
    from georecall.theory.tasks import task_for_seed

    namespace, _ = _cells_run_until("def explore", monkeypatch)
    text = SOURCE.read_text()
    stated = re.search(r"inequality c2·G' > c1·max\|a\| is G' = c1·max\|a\|/c2 = (\d+(?:\.\d+)?)", text)
    assert stated, "the Try-it text states the edge"
    title = namespace["titles"][-1]
    shown = re.search(r"G' = ([\d.]+) \(edge ([\d.]+)\)", title)
    assert shown, title
    assert float(shown.group(1)) == float(shown.group(2)) == float(stated.group(1)), title
    for n, r in ((8, 2), (64, 6)):  # the cell's edge, at the sliders' N and R, is the one the text states
        namespace["explore"](n, r, 1.0)
        assert f"(edge {float(stated.group(1)):g})" in namespace["titles"][-1]
    unit = build_g1(task_for_seed(8, 2, 0), "binary")  # the old cell's G1: another edge
    assert unit.constants["c1"] * unit.codes.max_abs / unit.constants["c2"] != float(stated.group(1))


def test_a_tie_listed_among_the_failing_queries_says_why_it_fails(monkeypatch):
    """Section 5's failing queries at G' = 0 include a margin-0 tie (right answer predicted, yet a failure):
    its line says it is a tie and why that counts as a failure; the text says so too."""
    _, printed = _cells_run_until("failing queries; the first ones", monkeypatch)
    listed = [line for line in printed.splitlines() if line.startswith("  ⟨")]
    ties = [line for line in listed if "(margin 0" in line]
    assert listed and ties, printed
    assert all(line.endswith("(margin 0: a tie)") for line in ties), ties
    said = [line for line in printed.splitlines() if line.startswith("  a tie:")]
    assert len(said) == 1 and "argmax is not unique" in said[0] and "counts as a failure" in said[0], printed
    assert "margin 0 is a tie" in " ".join(SOURCE.read_text().split())
