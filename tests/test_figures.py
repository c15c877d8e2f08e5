"""Figures for slides: every figure legible (no overlapping text, no text under 9 pt) at its size, --dpi and
--format, nested output folders, the construction picture, and the refusals that come before any work."""

import json
import os
import pathlib
import re
import struct
import sys

import numpy as np
import pytest

from georecall.cli import main

pytest.importorskip("matplotlib", reason="the figures need the optional plot extra")

from georecall.experiments import demo, plotting, study, study_design, study_figures, study_report  # noqa: E402
from georecall.experiments import figures as F  # noqa: E402

ROOT = pathlib.Path(__file__).parent.parent
ALL_FIGURES = ("thresholds", "tradeoff", "margins", "transfer", "construction", "weights_E", "weights_Q",
               "weights_W1", "weights_W2", "weights_U", "attention", "trained_vs_g1")
STUDY = str(ROOT / "docs" / "study_results.jsonl")
D_AXIS_STUDY = str(ROOT / "docs" / "study_d_axis.jsonl")
LONG_STUDY = str(ROOT / "docs" / "study_long.jsonl")  # the regimes with trajectories


def _records() -> list[dict]:
    from georecall import __version__

    base = {"kind": "threshold", "seed": 0, "monotone": True, "trials": [], "steps": 500, "lr": 1e-2,
            "width_factor": 4, "attention": "uniform", "dtype": "float32", "version": __version__}
    records = [{**base, "N": N, "R": R, "mode": mode, "d_star": d}
               for N, R, mode, d in [(256, 2, "learned", 8), (256, 4, "learned", 12),
                                     (1024, 8, "learned", 25), (256, 2, "frozen", 10),
                                     (256, 4, "frozen", 18), (1024, 8, "frozen", 39)]]
    for i, (N, R) in enumerate([(128, 2), (1024, 4), (256, 8)]):
        records.append({"kind": "transfer", "label": f"model{i}.npz", "model": f"runs/model{i}.npz",
                        "description": f"trained, d = {8 * (i + 1)}", "N": N, "R": R, "chance": 1 / N,
                        "closed_form_accuracy": 0.3 * i, "fitted_accuracy": 0.5})
    return records


def _figures():
    doc = study_report.summarize(STUDY)
    d_doc = study_report.summarize(D_AXIS_STUDY)
    names = demo.relation_names
    return {
        "thresholds": lambda: F.thresholds_figure(_records()),
        "tradeoff": lambda: F.tradeoff_figure(),
        "margins": lambda: F.margins_figure(0),
        "transfer": lambda: F.transfer_figure(_records()),
        "transfer of one model": lambda: F.transfer_figure(_records()[-1:]),  # the narrowest, 5 inches
        # named as the figures command and the demo name them (cipher0 …): longer labels than r0 …
        "construction N=8 R=2": lambda: F.construction_figure(8, 2, 0, relation_names=names(2)),
        "construction N=64 R=8": lambda: F.construction_figure(64, 8, 3, relation_names=names(8)),
        **{f"{name} N=8 R=2": (lambda name=name: F.weights_figures(
            8, 2, 0, which=(name,), relation_names=names(2)).popitem()[1]) for name in F.WEIGHTS},
        **{f"{name} N=16 R=8": (lambda name=name: F.weights_figures(
            16, 8, 1, which=(name,), relation_names=names(8)).popitem()[1]) for name in F.WEIGHTS},
        "trained_vs_g1": lambda: F._trained_vs_g1(64, 2, 0),
        "mechanism": lambda: F.mechanism_figure(doc, study_design.THRESHOLDS),
        "forward_reverse": lambda: F.forward_reverse_figure(doc),
        "mechanism d-axis": lambda: F.mechanism_figure(d_doc, study_design.THRESHOLDS),
        "d_axis": lambda: F.d_axis_figure(d_doc["d_axis"], study_design.THRESHOLDS,
                                          study_report.D_AXIS_FIELDS),
        "trajectory": lambda: study_figures.trajectory_figure(study_report.summarize(LONG_STUDY),
                                                              study_design.THRESHOLDS,
                                                              study_report.TRAJECTORY_FIELDS),
    }


# In large type the d-axis study's 30 rows need more than a slide's height: drawn taller, with a warning
TALLER_THAN_A_SLIDE_IN_TALK = ("mechanism d-axis",)


def _assert_legible(fig, name: str, *, slide: bool = True) -> None:
    """No two texts overlapping (titles included), none cut off by the canvas edge, none under the active
    style's smallest size, on a figure of slide size (unless ``slide`` is false)."""
    assert F.text_overlaps(fig) == [], name
    assert F.clipped_texts(fig) == [], name
    assert F.small_texts(fig, F.minimum_font()) == [], name
    width, height = fig.get_size_inches()
    assert width <= 11.0 and (height <= 8.5 or not slide), (name, width, height)


@pytest.mark.parametrize("name, style", [(name, style) for style in ("default", "talk")
                                         for name in _figures()])
def test_every_figure_is_legible_at_slide_size(name, style):
    """The old mechanism figure had 5 colliding tick labels (1.00 | 0.00 of neighbouring panels) and 8 pt row
    names; the old forward_reverse figure 33 overlapping 6 pt labels: both fail here. In talk, the old
    margins figure's two titles ran over each other and off the canvas, and the construction's W1 title ran
    over its colour bar's 1.0 and off the canvas; the study figures' row names (25 overlapping), panel
    titles, legend and the forward-reverse corner's two −0.2: they fail here too."""
    import warnings

    import matplotlib.pyplot as plt

    taller = style == "talk" and name in TALLER_THAN_A_SLIDE_IN_TALK
    with F.figure_style(style), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = _figures()[name]()
        try:
            _assert_legible(fig, name, slide=not taller)
        finally:
            plt.close(fig)
    said = [str(w.message) for w in caught if "taller than a slide" in str(w.message)]
    assert bool(said) == taller, (name, style, said)


@pytest.mark.parametrize("style, N, R", [  # about 25 s each: the talk style at N = 8 in the default run
    pytest.param("default", 8, 2, marks=pytest.mark.slow), ("talk", 8, 2),
    pytest.param("talk", 16, 3, marks=pytest.mark.slow)])
def test_every_figure_the_demo_writes_is_legible(tmp_path, monkeypatch, capsys, style, N, R):
    """Every figure ``demo --figures`` writes, as it draws them (its query, its relation names): checked
    where it is saved. The old construction cut off "E: subject…", "…σ·B_r[i] + g_r" and "(hi)dden unit"
    in talk."""
    from georecall.cli import commands_figures

    checked = []

    def check_then_skip_saving(fig, out_dir, name, **kwargs):
        import matplotlib.pyplot as plt

        checked.append(name)
        try:
            _assert_legible(fig, name)
        finally:
            plt.close(fig)
        return []

    monkeypatch.setattr(commands_figures, "save_figure", check_then_skip_saving)
    argv = ["demo", "--N", str(N), "--R", str(R), "--figures", str(tmp_path), "--style", style]
    assert main(argv) == 0
    capsys.readouterr()
    assert sorted(checked) == sorted(ALL_FIGURES[4:])


def test_the_overlap_detector_finds_overlapping_titles_of_two_panels():
    """Titles lie outside their axes and are not clipped: the detector compared only texts that overlapped
    their own axes, so the talk margins figure's titles (one over the other) passed."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(5, 2.5))
    axes[0].set_title("a title far too long for its panel")
    axes[1].set_title("another title just as long")
    assert ("a title far too long for its panel", "another title just as long") in F.text_overlaps(fig)
    axes[0].set_title("short")
    axes[1].set_title("titles")
    assert F.text_overlaps(fig) == []
    plt.close(fig)


def test_clipped_texts_finds_text_off_the_canvas():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2), layout="constrained")
    ax.set_title("a title much wider than its figure of three inches")
    ax.set_xlabel("fits")
    assert F.clipped_texts(fig) == ["a title much wider than its figure of three inches"]
    ax.set_title("fits too")
    assert F.clipped_texts(fig) == []
    ax.text(5.0, 0.5, "clipped away by its axes", clip_on=True)  # not drawn at all: not cut off
    assert F.clipped_texts(fig) == [] and F.text_overlaps(fig) == []
    plt.close(fig)


def test_the_overlap_detector_finds_planted_overlaps():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.text(0.5, 0.5, "one label")
    ax.text(0.52, 0.5, "another label")
    assert ("one label", "another label") in F.text_overlaps(fig)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(2, 2))  # forty tick labels on a 2-inch axis
    ax.set_xticks(range(40), [f"{i:.2f}" for i in range(40)])
    ax.set_xlim(-0.5, 39.5)
    assert len(F.text_overlaps(fig)) > 10
    ax.text(0.1, 0.9, "tiny", fontsize=5, transform=ax.transAxes)
    assert ("tiny", 5.0) in F.small_texts(fig)
    plt.close(fig)


def test_a_tick_outside_the_view_is_not_a_collision():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(range(12), range(12))
    ax.set_xticks([0, 5, 10, 15])  # matplotlib keeps 15 (off the axis) as an undrawn label
    ax.set_xlim(-0.5, 11.5)
    assert F.text_overlaps(fig) == []
    plt.close(fig)


def _stand_in(*args, **kwargs):
    """A small figure drawn under the active style: a stand-in for a computed figure where a test is about
    the command around it (folders, --dpi, --format, --style), not the figure (each figure's own tests draw
    it, tests/test_figures.py::test_every_figure_is_legible and the slow cases below)."""
    import matplotlib.pyplot as plt

    with plt.rc_context(plotting.rc_params()):  # the active style (figure_style), as every figure draws
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.plot([0, 1], [0, 1])
        ax.set_title("stand-in")
    return fig


def _stand_in_matrices(*args, which=F.WEIGHTS, **kwargs):
    return {("attention" if m == "attention" else f"weights_{m}"): _stand_in() for m in which}


@pytest.fixture
def cheap_drawing(monkeypatch):
    """The computed figures (checks at N = 4096, a training run, eight matrices) replaced by stand-ins in
    the figures command and the demo; the figures from records are drawn as they are."""
    from georecall.cli import commands_figures

    for name in ("tradeoff_figure", "margins_figure", "construction_figure", "_trained_vs_g1"):
        monkeypatch.setattr(F, name, _stand_in)
    monkeypatch.setattr(F, "weights_figures", _stand_in_matrices)
    for name in ("construction_figure", "trained_beside_g1_figure"):
        monkeypatch.setattr(commands_figures, name, _stand_in)
    monkeypatch.setattr(commands_figures, "weights_figures", _stand_in_matrices)
    for name in ("mechanism_figure", "forward_reverse_figure"):
        monkeypatch.setattr(F, name, _stand_in)


def _png_width(path: str) -> int:
    with open(path, "rb") as handle:
        head = handle.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">I", head[16:20])[0]


def test_dpi_and_formats(tmp_path):
    import matplotlib.pyplot as plt

    paths = {}
    for dpi in (60, 120):
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.plot([0, 1], [0, 1])
        os.makedirs(tmp_path / str(dpi))
        paths[dpi] = F.save_figure(fig, str(tmp_path / str(dpi)), "f", dpi=dpi, formats=("png", "svg", "pdf"))
    assert [pathlib.Path(p).suffix for p in paths[60]] == [".png", ".svg", ".pdf"]
    ratio = _png_width(paths[120][0]) / _png_width(paths[60][0])
    assert 1.9 < ratio < 2.1
    assert open(paths[60][2], "rb").read(5) == b"%PDF-"
    assert b"<svg" in open(paths[60][1], "rb").read(400)
    fig, _ = plt.subplots()
    with pytest.raises(ValueError):
        F.save_figure(fig, str(tmp_path), "g", formats=("jpg",))
    with pytest.raises(ValueError):
        F.save_figure(fig, str(tmp_path), "g", dpi=10)


def test_figures_command_creates_nested_folders_at_the_dpi_and_formats_asked(tmp_path, capsys, cheap_drawing):
    """`figures --out a/b/c` was refused ("does not exist"); a user expects the folders to be made. (The
    computed figures are stand-ins here; the slow case below draws every one.)"""
    _nested_folders_at_the_dpi_and_formats_asked(tmp_path, capsys, ("png",))  # (a PDF embeds its fonts: slow)
    assert 150 <= _png_width(str(tmp_path / "a" / "b" / "c" / "tradeoff.png")) <= 4 * 50  # 4 in. at 50 dpi


@pytest.mark.slow
def test_figures_command_draws_every_figure_in_nested_folders(tmp_path, capsys):
    _nested_folders_at_the_dpi_and_formats_asked(tmp_path, capsys, ("png", "pdf"))


def _nested_folders_at_the_dpi_and_formats_asked(tmp_path, capsys, formats):
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(json.dumps(r) for r in _records()) + '\n{"kind": "thresh\n')  # one torn
    out = tmp_path / "a" / "b" / "c"
    code = main(["figures", "--from", str(results), "--out", str(out), "--format", *formats, "--dpi", "50",
                 "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["params"]["dpi"] == 50 and doc["params"]["formats"] == list(formats)
    assert doc["problems"] == f"skipped 1 torn line(s) of {len(_records()) + 1}"
    assert doc["notes"] == [f"Note: {results}: {doc['problems']}."]  # both record figures drawn
    names = {pathlib.Path(f).name for f in doc["files"]}
    assert names == {f"{n}.{e}" for n in ALL_FIGURES for e in formats}  # only the formats asked
    assert all(pathlib.Path(f).parent == out for f in doc["files"])
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = main(["figures", "--out", str(blocker / "sub")])
    err = capsys.readouterr().err
    assert code == 2 and "is a file" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [["figures", "--format", "jpg"], ["figures", "--dpi", "5"]])
def test_bad_figure_options_are_refused(argv, capsys):
    assert main(argv) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_study_figures_without_matplotlib_are_refused_before_any_training(tmp_path, monkeypatch, capsys):
    """It used to run the whole study and then exit 0 saying "no figures"."""
    def must_not_run(*args, **kwargs):
        raise AssertionError("the study ran before the refusal")

    monkeypatch.setattr(study, "run_study", must_not_run)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    code = main(["study", "mechanism", "--quick", "--out", str(tmp_path / "q.jsonl"), "--figures",
                 str(tmp_path / "figs")])
    err = capsys.readouterr().err
    assert code == 2 and "pip install '.[plot]' in georecall's clone" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "figs").exists()


def test_study_summary_figures_into_a_new_nested_folder(tmp_path, capsys, cheap_drawing):
    out = tmp_path / "x" / "y"
    code = main(["study", "mechanism", "--summary", STUDY, "--figures", str(out), "--json"])
    files = json.loads(capsys.readouterr().out)["figures"]
    assert code == 0 and sorted(pathlib.Path(f).name for f in files) == [
        "forward_reverse.png", "forward_reverse.svg", "mechanism.png", "mechanism.svg"]


def test_study_figures_at_the_dpi_and_formats_asked(tmp_path, capsys, cheap_drawing):
    """The study's figures in the formats asked, at the dpi asked (stand-ins drawn: the figures themselves
    are tested with the others)."""
    out = tmp_path / "f"
    code = main(["study", "mechanism", "--summary", STUDY, "--figures", str(out), "--format", "pdf", "png",
                 "--dpi", "40", "--json"])
    files = json.loads(capsys.readouterr().out)["figures"]
    assert code == 0 and sorted(pathlib.Path(f).name for f in files) == [
        "forward_reverse.pdf", "forward_reverse.png", "mechanism.pdf", "mechanism.png"]
    assert 120 <= _png_width(str(out / "mechanism.png")) <= 4 * 40  # a 4-inch stand-in at --dpi 40
    code = main(["study", "mechanism", "--summary", STUDY, "--dpi", "40"])
    assert code == 2 and "apply to --figures" in capsys.readouterr().err


def test_study_figures_in_the_style_asked(tmp_path, capsys, cheap_drawing, monkeypatch):
    """`study mechanism --figures DIR --style talk` draws in large type and records the style; the default
    style is the control; --style without --figures is refused."""
    sizes = []

    def recording(*args, **kwargs):
        sizes.append(plotting.minimum_font())
        return _stand_in()

    monkeypatch.setattr(F, "mechanism_figure", recording)
    for style, size in (("talk", 14.0), ("default", plotting.MIN_FONT_PT)):
        code = main(["study", "mechanism", "--summary", STUDY, "--figures", str(tmp_path / style), "--format",
                     "png", "--dpi", "40", "--style", style, "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert code == 0 and sizes[-1] == size and doc["params"]["style"] == style
    code = main(["study", "mechanism", "--summary", STUDY, "--style", "talk"])
    assert code == 2 and "--style applies to --figures" in capsys.readouterr().err


def test_demo_draws_the_construction(tmp_path, capsys, cheap_drawing):
    """The demo writes its figures into a new nested folder in the one format asked (stand-ins drawn here;
    the slow case below draws them)."""
    _demo_draws_the_construction(tmp_path, capsys)


@pytest.mark.slow
def test_demo_draws_the_construction_itself(tmp_path, capsys):
    _demo_draws_the_construction(tmp_path, capsys)


def _demo_draws_the_construction(tmp_path, capsys):
    out = tmp_path / "slides" / "g1"
    code = main(["demo", "--N", "16", "--R", "3", "--seed", "1", "--figures", str(out), "--format", "png"])
    text = capsys.readouterr().out
    assert code == 0 and (out / "construction.png").exists() and "construction.png" in text
    assert not (out / "construction.svg").exists()
    assert {p.name for p in out.iterdir()} == {f"{n}.png" for n in ALL_FIGURES[4:]}


def test_demo_figures_without_matplotlib_are_refused_before_the_walkthrough(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code = main(["demo", "--figures", str(tmp_path / "f")])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "pip install" in err


def test_transfer_figure_names_models_by_size_with_a_chance_line():
    """The old figure labelled bars with file names and had neither N, R nor chance."""
    import matplotlib.pyplot as plt

    fig = F.transfer_figure(_records())
    ax = fig.axes[0]
    fig.canvas.draw()
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert all(".npz" not in t for t in ticks)
    assert "trained, d = 8\nN = 128, R = 2" in ticks and "N = 1024, R = 4" in ticks[1]
    assert "chance (1/N)" in [t.get_text() for t in ax.get_legend().get_texts()]
    chance = [c for c in ax.collections if c.get_label() == "chance (1/N)"]
    assert chance and abs(chance[0].get_segments()[0][0][1] - 1 / 128) < 1e-12
    plt.close(fig)


def test_a_users_own_label_is_kept():
    import matplotlib.pyplot as plt

    fig = F.transfer_figure([{**_records()[-1], "label": "my model"}])
    fig.canvas.draw()
    assert fig.axes[0].get_xticklabels()[0].get_text().startswith("my model\n")
    plt.close(fig)


def test_mechanism_figure_tells_trained_models_controls_and_constructions_apart():
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    doc = study_report.summarize(STUDY)
    fig = F.mechanism_figure(doc, study_design.THRESHOLDS)
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {label for label, _, _ in F.CATEGORIES.values()} <= labels
    rows = study_figures._study_rows(doc)
    colours = [to_hex(bar.get_facecolor()[:3]) for bar in fig.axes[0].patches[:len(rows)]]
    expected = [to_hex(F.CATEGORIES[category][1]) for _, category, _ in rows]
    assert colours == expected and len(set(colours)) == 3
    plt.close(fig)


def test_margins_panels_fill_their_axes():
    """The C1 panel put its bars into the last 12% of an axis stretched to the promised bound."""
    import matplotlib.pyplot as plt

    fig = F.margins_figure(0)
    for ax in fig.axes:
        left, right = ax.get_xlim()
        xs = [x for p in ax.patches for x in (p.get_x(), p.get_x() + p.get_width())]
        assert (max(xs) - min(xs)) / (right - left) > 0.6, ax.get_title()
    plt.close(fig)


def test_g1_embedded_wider_is_labelled_apart_from_native_g1():
    """The d-axis summary holds native G1 and G1 padded to d = 108..256: each row says which it is."""
    doc = study_report.summarize(D_AXIS_STUDY)
    labels = [study_figures._construction_label(e) for e in doc["constructions"]]
    assert len(set(labels)) == len(labels), labels
    padded = [lab for e, lab in zip(doc["constructions"], labels) if e.get("pad_d")]
    assert padded and all("(padded)" in lab for lab in padded)
    assert not any("(padded)" in lab for e, lab in zip(doc["constructions"], labels) if not e.get("pad_d"))


# ------------------------------------------------------------------------ issue 31: a lecture's figures


def _tick_texts(fig) -> set[str]:
    fig.draw_without_rendering()
    found = set()
    for ax in fig.axes:
        for axis in [ax.xaxis, ax.yaxis] + [child.xaxis for child in ax.child_axes]:
            found |= {t.get_text() for t in axis.get_ticklabels() if t.get_visible()}
    return found


def test_the_matrices_are_named_in_the_words_of_the_printed_query():
    """At R = 8 the panels said "B0..B7" while the query said "cipher7", and W1's axis only "gate rows"."""
    import matplotlib.pyplot as plt

    from georecall.experiments.demo import relation_names

    figs = F.weights_figures(16, 8, 1, relation_names=relation_names(8))
    assert set(figs) == {"weights_E", "weights_Q", "weights_W1", "weights_W2", "weights_U", "attention"}
    e_ticks = _tick_texts(figs["weights_E"])
    assert {f"B_cipher{r}" for r in range(8)} <= e_ticks and "O" in e_ticks
    w1_ticks = _tick_texts(figs["weights_W1"])
    assert "units of cipher7" in w1_ticks and "B_cipher7" in w1_ticks
    assert "gate rows" not in w1_ticks and {"cipher0", "cipher7"} <= _tick_texts(figs["weights_Q"])
    assert {"cipher7", "5"} <= _tick_texts(figs["attention"])  # the query ⟨cipher7, 5⟩, as the demo asks it
    for name, fig in figs.items():
        assert len(fig.axes) >= 2, name  # the matrix and its colour bar
        assert fig.axes[-1].get_ylabel(), name  # the colour bar says what the colours are
        plt.close(fig)
    small = F.construction_figure(8, 2, 0, relation_names=relation_names(2))
    assert {"B_cipher0", "B_cipher1", "g_cipher0", "g_cipher1", "O"} <= _tick_texts(small)
    assert sum(1 for ax in small.axes if ax.get_label() == "<colorbar>") == 2
    plt.close(small)


def test_the_numbers_in_the_cells_are_es_entries_rebuilt_from_the_codes():
    """Cell texts of the E heatmap against E built by hand: block B_r of row s is the code of π_r(s)."""
    import matplotlib.pyplot as plt

    from georecall.theory.tasks import task_for_seed

    N, R = 8, 2
    fig = F.weights_figures(N, R, 0, which=("E",))["weights_E"]
    ax = fig.axes[0]
    cells = {(round(t.get_position()[1]), round(t.get_position()[0])): int(t.get_text()) for t in ax.texts}
    task, D = task_for_seed(N, R, 0), 3
    for s in range(N):
        for r in range(R):
            for i in range(D):  # binary codes: entry i of a_j is −1 where bit i of j is set
                assert cells[(s, r * D + i)] == 1 - 2 * ((int(task.table[r, s]) >> i) & 1)
    assert len(cells) == N * ax.images[0].get_array().shape[1]
    plt.close(fig)


def test_saved_svg_keeps_text_as_text_and_pdf_embeds_its_fonts(tmp_path):
    """The SVG had 0 <text> elements (every label outlined as paths): labels could not be edited."""
    import matplotlib
    import matplotlib.pyplot as plt

    fig = F.weights_figures(8, 2, 0, which=("W1",))["weights_W1"]
    svg, pdf = F.save_figure(fig, str(tmp_path), "w1", formats=("svg", "pdf"))
    text = open(svg).read()
    assert text.count("<text") >= 20 and ">units of cipher0<" in text
    data = open(pdf, "rb").read()
    assert b"/FontFile2" in data and b"/Type3" not in data  # TrueType embedded (Type 42), not Type 3
    with matplotlib.rc_context({"svg.fonttype": "path"}):  # the check fails on outlined text
        fig, ax = plt.subplots()
        ax.set_title("units of cipher0")
        path = tmp_path / "outlined.svg"
        fig.savefig(path, format="svg")
        plt.close(fig)
    assert "<text" not in path.read_text()


@pytest.mark.parametrize("name", ["construction", "weights_E", "weights_W1", "weights_W2", "attention",
                                  "trained_vs_g1", "tradeoff"])
def test_talk_style_is_large_and_still_legible(name):
    import matplotlib.pyplot as plt

    make = {"construction": lambda: F.construction_figure(8, 2, 0),
            "trained_vs_g1": lambda: F._trained_vs_g1(64, 2, 0),
            "tradeoff": lambda: F.tradeoff_figure()}.get(
        name, lambda: F.weights_figures(8, 2, 0, which=(name.replace("weights_", ""),)).popitem()[1])
    default = make()
    with F.figure_style("talk"):
        talk = make()
        assert F.minimum_font() == 14
        assert F.text_overlaps(talk) == [] and F.small_texts(talk, 14) == []
    assert F.minimum_font() == F.MIN_FONT_PT
    sizes = [min(t.get_fontsize() for t in plotting._texts(fig)) for fig in (default, talk)]
    assert sizes[1] >= sizes[0] + 4
    width, height = talk.get_size_inches()
    assert width <= 11.0 and height <= 8.5
    plt.close(default)
    plt.close(talk)
    with pytest.raises(ValueError):
        with F.figure_style("huge"):
            pass


def test_figures_help_says_which_figures_need_from(capsys):
    with pytest.raises(SystemExit):
        main(["figures", "--help"])
    text = capsys.readouterr().out
    need = text.split("Need --from RESULTS.jsonl")[1].split("Elsewhere")[0]
    assert "thresholds" in need and "sweep threshold" in need and "transfer" in need and "--append" in need
    computed = text.split("Computed (no input needed)")[1].split("Need --from")[0]
    for name in ("tradeoff", "margins", "construction", "weights_E", "attention", "trained_vs_g1"):
        assert name in computed
    assert "--style {default,talk}" in text


def test_figures_command_in_talk_style(tmp_path, capsys, cheap_drawing):
    """--style talk reaches the drawing: every label of a figure drawn by the command is at least 14 pt
    (a stand-in here; the slow case below checks G1's E itself)."""
    _talk_style(tmp_path, capsys)


@pytest.mark.slow
def test_figures_command_in_talk_style_every_figure(tmp_path, capsys):
    _talk_style(tmp_path, capsys)


def _talk_style(tmp_path, capsys):
    code = main(["figures", "--out", str(tmp_path), "--style", "talk", "--format", "svg", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["params"]["style"] == "talk"
    svg = (tmp_path / "weights_E.svg").read_text()
    sizes = {float(x) for x in re.findall(r"font-size: ([0-9.]+)px", svg)}
    assert sizes and min(sizes) >= 14  # editable text, every label at least 14 pt


def test_demo_style_needs_figures(capsys):
    assert main(["demo", "--style", "talk"]) == 2
    assert "--style applies to --figures" in capsys.readouterr().err


def test_alignment_recovers_a_planted_map_and_not_noise():
    rng = np.random.default_rng(0)
    target = rng.standard_normal((64, 10))
    A = rng.standard_normal((10, 10))
    planted = F.align_embeddings(target @ np.linalg.inv(A) + 0.5, target, fit=np.arange(48))
    assert planted["r2_held_out"] > 0.999 and planted["p"] == 11 and planted["n"] == 48
    noise = F.align_embeddings(rng.standard_normal((64, 10)), target, fit=np.arange(48))
    assert noise["r2_held_out"] < 0.2 and not noise["underdetermined"]
    assert F.align_embeddings(rng.standard_normal((8, 11)), target[:8])["underdetermined"]


def test_relation_means_against_a_loop_over_queries():
    from georecall.constructions.forward import forward
    from georecall.theory.tasks import task_for_seed
    from georecall.training.parameters import init_model

    task = task_for_seed(6, 3, 2)
    model = init_model(6, 3, 7, 12, rng=1, dtype=np.float64)
    means = F.relation_means(model, task)
    for r in range(3):
        rows = []
        for s in range(6):
            _, trace = forward(model, np.array([[6 + r, s]]), trace=True)
            rows.append(trace.hidden[0][0, -1])
        assert np.allclose(means[r], np.mean(rows, axis=0))


def test_figures_from_a_file_without_records_to_draw_are_refused(tmp_path, capsys, monkeypatch):
    """--from a model file, an empty file or another command's records: exit 2 naming the file, before any
    figure is drawn or the folder made; a file with one threshold record is the control."""
    from georecall.cli import commands_figures

    drawn: list = []
    monkeypatch.setattr(commands_figures, "make_figures",
                        lambda records, out, **kw: drawn.append(records) or [])
    model = tmp_path / "m.npz"
    np.savez(model, E=np.zeros((4, 4)))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    trial = tmp_path / "trials.jsonl"
    trial.write_text(json.dumps({"kind": "trial", "N": 8}) + "\n")
    out = tmp_path / "fig"
    for path, why in ((model, "not JSON: a model or other binary file?"), (empty, "(it is empty)"),
                      (trial, "1 line of another kind")):
        assert main(["figures", "--from", str(path), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"{path} holds no threshold or transfer records" in err and why in err
    assert drawn == [] and not out.exists()
    good = tmp_path / "thresholds.jsonl"
    good.write_text(json.dumps(_records()[0]) + "\n")
    assert main(["figures", "--from", str(good), "--out", str(out)]) == 0 and len(drawn) == 1


def test_figures_say_what_the_results_file_did_not_give(tmp_path, capsys, monkeypatch):
    """Skipped lines and a record figure the file had nothing for are said (on stdout, and in --json)."""
    from georecall.cli import commands_figures

    drawn = []

    def fake(records, out, **kw):  # draws the thresholds figure (the file has one) and a computed figure
        drawn.append(records)
        return [os.path.join(out, "thresholds.png"), os.path.join(out, "tradeoff.png")]

    monkeypatch.setattr(commands_figures, "make_figures", fake)
    results = tmp_path / "results.jsonl"
    threshold = _records()[0]
    results.write_text("not json\n" + json.dumps({"kind": "transfer"}) + "\n" + json.dumps(threshold) + "\n")
    assert main(["figures", "--from", str(results), "--out", str(tmp_path / "fig")]) == 0
    out = capsys.readouterr().out
    assert f"Note: {results}: skipped 1 torn, 1 alien line(s) of 3." in out
    assert "no usable transfer records" in out and "no usable threshold records" not in out
    assert drawn == [[threshold]]
    assert main(["figures", "--out", str(tmp_path / "fig"), "--json"]) == 0  # no file: nothing to say
    doc = json.loads(capsys.readouterr().out)
    assert doc["notes"] == [] and doc["problems"] is None
