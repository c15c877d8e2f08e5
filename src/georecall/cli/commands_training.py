"""The training commands: ``train``, ``sweep threshold`` and ``study mechanism``."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from georecall import estimates
from georecall.cli.common import (
    count_results_file,
    document,
    figure_files_need_a_folder,
    figure_options,
    input_file,
    output_dir,
    output_path,
    require_enumerable,
    require_matplotlib,
)
from georecall.cli.params import (
    StudyMechanismParams,
    SweepThresholdParams,
    TrainParams,
)
from georecall.constructions.storage import save_model
from georecall.errors import InputError
from georecall.experiments import study, study_design, study_report
from georecall.experiments.plotting import figure_style
from georecall.experiments.sweep import sweep
from georecall.experiments.sweep_cost import measure_step_seconds
from georecall.experiments.sweep_fit import fit_thresholds, summary_table
from georecall.experiments.sweep_trial import FROZEN_GROUPS, TrialSettings
from georecall.io import atomic_write
from georecall.memory import Estimate
from georecall.theory import seeds
from georecall.theory.tasks import task_for_seed
from georecall.training.parameters import init_model
from georecall.training.train import train, training_data
from georecall.verify.checking.exact import evaluate

__all__ = [
    "run_study_mechanism",
    "run_sweep_threshold",
    "run_train",
]


# ---------------------------------------------------------------------------------------------- training


def _train_options(p: TrainParams) -> None:
    if (p.k > 1 or p.cot) and p.attention != "softmax":
        raise InputError(f"k-hop{' and chain-of-thought' if p.cot else ''} queries need softmax attention to "
                         "pick a hop: add --attention softmax")
    if p.attention == "uniform" and p.heads > 1:
        raise InputError("--heads applies to softmax attention; uniform attention has one head")
    # --lr positive and finite: the parser's type


def _train_estimate(p: TrainParams, m: int) -> tuple[Estimate, int | None]:
    """The trainer's estimate against the budget, and the rows per gradient chunk (``None``: no chunking)
    that make it fit when the whole batch does not (the same gradient, to rounding). The final exact
    evaluation's chunks (the estimate's final check) are counted before the piece size is chosen."""
    # the final exact evaluation's chunks are the estimate's "final exhaustive check", sized by the budget
    shape: dict[str, Any] = dict(k=p.k, cot=p.cot, heads=p.heads, batch_size=p.batch_size, dtype=p.dtype,
                                 budget=p.budget)
    budget = p.budget.max_bytes
    est = estimates.train_estimate(p.N, p.R, p.d, m, **shape)
    max_rows = None
    if est.total > budget:  # chunk the batch's gradient before refusing
        one = estimates.train_estimate(p.N, p.R, p.d, m, **shape, max_rows=1).total
        per_row = estimates.train_estimate(p.N, p.R, p.d, m, **shape, max_rows=2).total - one
        if per_row > 0 and one <= budget:
            max_rows = max(1, int((budget - one) // per_row))
            est = estimates.train_estimate(p.N, p.R, p.d, m, **shape, max_rows=max_rows)
        else:  # not even one query at a time fits: name what does not shrink with pieces
            est = estimates.train_estimate(p.N, p.R, p.d, m, **shape, max_rows=1)
    return est.require(p.budget), max_rows


def _knowledge(p: TrainParams, model, frozen: tuple[str, ...], reached: bool) -> dict:
    """Bits of knowledge the task holds, per parameter of the trained model (all, and the trained ones)."""
    # networkx (sweep_knowledge counts with bounds.counting): kept off georecall --help
    from georecall.experiments.sweep_knowledge import BITS_REFERENCES, knowledge_bits
    bits = knowledge_bits(p.N, p.R, p.k)
    n_params = model.parameter_count()
    arrays = model.arrays()
    n_trained = n_params - sum(int(arrays[g].size) for g in frozen if g in arrays)
    return {**bits, "parameters": n_params, "trained_parameters": n_trained,
            "bits_per_parameter": bits["bits"] / n_params,
            "bits_per_trained_parameter": bits["bits"] / n_trained if n_trained else None,
            "stored": bool(reached), "references": dict(BITS_REFERENCES)}


def run_train(p: TrainParams) -> dict:
    """``train``: the NumPy trainer on every fact (or k-hop query, or CoT step) of THE seeded task.

    Parameters
    ----------
    p : TrainParams

    Returns
    -------
    dict
        The document (``reached``: 100% within the step budget).

    Raises
    ------
    InputError
        k hops or CoT without softmax attention, ``--heads`` with uniform attention, an unwritable ``--out``,
        or the estimate over the budget even with the gradient chunked.
    FloatingPointError
        Training diverged (exit 1).
    """
    _train_options(p)
    require_enumerable(p.N, p.R, p.k)
    out = output_path(p.out, suffix=".npz", what="model file") if p.out else None
    m = p.m if p.m is not None else 4 * p.d
    est, max_rows = _train_estimate(p, m)
    task = task_for_seed(p.N, p.R, p.seed)
    tokens, answers, positions, T = training_data(task, p.k, p.cot)
    model = init_model(p.N, p.R, p.d, m, attention=p.attention, heads=p.heads,
                       positions=T if p.k > 1 or p.cot else None, rng=seeds.rng(p.seed, "init"),
                       dtype=np.dtype(p.dtype), init_scale=p.init_scale, tied_readout=p.tie_readout)
    frozen = tuple(FROZEN_GROUPS[p.mode]) + tuple(g for g in p.freeze if g not in FROZEN_GROUPS[p.mode])
    options: dict[str, Any] = {"weight_decay": p.weight_decay, "tie_readout": p.tie_readout,
                               "eps_form": p.eps_form, "path": p.path, "max_rows": max_rows}
    result = train(model, tokens, answers, steps=p.steps, lr=p.lr, optimizer=p.optimizer,
                   batch_size=p.batch_size, frozen=frozen, dtype=np.dtype(p.dtype), positions=positions,
                   rng=seeds.rng(p.seed, "batches"), log_every=p.log_every if p.progress else 0, **options)
    options["gradient_path"] = options.pop("path")  # (a model file's record has its own "path")
    params = {"N": p.N, "R": p.R, "k": p.k, "cot": p.cot, "d": p.d, "m": m, "attention": p.attention,
              "heads": p.heads, "mode": p.mode, "frozen": list(frozen), "steps": p.steps, "lr": p.lr,
              "optimizer": p.optimizer, "batch_size": p.batch_size, "dtype": p.dtype, "seed": p.seed,
              "init_scale": p.init_scale, **options}
    if out:
        atomic_write(out, lambda f: save_model(result.model, f, extra_arrays={"task_table": task.table},
                                               **params))
    final = evaluate(result.model, tokens, answers, positions=positions, budget=p.budget)
    accuracy = {"accuracy": final.accuracy, "n_correct": final.n_correct, "queries": final.n_queries,
                "arith": final.arith, "n_redecided": final.n_redecided, "n_undecided": final.n_undecided,
                "min_margin": {"lo": final.min_margin},
                "meaning": "the trained weights' own function in exact arithmetic, on every training query"}
    return document(p, params, est, knowledge=_knowledge(p, result.model, frozen, result.reached),
                    final_accuracy=accuracy,
                    reached=final.exact, steps_run=result.steps, epochs=result.epochs, path=result.path,
                    answers=int(answers.size), final_loss=result.losses[-1],
                    final_batch_accuracy=result.accuracies[-1], seconds=round(result.seconds, 3), out=out)


def _sweep_estimate(p: SweepThresholdParams, out: str) -> Estimate:
    """The sweep's estimate: the largest trial at ``--d-max`` in each worker, and the results file read
    first."""
    worst = max((estimates.train_estimate(N, R, p.d_max, p.width_factor * p.d_max, k=p.k, cot=p.cot,
                                          heads=p.heads, what="sweep threshold (one trial at --d-max)")
                 for N in p.N for R in p.R), key=lambda e: e.total)
    worst.parts = [(label, nbytes, "N, R or --d-max") for label, nbytes, _ in worst.parts]
    est = estimates.workers_estimate("sweep threshold", worst, p.local_workers, local=p.local,
                                     option="--scheduler local:W" if p.scheduler else "--workers")
    count_results_file(est, out)
    return est.require(p.budget)


def run_sweep_threshold(p: SweepThresholdParams) -> dict:
    """``sweep threshold``: the smallest d reaching 100% per (N, R, mode, seed), resumable JSONL, fits.

    Parameters
    ----------
    p : SweepThresholdParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        ``--d-min`` above ``--d-max``, k hops or CoT without softmax, more queries than can be enumerated, an
        unwritable ``--out``, the estimate over the budget, or what the sweep refuses (a damaged results
        file, a lock held, no Dask scheduler).
    """
    # networkx (sweep_knowledge counts with bounds.counting): kept off georecall --help
    from georecall.experiments.sweep_knowledge import bits_per_parameter, knowledge_table
    if p.d_min > p.d_max:
        raise InputError(f"--d-min ({p.d_min}) must not exceed --d-max ({p.d_max})")
    # N >= 2, --lr, --lock-timeout and --connect-timeout in range: the parser's types; --scheduler: its params
    if (p.k > 1 or p.cot) and p.attention != "softmax":
        raise InputError("k-hop and chain-of-thought queries need softmax attention: add --attention softmax")
    for N in p.N:
        for R in p.R:
            require_enumerable(N, R, p.k)
    out = output_path(p.out, what="results file")
    est = _sweep_estimate(p, out)
    settings = TrialSettings(steps=p.steps, lr=p.lr, width_factor=p.width_factor, k=p.k, cot=p.cot,
                             attention=p.attention, heads=p.heads)
    notes: list[str] = []
    cost_estimates: list[dict] = []
    records = sweep(out, p.N, p.R, p.modes, p.seeds, settings=settings, d_min=p.d_min, d_max=p.d_max,
                    resolution=p.resolution, workers=p.workers, progress=p.progress, scheduler=p.scheduler,
                    lock_timeout=p.lock_timeout, connect_timeout=p.connect_timeout,
                    log=None if p.progress else notes.append, worker_timeout=p.worker_timeout,
                    budget=p.budget, search=p.search, budget_hours=p.budget_hours,
                    step_seconds_fallback=lambda N, R, d: measure_step_seconds(N, R, d, settings),
                    on_estimate=cost_estimates.append)
    fits = fit_thresholds(records)
    params = {"N": p.N, "R": p.R, "modes": p.modes, "seeds": p.seeds, "d_min": p.d_min, "d_max": p.d_max,
              "resolution": p.resolution, "workers": p.workers, "scheduler": p.scheduler,
              "search": p.search, "budget_hours": p.budget_hours, "settings": settings.__dict__}
    knowledge = bits_per_parameter(records)
    summary = summary_table(records) + ("\n" + knowledge_table(knowledge) if knowledge else "")
    return document(p, params, est, out=out, settings=settings.__dict__, thresholds=records, fits=fits,
                    summary=summary, bits_per_parameter=knowledge, notes=notes,
                    estimate=cost_estimates[0] if cost_estimates else None)


def run_study_mechanism(p: StudyMechanismParams) -> dict:
    """``study mechanism``: run (or resume) the declared grid, then summarize; or only summarize a file.

    Parameters
    ----------
    p : StudyMechanismParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        ``--dpi`` / ``--format`` without ``--figures``, an unusable ``--figures`` folder or no matplotlib,
        ``--quick`` with ``--grid``, an unknown grid, a missing ``--summary`` file or unwritable ``--out``,
        the estimate over the budget, or what the study refuses.
    """
    # --workers with --scheduler: refused by the parser (parser.CONFLICTS); --scheduler's syntax: its params
    figures_dir = None
    figure_files_need_a_folder(p, p.figures)  # --dpi, --format and --style
    if p.figures is not None:  # refused before any training: no folder, or no matplotlib to draw with
        figures_dir = output_dir(p.figures, what="--figures folder")
        require_matplotlib()
    notes: list[str] = []
    if p.grid is not None and p.quick:
        raise InputError("--quick and --grid do not combine (--quick is --grid quick)")
    grid_name = p.grid or ("quick" if p.quick else "default")
    if grid_name not in study_design.GRIDS:
        raise InputError(f"--grid must be one of {sorted(study_design.GRIDS)}, got {grid_name!r}")
    workers = p.workers
    if p.summary is not None:
        path = input_file(p.summary, "results file")
        est = Estimate("study mechanism --summary")
    else:
        path = output_path(p.out, what="results file")
        workers = p.local_workers
        est = study.estimate(grid_name, p.seeds, workers=workers, local=p.local)
    count_results_file(est, path)
    est.require(p.budget)
    if p.summary is None:
        study.run_study(path, grid_name, seeds=p.seeds, workers=p.workers, scheduler=p.scheduler,
                        progress=p.progress, connect_timeout=p.connect_timeout,
                        log=None if p.progress else notes.append, worker_timeout=p.worker_timeout,
                        budget=p.budget)
    summary = study_report.summarize(path, budget=p.budget)
    files: list[str] = []
    if figures_dir is not None:
        os.makedirs(figures_dir, exist_ok=True)
        dpi, formats = figure_options(p)
        with figure_style(p.style):
            files = study_report.figures(summary, figures_dir, log=None if p.progress else notes.append,
                                         dpi=dpi, formats=formats)
        if not files:  # matplotlib vanished between the check and now: say so, do not pass silently
            raise InputError("no figures were written (matplotlib could not be imported)")
    params = {"grid": grid_name, "seeds": p.seeds, "workers": workers, "scheduler": p.scheduler, "out": path,
              "summary_only": p.summary is not None, "figures": figures_dir,
              "style": p.style if figures_dir is not None else None}
    return document(p, params, est, out=path, summary=summary, text=study_report.render_summary(summary),
                    figures=files, notes=notes)


