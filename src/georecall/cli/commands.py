"""Commands: one function per ``georecall`` command, returning a result document (no printing).

Each ``run_<command>(p)`` takes that command's typed parameters (:mod:`georecall.cli.params`, built
once from the parsed arguments, the memory budget included), validates what depends on several options or on
files (contradictory combinations the parser cannot see, output paths, damaged input files, the memory
estimate against ``p.budget``) *before* any work, runs the library, and returns a document: a dict with
``command``, ``version``, ``seed``, ``params``, ``status`` (the exit code: 0 pass, 1 a check failed),
``memory`` (the estimate and the budget) and the command's results. Bad input raises
:class:`~georecall.errors.InputError` (exit 2). Progress lines on stderr are the library's, and only when
``p.progress`` is true; rendering is :mod:`georecall.cli.render`'s job.

The commands live by concept: :mod:`.commands_check` (verify, check, certify, precision),
:mod:`.commands_tables` (tradeoff, bounds, count), :mod:`.commands_training` (train, sweep, study),
:mod:`.commands_models` (the commands on model files and hidden states: probe, eval, transfer, probe-hidden,
probe-lm, export) and :mod:`.commands_figures` (figures, demo, lecture); what they share (the document, the
limits, the path checks) is :mod:`.common`. This module is their one table, :data:`COMMANDS`.

Imports: the library modules are imported by those modules at module level, except those that pull in scipy
or networkx (the bound tables and counts, the trainer and the sweep: measured to slow ``georecall --help`` by
about 0.4 s) and the ``lm`` extra's package (only ``probe-lm`` imports it); those are imported by the command
that needs them. The rows of ``verify`` are not imported at all: :func:`verify_rows` finds them by their
entry point.
"""

from __future__ import annotations

from collections.abc import Callable

from georecall.cli.commands_check import (
    VERIFY_ROWS,
    run_certify,
    run_check_multi_hop,
    run_check_single_hop,
    run_precision,
    run_verify,
    verify_estimate,
    verify_rows,
)
from georecall.cli.commands_figures import run_demo, run_figures, run_lecture
from georecall.cli.commands_models import (
    run_eval,
    run_export,
    run_probe,
    run_probe_hidden,
    run_probe_lm,
    run_transfer,
)
from georecall.cli.commands_tables import run_bounds, run_count, run_tradeoff
from georecall.cli.commands_training import run_study_mechanism, run_sweep_threshold, run_train
from georecall.cli.common import LIMITS, output_dir, output_path

__all__ = [
    "COMMANDS",
    "LIMITS",
    "VERIFY_ROWS",
    "output_dir",
    "output_path",
    "run_bounds",
    "run_certify",
    "run_check_multi_hop",
    "run_check_single_hop",
    "run_count",
    "run_demo",
    "run_eval",
    "run_export",
    "run_figures",
    "run_lecture",
    "run_precision",
    "run_probe",
    "run_probe_hidden",
    "run_probe_lm",
    "run_study_mechanism",
    "run_sweep_threshold",
    "run_tradeoff",
    "run_train",
    "run_transfer",
    "run_verify",
    "verify_estimate",
    "verify_rows",
]

# Each command's function; it takes the parameters ``params.PARAMS[command]`` (tests/test_cli_params.py).
COMMANDS: dict[str, Callable[..., dict]] = {
    "verify": run_verify,
    "check single-hop": run_check_single_hop,
    "check multi-hop": run_check_multi_hop,
    "certify single-hop": run_certify,
    "certify multi-hop": run_certify,
    "tradeoff": run_tradeoff,
    "bounds": run_bounds,
    "count": run_count,
    "precision": run_precision,
    "train": run_train,
    "sweep threshold": run_sweep_threshold,
    "study mechanism": run_study_mechanism,
    "probe": run_probe,
    "eval": run_eval,
    "transfer": run_transfer,
    "probe-hidden": run_probe_hidden,
    "probe-lm": run_probe_lm,
    "figures": run_figures,
    "demo": run_demo,
    "export": run_export,
    "lecture": run_lecture,
}
