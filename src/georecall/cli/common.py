"""What the commands share: the result document, the hard limits checked before any estimate, output and
input paths validated before the work, the construction a command names, the figure options."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

import numpy as np

from georecall import __version__, estimates, memory, npy_headers
from georecall.cli.params import (
    FigureFiles,
    Params,
    Seeded,
)
from georecall.constructions import registry
from georecall.errors import InputError
from georecall.experiments.figures import (
    DEFAULT_DPI,
    DEFAULT_FORMATS,
    PLOT_HINT,
    have_matplotlib,
)
from georecall.io import check_path, validate_output_path, write_error
from georecall.memory import Estimate
from georecall.theory.tasks import Attributes, Task

__all__ = [
    "LIMITS",
    "binary_codes_fit",
    "code_kind",
    "constructions_loaded_once",
    "count_results_file",
    "document",
    "figure_files_need_a_folder",
    "figure_options",
    "input_file",
    "output_dir",
    "output_path",
    "require_enumerable",
    "require_matplotlib",
    "resolve_spec",
    "task_file",
    "user_constructions",
]


# Hard limits checked before any estimate or allocation (the memory estimate refuses far below most of them).
LIMITS: dict[str, int] = {
    "N": 2**40,  # entities
    "R": 2**20,  # relations
    "k": 32,  # hops (Task.k_hop indexes with k + 1 NumPy dimensions; NumPy allows 64)
    "D": 2**20,  # code length (constructions.codes refuses beyond)
    "d": 2**24,  # residual width
    "m": 2**30,  # MLP width
    "heads": 1024,
    "steps": 10**9,
    "queries": 2**62,  # N·R^k: every query is enumerated
    "bounds_N": 2**53,  # the tradeoff bound scans M in float64: exact below 2^53
    "count_paths": 2**20,  # R^k: closed forms N^(R^k) are exact integers
    "bits": 64,
}

def document(p: Params, params: dict, est: Estimate | None, *, passed: bool | None = None, **results) -> dict:
    """The result document of command ``p.command``: ``command``, ``version``, ``seed``, ``params``,
    ``status``, ``memory`` (``est`` against ``p.budget``, when ``est`` is given) and ``results``.

    A command that checks something names its outcome ``passed`` (CONTRIBUTING.md, "One name along the check
    path"): the document carries it, and its ``status`` (the exit code) is derived from it here and nowhere
    else: 0 passed, 1 a check failed. A command without a check (``passed`` None) has status 0.

    Parameters
    ----------
    p : Params
        The command's parameters.
    params : dict
        The parameters the document records.
    est : Estimate or None
        The memory estimate required before the work.
    passed : bool, optional
        The command's outcome, when it checks something.
    **results
        The command's results.

    Returns
    -------
    dict
    """
    doc = {"command": p.command, "version": __version__, "seed": p.seed if isinstance(p, Seeded) else None,
           "params": params, "status": 0 if passed is None or passed else 1}
    if passed is not None:
        doc["passed"] = bool(passed)
    if est is not None:
        doc["memory"] = {**est.as_dict(), "budget_gib": round(p.budget.max_bytes / memory.GIB, 6)}
    doc.update(results)
    return doc


def require_enumerable(N: int, R: int, k: int) -> None:
    """Refuse more queries than can be enumerated.

    Parameters
    ----------
    N, R, k : int
        Entities, relations, hops: N·R^k queries.

    Raises
    ------
    InputError
        N·R^k over ``LIMITS["queries"]``.
    """
    if N * R**k > LIMITS["queries"]:
        raise InputError(f"N·R^k = {N}·{R}^{k} queries is more than can be enumerated (limit 2^62): lower "
                         f"N, R "
                         "or k")


def code_kind(codes: str | None, spec: registry.ConstructionSpec) -> str | None:
    """The codebook kind a command builds with: ``--codes`` when given, else the construction's own
    (``spec.codes``: "binary" for the built-ins; None for a construction whose codes are its own, which is
    never taken for binary).

    Parameters
    ----------
    codes : str or None
        ``--codes``.
    spec : ConstructionSpec

    Returns
    -------
    str or None
    """
    return codes if codes is not None else spec.codes


def binary_codes_fit(codes: str | None, D: int | None, N: int) -> None:
    """Refuse binary codes too short to tell N entities apart.

    Parameters
    ----------
    codes : str or None
        The code kind the build uses (:func:`code_kind`; None: the construction's own codes).
    D : int or None
        The code length asked for.
    N : int
        Entities.

    Raises
    ------
    InputError
        Binary codes with 2^D < N.
    """
    if codes == "binary" and D is not None and D < 63 and 2**D < N:
        raise InputError(f"binary codes need 2^D >= N; got 2^{D} = {2**D} < N = {N}")


def output_path(path: str, *, suffix: str | None = None, what: str = "output file") -> str:
    """Check before any work that ``path`` can be written; return the path that will be written.

    Uses :func:`georecall.io.validate_output_path` (directory exists and is writable, target not a
    directory; ``suffix`` added when missing, so the reported path is the written one).

    Parameters
    ----------
    path : str
        The requested path.
    suffix : str, optional
        Required suffix (".npz").
    what : str
        How messages name the file.

    Returns
    -------
    str
        The path that will be written.

    Raises
    ------
    InputError
        ``path`` is a directory, its folder is missing or not writable, or it names a device.
    """
    if path and os.path.isdir(path):  # before a suffix turns DIR into DIR.npz
        raise InputError(f"{what} {path!r} is a directory; give a file name")
    try:
        return validate_output_path(path, suffix=suffix, what=what)
    except InputError:
        raise
    except ValueError as exc:  # io.py reports bad paths as ValueError: one line, user input
        raise InputError(str(exc)) from None


def output_dir(path: str, what: str = "output folder") -> str:
    """Check before any work that ``path`` is, or can be created as, a writable directory (missing parents
    included: the nearest existing ancestor must be a writable folder). Nothing is created here.

    Parameters
    ----------
    path : str
        The folder.
    what : str
        How messages name it.

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    InputError
        No folder given, ``path`` exists and is not a folder, an ancestor is a file, or the nearest existing
        ancestor is not writable.
    """
    if not path:
        raise InputError(f"{what}: a folder is required")
    # the folder's own names, a symlink loop or dangling link on the way, and room for the files written
    # inside it (a figure's name with its temporary suffix: well under _ROOM_BELOW bytes)
    check_path(path, what=what, room_below=_ROOM_BELOW)
    if os.path.exists(path) and not os.path.isdir(path):
        raise InputError(f"{what} {path!r} exists and is not a folder")
    parent = os.path.abspath(path)
    while not os.path.exists(parent):  # the nearest existing ancestor: the folders below it will be created
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise InputError(f"{what} {path!r}: {parent!r} is a file, so the folder cannot be created")
    try:  # a real probe, so that a full, read-only or forbidden folder is named as the user gave it
        os.rmdir(tempfile.mkdtemp(prefix=".georecall-probe-", dir=parent))
    except OSError as exc:
        refusal = write_error(exc, path)
        raise (refusal if refusal is not None else
               InputError(f"{what} {path!r}: {parent!r} is not writable ({exc.strerror or exc})")) from None
    output_path(os.path.join(parent, ".georecall-probe"), what=what)
    return path


# The longest "/name" a command writes inside an output folder, with the temporary name's suffix.
_ROOM_BELOW = 100


def input_file(path: str, what: str) -> str:
    """Check that ``path`` is a readable file, before anything reads it.

    Parameters
    ----------
    path : str
    what : str
        How messages name the file.

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    InputError
        Missing, a directory, or not readable.
    """
    if not os.path.exists(path):
        raise InputError(f"no such {what} {path!r}")
    if os.path.isdir(path):
        raise InputError(f"{what} {path!r} is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{what} {path!r} is not readable")
    return path


# While one command line runs (:func:`constructions_loaded_once`): each user's construction it named, by its
# key, with what loading it gave (the spec, or the refusal); None outside a run.
_LOADED: dict[str, registry.ConstructionSpec | InputError] | None = None


@contextlib.contextmanager
def constructions_loaded_once() -> Iterator[None]:
    """While the ``with`` block runs (one command line), :func:`resolve_spec` loads each ``MODULE:ATTR`` /
    ``FILE.py:ATTR`` once: the parser's look ahead at ``--construction`` (for the spec's own options) and the
    command get the same spec, or the same refusal, from one run of the user's module.

    Yields
    ------
    None
    """
    global _LOADED
    outer, _LOADED = _LOADED, {}
    try:
        yield
    finally:
        _LOADED = outer


def resolve_spec(name: str, hops: str | None, command: str = "check") -> registry.ConstructionSpec:
    """The construction a command names (``registry.resolve``), of ``hops`` hops when given. Within
    :func:`constructions_loaded_once`, a user's ``MODULE:ATTR`` / ``FILE.py:ATTR`` is loaded the first time
    only; later calls give its spec again, or raise again what loading it raised.

    Parameters
    ----------
    name : str
        A registered name or id, ``MODULE:ATTR`` or ``FILE.py:ATTR``.
    hops : {"single", "multi"} or None
        The hops the command checks (None: either).
    command : str
        The command's first word (``"check"``, ``"certify"``): the refusal of the other hops names its
        sub-command.

    Returns
    -------
    ConstructionSpec

    Raises
    ------
    InputError
        An unknown construction (whatever ``registry.resolve`` refuses), or one of the other number of hops.
    UserCodeError
        A user's construction module raised while being imported.
    """
    spec = _loaded_once(name)
    if hops is not None and spec.hops != hops:
        other = "multi-hop" if spec.hops == "multi" else "single-hop"
        raise InputError(f"{spec.label} is a {spec.hops}-hop construction: use {command} {other}")
    return spec


def _loaded_once(name: str) -> registry.ConstructionSpec:
    """``registry.resolve(name)``; a user's construction once per command line (:data:`_LOADED`)."""
    if _LOADED is None or not isinstance(name, str) or ":" not in name:
        return registry.resolve(name)
    if name not in _LOADED:
        try:
            _LOADED[name] = registry.resolve(name)
        except InputError as exc:  # UserCodeError included: raised again, with its cause, when named again
            _LOADED[name] = exc
    loaded = _LOADED[name]
    if isinstance(loaded, InputError):
        raise loaded
    return loaded


def count_results_file(est: Estimate, path: str) -> None:
    """Count an existing results file (read before the work) in ``est``: the one part of
    :func:`~georecall.estimates.results_file_estimate` for its size, added to ``est``; nothing when there is
    no such file.

    Parameters
    ----------
    est : Estimate
        The command's estimate (changed in place).
    path : str
        The results file.
    """
    if os.path.isfile(path):
        part = estimates.results_file_estimate(est.what, path, os.path.getsize(path)).parts[0]
        est.add(*part)


def user_constructions(names: list[str] | None, hops: str | None = None) -> list[str] | None:
    """The ids of ``--construction`` (registered names, ``MODULE:ATTR`` or ``FILE.py:ATTR``; a user's
    construction is imported and registered), or None for every registered one.

    Parameters
    ----------
    names : list of str or None
        The ``--construction`` values; none given means every registered construction.
    hops : str or None
        ``"single"`` or ``"multi"``: every named construction must have that number of hops; None: any.

    Returns
    -------
    list of str or None
        The ids, each once, in the order first named; None when ``names`` is empty or None.

    Raises
    ------
    InputError
        An unknown construction (whatever ``registry.resolve`` refuses), or one of the other number of hops.
    UserCodeError
        A user's construction module raised while being imported.
    """
    if not names:
        return None
    ids = []
    for name in names:
        spec = registry.resolve(name)
        if hops is not None and spec.hops != hops:
            raise InputError(f"{spec.label} is a {spec.hops}-hop construction; this table lists {hops}-hop "
                             "ones")
        ids.append(spec.id)
    return list(dict.fromkeys(ids))


def task_file(path: str, N: int, R: int, attributes: Attributes, symmetric: bool) -> Task:
    """The task in an ``(R, N)`` ``.npy`` table (``check --task``), validated: shape, integer ids, bijections
    (perfect matchings with ``--symmetric``).

    Parameters
    ----------
    path : str
        The ``.npy`` file.
    N, R : int
        The sizes asked for: the table must have shape ``(R, N)``.
    attributes : {"shared", "disjoint"}
        The task's attribute variant.
    symmetric : bool
        Every relation must be a perfect matching (a fixed-point-free involution).

    Returns
    -------
    Task

    Raises
    ------
    InputError
        A missing, unreadable or damaged file, another shape, non-integer ids, a relation that is not a
        bijection, or, with ``symmetric``, not a perfect matching.
    """
    member = npy_headers.npy_member(input_file(path, "task file"))
    if member.shape != (R, N):
        raise InputError(f"task file {path!r} holds a table of shape {member.shape}, expected (R, N) = "
                         f"({R}, {N})")
    if member.dtype.kind not in "iu":
        raise InputError(f"task file {path!r} holds {member.dtype} values, not integer entity ids")
    try:
        table = np.load(path, allow_pickle=False)
    except Exception as exc:  # whatever NumPy's readers raise on a damaged file
        raise InputError(f"cannot read task file {path!r}: {str(exc).splitlines()[0]}") from None
    task = Task(table, attributes)  # validates the bijections (InputError)
    rows = np.arange(R)[:, None]
    if symmetric and not (np.array_equal(table[rows, table], np.broadcast_to(np.arange(N), (R, N)))
                          and not np.any(table == np.arange(N))):
        raise InputError(f"task file {path!r}: --symmetric needs every relation to be a perfect matching")
    return task


def figure_options(p: FigureFiles) -> tuple[int, tuple[str, ...]]:
    """``--dpi`` and ``--format`` with their defaults: ``(dpi, formats)``, each format once.

    Parameters
    ----------
    p : FigureFiles
        The command's ``dpi`` and ``formats`` (None: the defaults ``DEFAULT_DPI``, ``DEFAULT_FORMATS``).

    Returns
    -------
    (int, tuple of str)
    """
    dpi = DEFAULT_DPI if p.dpi is None else p.dpi
    formats = tuple(dict.fromkeys(p.formats or DEFAULT_FORMATS))
    return dpi, formats


def figure_files_need_a_folder(p: FigureFiles, figures: str | None) -> None:
    """Refuse ``--dpi`` / ``--format``, and ``--style`` where the command has it, without ``--figures DIR``
    (the commands where figures are optional).

    Parameters
    ----------
    p : FigureFiles
        The command's ``--dpi`` and ``--format`` (and ``--style``, when it declares one).
    figures : str or None
        The ``--figures`` folder, or None when not given.

    Raises
    ------
    InputError
        ``--dpi``, ``--format`` or a ``--style`` other than the default given without ``--figures``.
    """
    if figures is None and (p.dpi is not None or p.formats):
        raise InputError("--dpi and --format apply to --figures DIR: add it, or leave them out")
    if figures is None and getattr(p, "style", "default") != "default":
        raise InputError("--style applies to --figures DIR: add it, or leave it out")


def require_matplotlib() -> None:
    """Refuse a command that draws when matplotlib is missing (InputError naming the ``plot`` extra)."""
    if not have_matplotlib():
        raise InputError(PLOT_HINT)


