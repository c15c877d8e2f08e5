"""The commands that draw or teach: ``figures``, ``demo`` and ``lecture``."""

from __future__ import annotations

import contextlib
import io
import os

from georecall import memory
from georecall.cli.common import (
    document,
    figure_files_need_a_folder,
    figure_options,
    input_file,
    output_dir,
    require_matplotlib,
)
from georecall.cli.params import (
    DemoParams,
    FiguresParams,
    LectureParams,
)
from georecall.errors import InputError
from georecall.experiments import demo
from georecall.experiments.figures import (
    construction_figure,
    figure_style,
    make_figures,
    save_figure,
    trained_beside_g1_figure,
    weights_figures,
)
from georecall.experiments.sweep_records import read_sweep
from georecall.memory import Estimate
from georecall.results_files import require_kind

__all__ = [
    "run_demo",
    "run_figures",
    "run_lecture",
]


def run_figures(p: FiguresParams) -> dict:
    """``figures``: the figures of a results file and the computed ones, at ``--dpi`` in each ``--format``.

    Parameters
    ----------
    p : FiguresParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        A missing ``--from`` file or one without a threshold or transfer record (empty, a model file, another
        command's records), an unusable ``--out`` folder, no matplotlib, or the estimate over the budget.
    """
    est = Estimate("figures")
    if p.source:
        input_file(p.source, "results file")
        est.add(f"records of {os.path.basename(p.source)}", 20 * os.path.getsize(p.source), "the results "
                                                                                            "file")
    est.add("computed figures (N = 4096)", 2 * memory.GIB // 4, "—")
    est.require(p.budget)
    out = output_dir(p.out)
    dpi, formats = figure_options(p)
    require_matplotlib()
    contents = read_sweep(p.source, budget=p.budget) if p.source else None
    if p.source and contents is not None:  # record figures asked for: a file without any is refused first
        require_kind(contents, p.source, ("threshold", "transfer"), "threshold or transfer records")
    records = contents.records if contents is not None else []
    with figure_style(p.style):
        paths = make_figures(records, out, seed=p.seed, dpi=dpi, formats=formats)
    notes = []
    if contents is not None:  # what the file did not give: said, not silently left out
        if contents.problems():
            notes.append(f"Note: {p.source}: {contents.problems()}.")
        drawn = {os.path.splitext(os.path.basename(path))[0] for path in paths}
        for name, kind in (("thresholds", "threshold"), ("transfer", "transfer")):
            if name not in drawn:
                notes.append(f"Note: no usable {kind} records in {p.source}: the {name} figure was not "
                             "drawn.")
    params = {"source": p.source, "out": out, "seed": p.seed, "dpi": dpi, "formats": list(formats),
              "style": p.style}
    return document(p, params, est, files=paths, problems=contents.problems() if contents else None,
                    notes=notes)


def run_demo(p: DemoParams) -> dict:
    """``demo``: the G1 walk-through (text), and with ``--figures DIR`` the construction drawn.

    Parameters
    ----------
    p : DemoParams

    Returns
    -------
    dict
        The document (its ``lines`` are the narration; no memory estimate: the sizes are capped).

    Raises
    ------
    InputError
        N or R over the demo's limits, ``--dpi`` / ``--format`` without ``--figures``, an unusable
        ``--figures`` folder, or no matplotlib for it.
    """
    demo.check_size(p.N, p.R)
    if p.show_weights:
        demo.check_show_weights(p.N)
    figure_files_need_a_folder(p, p.figures)  # --dpi, --format and --style
    files: list[str] = []
    if p.figures is not None:
        output_dir(p.figures, what="--figures folder")
        require_matplotlib()
    lines: list[str] = []
    with contextlib.redirect_stdout(io.StringIO()):
        numbers = demo.run_demo(p.N, p.R, seed=p.seed, out=lines.append, weights=p.show_weights)
    if p.figures is not None:
        dpi, formats = figure_options(p)
        os.makedirs(p.figures, exist_ok=True)
        names = numbers["relations"]
        with figure_style(p.style):
            drawn = {"construction": construction_figure(p.N, p.R, p.seed, query=numbers["query"],
                                                         relation_names=names)}
            drawn.update(weights_figures(p.N, p.R, p.seed, query=numbers["query"], relation_names=names))
            honest = demo.trained_beside_g1(p.N, p.R, p.seed)  # a size where the alignment cannot interpolate
            drawn["trained_vs_g1"] = trained_beside_g1_figure(honest["g1"], honest["trained"], honest["task"],
                                                              relation_names=names, fit=honest["fit"])
            lines.append(f"\ntrained_vs_g1: a model trained at N = {honest['N']} beside G1, its E aligned "
                         f"onto G1's by least squares ({honest['p']} parameters per coordinate, fitted on "
                         f"{honest['n']} subjects; smaller N would fit any E exactly): held-out R² "
                         f"{honest['r2_held_out']:.2f}")
            for name, fig in drawn.items():
                files += save_figure(fig, p.figures, name, dpi=dpi, formats=formats)
        lines.append(f"\nThe construction, its matrices and the trained model drawn: {', '.join(files)}")
    return document(p, {"N": p.N, "R": p.R, "seed": p.seed, "figures": p.figures,
                        "show_weights": p.show_weights, "style": p.style}, None, lines=lines, files=files)


def run_lecture(p: LectureParams) -> dict:
    """``lecture``: execute the lecture notebook and render it as one HTML page (teach extra).

    Parameters
    ----------
    p : LectureParams

    Returns
    -------
    dict
        The paths written (``notebook``, ``html``), the code cells run, the images embedded and the
        execution time.

    Raises
    ------
    InputError
        Without the teach extra, no notebook found (or the one given missing), an unusable ``--out``, or a
        cell that fails.
    """
    from georecall.experiments import lecture  # nbclient and nbconvert (the teach extra): on demand
    lecture.require_teach()
    source = p.notebook if p.notebook is not None else lecture.default_notebook()
    if source is None:
        raise InputError(f"no lecture notebook found: run from the repository checkout (it has "
                         f"{lecture.NOTEBOOK}) or give --notebook FILE.md")
    input_file(source, "notebook")
    lecture.read_notebook(source)  # an unreadable notebook is refused before the output folder is made
    out = output_dir(p.out)  # created by build_lecture, and removed again when the build fails
    built = lecture.build_lecture(source, out, timeout=p.timeout, progress=not (p.json or p.quiet))
    params = {"out": out, "notebook": source, "timeout": p.timeout}
    return document(p, params, None, **built)


