"""The lecture (docs/notebooks/lecture.md): executed end to end, rendered to one self-contained HTML page, and
opened in headless Chromium; and the rendered page committed beside it (docs/notebooks/lecture.html) checked
against its source.

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

from georecall.verify.cli import main
from georecall.verify.experiments import lecture

ROOT = pathlib.Path(__file__).parent.parent
SOURCE = ROOT / "docs" / "notebooks" / "lecture.md"
COMMITTED = ROOT / "docs" / "notebooks" / "lecture.html"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

needs_teach = pytest.mark.skipif(not lecture.have_teach(), reason="the lecture needs the teach extra: pip "
                                 "install '.[teach]' (jupytext, nbclient, nbconvert, ipykernel, matplotlib)")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get "
                                    "install -y chromium)")
CAPTION = re.compile(r"\[figure (\w+): (\d+) x (\d+) px\]")
IMAGE = re.compile(r'<img[^>]*src="data:image/png;base64,([^"]+)"')


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


def figures_in(page: str) -> list[tuple[str, int, int, np.ndarray]]:
    """Each figure of a rendered page: its caption's name and size, and its decoded PNG (in page order)."""
    captions = CAPTION.findall(page)
    images = IMAGE.findall(page)
    assert len(captions) == len(images), (len(captions), len(images))
    return [(name, int(w), int(h), _decode(data)) for (name, w, h), data in zip(captions, images)]


def check_figures(page: str) -> None:
    """Every figure the source draws is in the page, in order, non-blank, at the size its caption states."""
    figures = figures_in(page)
    assert [name for name, *_ in figures] == _source_shows()
    for name, width, height, pixels in figures:
        assert abs(pixels.shape[1] - width) <= 2 and abs(pixels.shape[0] - height) <= 2, (name, pixels.shape)
        assert 300 <= pixels.shape[1] <= 1100 and 200 <= pixels.shape[0] <= 850, (name, pixels.shape)
        assert drawn(pixels), name


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
            assert cell.source.strip() in text, cell.source.splitlines()[0]
    check_figures(page)
    assert not re.search(r'<(script|img|link)[^>]*(src|href)="https?:', page)  # nothing fetched


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
    check_figures(page)
    assert not re.search(r'<(script|img|link)[^>]*(src|href)="https?:', page)  # self-contained


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


def test_the_default_notebook_is_this_checkouts():
    found = lecture.default_notebook()
    assert found is not None and os.path.samefile(found, SOURCE)
