"""Typed parameters: one frozen dataclass per ``georecall`` command, built once from the parsed arguments.

The parser (:mod:`~georecall.cli.parser`) declares each command's options; the dataclass of the same
command here declares them again as typed fields, in the same order as the parser's declarations (the
parser's ``_add_<command>`` function names its class). :func:`from_namespace` converts the parsed
``argparse.Namespace`` into the dataclass and refuses (``TypeError``: a bug, exit 3) a field the parser does
not set or a parser option the dataclass does not declare, so the two cannot drift apart unnoticed
(``tests/test_cli_params.py`` checks every command); mypy then checks what the commands read.

Each dataclass's fields are its command's options, named by their dests (``--max-gib`` is ``max_gib``,
``--from`` is ``source``), with the types the parser produces; their meaning is the option's help
(``georecall COMMAND --help``). Shared options (:data:`~georecall.cli.parser.SHARED`) are mixins:
:class:`Seeded` (``--seed``), :class:`Json` (``--json``), :class:`Quiet` (``--quiet``), :class:`Budgeted`
(``--max-gib``). Every command has ``command`` and ``debug`` (:class:`Params`), ``budget`` (the
:class:`~georecall.memory.Budget` of ``--max-gib``, or the machine's default without it, created once when
the parameters are built) and ``progress`` (a property: progress lines on stderr, when the command offers
``--quiet`` and neither it nor ``--json`` was given).

Each option is validated once: ranges and choices by the parser's ``type=`` and ``choices=``, contradictory
pairs by ``parser.CONFLICTS``, and the few checks argparse cannot express (the ``--scheduler`` syntax) by the
dataclass's ``__post_init__``. The commands check what depends on several options or on files.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

from georecall import usercode
from georecall.errors import InputError
from georecall.memory import Budget
from georecall.theory.tasks import Attributes

__all__ = [
    "PARAMS",
    "STRUCTURE",
    "Budgeted",
    "BoundsParams",
    "CertifyMultiHopParams",
    "CertifyParams",
    "CertifySingleHopParams",
    "CheckMultiHopParams",
    "CheckParams",
    "CheckSingleHopParams",
    "CountParams",
    "DemoParams",
    "EvalParams",
    "ExportParams",
    "FigureFiles",
    "FiguresParams",
    "LectureParams",
    "Json",
    "Params",
    "PrecisionParams",
    "ProbeHiddenParams",
    "ProbeLmParams",
    "ProbeParams",
    "Quiet",
    "Scheduled",
    "Seeded",
    "StudyMechanismParams",
    "SweepThresholdParams",
    "Table",
    "TradeoffParams",
    "TrainParams",
    "TransferParams",
    "VerifyParams",
    "build",
    "check_scheduler",
    "from_namespace",
    "option_names",
]

# Dests the parser sets that are its structure, not a parameter: the sub-command names of each level.
STRUCTURE = frozenset({"group", "target"})


# ------------------------------------------------------------------------------------------- the mixins


@dataclass(frozen=True, kw_only=True)
class Params:
    """What every command's parameters have.

    Attributes
    ----------
    command : str
        The command ("check single-hop"), a key of ``commands.COMMANDS``.
    debug : bool
        ``--debug``: show the traceback of an exception raised by the user's own construction.
    build_timeout : float
        ``--build-timeout``: seconds each call into the user's own construction code may take
        (:mod:`georecall.usercode`).
    budget : Budget
        The memory budget, derived once from ``--max-gib`` (:class:`Budgeted`), or the default budget (half
        the machine's available memory) for a command that does not offer it.
    """

    command: str
    debug: bool
    build_timeout: float
    budget: Budget = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        max_gib = self.max_gib if isinstance(self, Budgeted) else None
        object.__setattr__(self, "budget", Budget.from_gib(max_gib))

    @property
    def progress(self) -> bool:
        """Progress lines on stderr: the command offers ``--quiet`` and neither ``--quiet`` nor ``--json`` was
        given."""
        return isinstance(self, Quiet) and not self.quiet and not (isinstance(self, Json) and self.json)


@dataclass(frozen=True, kw_only=True)
class Seeded:
    """``--seed S``: the run seed (commands where randomness exists)."""

    seed: int


@dataclass(frozen=True, kw_only=True)
class Json:
    """``--json``: print exactly one strict JSON document."""

    json: bool


@dataclass(frozen=True, kw_only=True)
class Quiet:
    """``--quiet``: no progress output on stderr (commands whose progress goes to stderr)."""

    quiet: bool


@dataclass(frozen=True, kw_only=True)
class Budgeted:
    """``--max-gib G``: the memory budget in GiB (``None``: the default); :attr:`Params.budget` is built from
    it."""

    max_gib: float | None


@dataclass(frozen=True, kw_only=True)
class Table:
    """``--format``, ``--columns``, ``--caption``, ``--label`` of a command printing a table."""

    format: str
    columns: str | None
    caption: str | None
    label: str | None


@dataclass(frozen=True, kw_only=True)
class FigureFiles:
    """``--dpi`` and ``--format`` (dest ``formats``) of the figures a command draws."""

    dpi: int | None
    formats: list[str] | None


# Matched whole (fullmatch: "$" would let a trailing newline through), ASCII only: a host name or IPv4
# address of letters, digits, dots and hyphens, or a bracketed IPv6 address.
_SCHEDULER = re.compile(r"local:(?P<workers>[0-9]+)|tcp://(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?"
                        r"|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]+)", re.ASCII)


def check_scheduler(text: str | None) -> None:
    """Refuse a malformed ``--scheduler`` value (the command line's syntax: ``local:W`` with 1 <= W <= 1024,
    or ``tcp://HOST:PORT`` with 1 <= PORT <= 65535).

    Parameters
    ----------
    text : str or None
        The value (``None``: no scheduler, accepted).

    Raises
    ------
    InputError
        The value does not match, or W or PORT is out of range.
    """
    if text is None:
        return
    match = _SCHEDULER.fullmatch(text) if isinstance(text, str) else None
    if not match:
        raise InputError(f"--scheduler must be local:W (W workers) or tcp://HOST:PORT, got {text!r}")
    if match["workers"] is not None and not 1 <= int(match["workers"]) <= 1024:
        raise InputError(f"--scheduler local:W needs 1 <= W <= 1024, got {match['workers']}")
    if match["port"] is not None and not 1 <= int(match["port"]) <= 65535:
        raise InputError(f"--scheduler port must be 1..65535, got {match['port']}")


@dataclass(frozen=True, kw_only=True)
class Scheduled:
    """``--workers``, ``--scheduler``, ``--connect-timeout``, ``--worker-timeout`` of a command that runs jobs
    (``--workers`` with ``--scheduler`` is refused by ``parser.CONFLICTS``; the scheduler's syntax here)."""

    workers: int
    scheduler: str | None
    connect_timeout: float
    worker_timeout: float

    def __post_init__(self) -> None:
        check_scheduler(self.scheduler)

    @property
    def local_workers(self) -> int:
        """The processes the jobs run in on this machine: W of ``--scheduler local:W``, else ``--workers``."""
        if self.scheduler is not None and self.scheduler.startswith("local:"):
            return int(self.scheduler.split(":")[1])
        return self.workers

    @property
    def local(self) -> bool:
        """The jobs run on this machine (no scheduler, or ``local:W``)."""
        return self.scheduler is None or self.scheduler.startswith("local:")


# ------------------------------------------------------------------------ the commands, in parser order


@dataclass(frozen=True, kw_only=True)
class VerifyParams(Params, Seeded, Json, Quiet, Budgeted):
    """``georecall verify`` (``declarations._add_verify``)."""

    construction: list[str] | None
    full: bool = False


@dataclass(frozen=True, kw_only=True)
class CheckParams(Params, Seeded, Json, Quiet, Budgeted):
    """What ``check single-hop`` and ``check multi-hop`` share."""

    N: int
    R: int
    construction: str
    codes: str | None
    D: int | None
    gate: float | None
    beta: float | None
    task: str | None
    builder_options: dict[str, Any] | None  # the options a spec declares itself, as given (None: none)


@dataclass(frozen=True, kw_only=True)
class CheckSingleHopParams(CheckParams):
    """``georecall check single-hop`` (``declarations._add_check_single_hop``)."""

    integer: bool
    lam: float
    dtype: str
    bits: int | None
    save: str | None
    attributes: Attributes
    symmetric: bool


@dataclass(frozen=True, kw_only=True)
class CheckMultiHopParams(CheckParams):
    """``georecall check multi-hop`` (``declarations._add_check_multi_hop``)."""

    k: int
    attention: str


@dataclass(frozen=True, kw_only=True)
class CertifyParams(Params, Seeded, Json, Quiet, Budgeted):
    """What ``certify single-hop`` and ``certify multi-hop`` share (``declarations._add_certify``)."""

    construction: str
    N: int
    R: int
    codes: str | None
    D: int | None
    gate: float | None
    max_points: int
    witness: str | None
    builder_options: dict[str, Any] | None  # the options a spec declares itself, as given (None: none)


@dataclass(frozen=True, kw_only=True)
class CertifySingleHopParams(CertifyParams):
    """``georecall certify single-hop``."""

    lam: float
    attributes: Attributes
    symmetric: bool
    integer: bool
    float: bool  # --float (declared last: the name shadows the type in this class body)


@dataclass(frozen=True, kw_only=True)
class CertifyMultiHopParams(CertifyParams):
    """``georecall certify multi-hop``."""

    k: int
    attention: str
    beta: float | None


@dataclass(frozen=True, kw_only=True)
class TradeoffParams(Params, Json, Table):
    """``georecall tradeoff`` (``declarations._add_tradeoff``): formulas only, so no seed, budget option or
    progress."""

    N: int
    R: int
    k_max: int
    construction: list[str] | None


@dataclass(frozen=True, kw_only=True)
class BoundsParams(Params, Json, Quiet, Budgeted, Table):
    """``georecall bounds`` (``declarations._add_bounds``)."""

    N: list[int]
    R: list[int]
    k: list[int]
    bits: list[float] | None
    gaps: bool
    needed: list[str] | None
    construction: list[str] | None


@dataclass(frozen=True, kw_only=True)
class CountParams(Params, Json, Quiet, Budgeted, Table):
    """``georecall count`` (``declarations._add_count``)."""

    N: int
    R: int
    k: int


@dataclass(frozen=True, kw_only=True)
class PrecisionParams(Params, Seeded, Json, Budgeted, Table):
    """``georecall precision`` (``declarations._add_precision``)."""

    construction: str
    k: int | None
    codes: str | None
    N: int
    R: int
    D: int | None
    max_bits: int


@dataclass(frozen=True, kw_only=True)
class TrainParams(Params, Seeded, Json, Quiet, Budgeted):
    """``georecall train`` (``declarations._add_train``)."""

    N: int
    R: int
    d: int
    m: int | None
    k: int
    cot: bool
    attention: str
    heads: int
    mode: str
    freeze: list[str]
    steps: int
    lr: float
    optimizer: str
    batch_size: int | None
    dtype: str
    weight_decay: float
    eps_form: str
    init_scale: float
    tie_readout: bool
    path: str
    log_every: int
    out: str | None


@dataclass(frozen=True, kw_only=True)
class SweepThresholdParams(Params, Json, Quiet, Budgeted, Scheduled):
    """``georecall sweep threshold`` (``declarations._add_sweep``)."""

    N: list[int]
    R: list[int]
    modes: list[str]
    seeds: list[int]
    steps: int
    lr: float
    width_factor: int
    k: int
    cot: bool
    attention: str
    heads: int
    d_min: int
    d_max: int
    resolution: int
    lock_timeout: float | None
    out: str
    search: str = "doubling"
    budget_hours: float | None = None

    def __post_init__(self) -> None:
        Params.__post_init__(self)
        Scheduled.__post_init__(self)


@dataclass(frozen=True, kw_only=True)
class StudyMechanismParams(Params, Json, Quiet, Budgeted, Scheduled, FigureFiles):
    """``georecall study mechanism`` (``declarations._add_study``)."""

    quick: bool
    grid: str | None
    seeds: list[int]
    out: str
    summary: str | None
    figures: str | None
    style: str

    def __post_init__(self) -> None:
        Params.__post_init__(self)
        Scheduled.__post_init__(self)


@dataclass(frozen=True, kw_only=True)
class ProbeParams(Params, Seeded, Json, Budgeted):
    """``georecall probe`` (``declarations._add_probe``)."""

    model: str
    task: str | None
    holdout: float
    subjects: int


@dataclass(frozen=True, kw_only=True)
class EvalParams(Params, Json, Quiet, Budgeted):
    """``georecall eval`` (``declarations._add_eval``)."""

    model: str
    task: str | None
    k: int | None
    cot: bool
    arith: str = "exact"


@dataclass(frozen=True, kw_only=True)
class TransferParams(Params, Seeded, Json, Budgeted):
    """``georecall transfer`` (``declarations._add_transfer``)."""

    model: str
    task: str | None
    steps: int
    lr: float
    append: str | None
    label: str | None


@dataclass(frozen=True, kw_only=True)
class ProbeHiddenParams(Params, Seeded, Json, Budgeted):
    """``georecall probe-hidden`` (``declarations._add_probe_hidden``)."""

    states: str
    holdout: float


@dataclass(frozen=True, kw_only=True)
class ProbeLmParams(Params, Seeded, Json, Quiet, Budgeted):
    """``georecall probe-lm`` (``declarations._add_probe_lm``)."""

    model: str
    facts: str | None
    layers: list[int] | None
    intervene_layers: list[int] | None
    lre_layers: list[int] | None
    template: int
    cache: str | None
    no_random_control: bool
    batch_size: int
    threads: int
    figures: str | None


@dataclass(frozen=True, kw_only=True)
class FiguresParams(Params, Seeded, Json, Budgeted, FigureFiles):
    """``georecall figures`` (``declarations._add_figures``)."""

    source: str | None
    out: str
    style: str


@dataclass(frozen=True, kw_only=True)
class DemoParams(Params, Seeded, FigureFiles):
    """``georecall demo`` (``declarations._add_demo``): narrated text, so no ``--json``."""

    N: int
    R: int
    figures: str | None
    show_weights: bool
    style: str


@dataclass(frozen=True, kw_only=True)
class LectureParams(Params, Json, Quiet):
    """``georecall lecture`` (``declarations._add_lecture``): execute the lecture notebook, render its
    HTML."""

    out: str
    notebook: str | None
    timeout: int


@dataclass(frozen=True, kw_only=True)
class ExportParams(Params, Seeded, Json, Quiet, Budgeted):
    """``georecall export`` (``declarations._add_export``). With ``--model`` the sizes and the seed (which
    draw a construction's task) do not apply: they are None (``parser.CONFLICTS`` refuses them given)."""

    out: str
    to: str
    construction: str | None
    model: str | None
    N: int | None
    R: int | None
    k: int | None
    cot: bool
    codes: str | None
    D: int | None
    attention: str | None
    beta: float | None
    gate: float | None
    task: str | None
    dtype: str
    no_check: bool
    builder_options: dict[str, Any] | None  # the options a spec declares itself, as given (None: none)

    def __post_init__(self) -> None:
        Params.__post_init__(self)
        if self.model is not None:  # the parser's defaults, for a construction: not this model's
            for name in ("N", "R", "seed"):
                object.__setattr__(self, name, None)


# Each command's parameters (the keys are ``commands.COMMANDS``'s).
PARAMS: dict[str, type[Params]] = {
    "verify": VerifyParams,
    "check single-hop": CheckSingleHopParams,
    "check multi-hop": CheckMultiHopParams,
    "certify single-hop": CertifySingleHopParams,
    "certify multi-hop": CertifyMultiHopParams,
    "tradeoff": TradeoffParams,
    "bounds": BoundsParams,
    "count": CountParams,
    "precision": PrecisionParams,
    "train": TrainParams,
    "sweep threshold": SweepThresholdParams,
    "study mechanism": StudyMechanismParams,
    "probe": ProbeParams,
    "eval": EvalParams,
    "transfer": TransferParams,
    "probe-hidden": ProbeHiddenParams,
    "probe-lm": ProbeLmParams,
    "figures": FiguresParams,
    "demo": DemoParams,
    "export": ExportParams,
    "lecture": LectureParams,
}

P = TypeVar("P", bound=Params)


def option_names(cls: type[Params]) -> set[str]:
    """The names a parser must set for ``cls``.

    Parameters
    ----------
    cls : type
        A :class:`Params` dataclass.

    Returns
    -------
    set of str
        Its fields given to ``__init__`` (not the derived ``budget``).
    """
    return {f.name for f in dataclasses.fields(cls) if f.init}


def from_namespace(cls: type[P], namespace: argparse.Namespace) -> P:
    """Convert parsed arguments into the parameters ``cls``, refusing any mismatch between the two.

    Parameters
    ----------
    cls : type
        A :class:`Params` dataclass.
    namespace : argparse.Namespace
        What the parser returned (its structural dests :data:`STRUCTURE` are ignored).

    Returns
    -------
    Params
        An instance of ``cls``.

    Raises
    ------
    TypeError
        The parser set an option ``cls`` does not declare, or did not set one it declares (a bug: parser and
        dataclass drifted apart).
    InputError
        A value the dataclass's ``__post_init__`` refuses (bad input).
    """
    given = {name: value for name, value in vars(namespace).items() if name not in STRUCTURE}
    declared = option_names(cls)
    missing, extra = sorted(declared - set(given)), sorted(set(given) - declared)
    if missing or extra:
        raise TypeError(f"{cls.__name__} does not match the parser of {given.get('command')!r}: missing "
                        f"{missing}, not declared {extra}")
    return cls(**given)


def build(namespace: argparse.Namespace) -> Params:
    """The parameters of the command ``namespace.command`` (:data:`PARAMS`), built from the parsed arguments.

    Parameters
    ----------
    namespace : argparse.Namespace
        What the parser returned.

    Returns
    -------
    Params

    Raises
    ------
    TypeError
        The parser and the command's dataclass disagree (:func:`from_namespace`).
    InputError
        A value the dataclass refuses.
    """
    params = from_namespace(PARAMS[namespace.command], namespace)
    as_json = isinstance(params, Json) and params.json  # demo has no --json: not a Json command
    if as_json:
        # --json: nothing on stderr at exit 0, whatever the executor. Dask's worker processes configure
        # their logging from the environment they inherit when they start (their INFO lines go to stderr).
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")
    usercode.set_limits(timeout=params.build_timeout, budget=params.budget,  # for a user's construction
                        json=as_json, command=params.command)
    return params
