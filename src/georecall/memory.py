"""One memory budget for every command (``--max-gib``), the estimate it is compared with, and the checker's
chunk sizes under it.

Every command that allocates in proportion to its inputs asks, *before* any large allocation, how many bytes
the job needs at its peak (an :class:`Estimate` of named parts; each command's estimator is in
:mod:`georecall.estimates`), and compares the sum with one :class:`Budget`. Over budget,
:meth:`Estimate.require` raises :class:`~georecall.errors.InputError` naming the estimate, the budget and the
parameter to lower (exit 2 on the command line).

The budget is ``--max-gib`` when given, otherwise :data:`DEFAULT_FRACTION` of the machine's available memory
(``MemAvailable`` in ``/proc/meminfo``; 4 GiB where that cannot be read). The checker sizes its query chunks
and its tables' token blocks from the same budget (:func:`array_bytes`, :func:`queries_per_chunk`), and the
estimates count those same bytes (:func:`checker_chunk_bytes`).

Estimates are deliberately generous upper bounds, computed in Python integers, so no size can overflow."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

from georecall.errors import InputError

__all__ = [
    "BOUNDED_ARRAYS",
    "CHUNK_BYTES",
    "CHUNK_COPIES",
    "DEFAULT_FRACTION",
    "GIB",
    "PYTHON_BASE",
    "Budget",
    "Estimate",
    "array_bytes",
    "available_bytes",
    "budget_bytes",
    "checker_chunk_bytes",
    "queries_per_chunk",
    "size_text",
]

GIB = 2**30
DEFAULT_FRACTION = 0.5
FALLBACK_AVAILABLE = 8 * GIB  # when /proc/meminfo cannot be read: budget 4 GiB
CHUNK_BYTES = 64 * 2**20  # the checker's largest chunk (Budget.chunk_bytes)
# intermediates alive at once per chunk in THE forward pass (x, attention, hidden, logits, ...)
CHUNK_COPIES = 6
# arrays per intermediate of THE forward pass with its error bounds (values, bounds, two temporaries): each
# array of a checker chunk takes 1/BOUNDED_ARRAYS of Budget.chunk_bytes()
BOUNDED_ARRAYS = 4
PYTHON_BASE = 64 * 2**20  # interpreter, NumPy, small tables


def available_bytes() -> int:
    """Bytes the machine can still give (``MemAvailable`` of ``/proc/meminfo``; a fallback elsewhere).

    Returns
    -------
    int
        Available memory in bytes.
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return FALLBACK_AVAILABLE


def budget_bytes(max_gib: float | None) -> int:
    """The budget in bytes: ``max_gib`` GiB, or :data:`DEFAULT_FRACTION` of the available memory.

    Parameters
    ----------
    max_gib : float or None
        The ``--max-gib`` value, or ``None`` for the default.

    Returns
    -------
    int
        The budget in bytes (at least 1).

    Raises
    ------
    InputError
        ``max_gib`` is not a positive finite number (zero, negative, NaN, infinite, a bool, a string).

    Warns
    -----
    UserWarning
        ``max_gib`` is more than the machine's available memory (:func:`available_bytes`): the budget is
        capped at the available memory.
    """
    if max_gib is None:
        return max(1, int(DEFAULT_FRACTION * available_bytes()))
    if isinstance(max_gib, bool) or not (isinstance(max_gib, (int, float)) and math.isfinite(max_gib)
                                         and max_gib > 0):
        raise InputError(f"--max-gib must be a positive finite number of GiB, got {max_gib!r}")
    wanted = max_gib * GIB
    available = available_bytes()
    if wanted > available:  # a budget the machine cannot give guards nothing: cap it, and say so
        warnings.warn(f"--max-gib {max_gib:g} is more than the {size_text(available)} this machine has "
                      f"available: the budget is capped at {size_text(available)}", stacklevel=2)
        return max(1, int(available))
    return max(1, int(wanted))


@dataclass(frozen=True)
class Budget:
    """The one memory budget of a run, created once from ``--max-gib`` and passed to every part of the job.

    Attributes
    ----------
    max_bytes : int
        The budget in bytes (at least 1).

    Notes
    -----
    Estimates are compared with it by :meth:`Estimate.require`; the checker sizes its chunks from it
    (:meth:`chunk_bytes`), so a small budget also bounds the checker's working set.
    """

    max_bytes: int

    def __post_init__(self) -> None:
        if isinstance(self.max_bytes, bool) or not (isinstance(self.max_bytes, int) and self.max_bytes >= 1):
            raise InputError(f"a memory budget must be a positive number of bytes, got {self.max_bytes!r}")

    @classmethod
    def from_gib(cls, max_gib: float | None) -> Budget:
        """The budget of ``--max-gib`` (``None``: :data:`DEFAULT_FRACTION` of the available memory).

        Parameters
        ----------
        max_gib : float or None
            GiB, positive and finite, or ``None`` for the default.

        Returns
        -------
        Budget

        Raises
        ------
        InputError
            ``max_gib`` is not a positive finite number.
        """
        return cls(budget_bytes(max_gib))

    @property
    def gib(self) -> float:
        """The budget in GiB."""
        return self.max_bytes / GIB

    def chunk_bytes(self, copies: int = CHUNK_COPIES) -> int:
        """Bytes one checker chunk's intermediate may take: :data:`CHUNK_BYTES`, or less when ``copies`` such
        intermediates would not fit in a tenth of the budget (at least 1 MiB).

        The checker (``verify.checking.check``) sizes its query chunks and its tables' token blocks from it
        (:data:`BOUNDED_ARRAYS` arrays per intermediate), and :func:`georecall.estimates.check_estimate`
        counts the same bytes.

        Parameters
        ----------
        copies : int
            Intermediates alive at once per chunk.

        Returns
        -------
        int
            Between 1 MiB and :data:`CHUNK_BYTES`.
        """
        return max(2**20, min(CHUNK_BYTES, self.max_bytes // (10 * max(1, copies))))

    @classmethod
    def default(cls) -> Budget:
        """The budget without ``--max-gib``: :data:`DEFAULT_FRACTION` of the available memory.

        Returns
        -------
        Budget
        """
        return cls.from_gib(None)


def as_budget(budget: Budget | None) -> Budget:
    """The :class:`Budget` a library function was given: itself, or the default budget for ``None``
    (:meth:`Budget.default`). Internal: the one place where ``None`` becomes the default budget.

    Every public function that takes a memory budget takes a :class:`Budget` or ``None``; a number of bytes is
    made into one where it arises (``Budget(nbytes)``, or ``Budget.from_gib(gib)`` from ``--max-gib``).

    Parameters
    ----------
    budget : Budget or None
        The budget, or ``None`` for the default one.

    Returns
    -------
    Budget

    Raises
    ------
    InputError
        Anything else (a number of bytes included: make it a ``Budget(nbytes)``).
    """
    if budget is None:
        return Budget.default()
    if isinstance(budget, Budget):
        return budget
    raise InputError(f"a memory budget is a georecall.memory.Budget or None (the default budget), got "
                     f"{type(budget).__name__}: make one with Budget(nbytes) or Budget.from_gib(gib)")


def size_text(nbytes: int) -> str:
    """A number of bytes as a message prints it, readable at every size: GiB with two decimals from 0.1 GiB
    (whole GiB from 1024 GiB), three significant digits below (GiB down to 10 MiB, then MiB, KiB, bytes), so a
    small budget is never "0.00 GiB".

    Parameters
    ----------
    nbytes : int
        The bytes (a budget, an estimate or one of its parts).

    Returns
    -------
    str
        "2,000 GiB", "4.00 GiB", "0.13 GiB", "0.0625 GiB", "1.02 MiB", "512 KiB", "100 bytes".

    Examples
    --------
    >>> size_text(4 * GIB), size_text(int(0.001 * GIB)), size_text(2**20)
    ('4.00 GiB', '1.02 MiB', '1 MiB')
    """
    if nbytes >= 1024 * GIB:
        return f"{nbytes / GIB:,.0f} GiB"
    if nbytes >= GIB / 10:
        return f"{nbytes / GIB:.2f} GiB"
    for unit, size in (("GiB", 10 * 2**20), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / (GIB if unit == 'GiB' else size):.3g} {unit}"
    return f"{nbytes} bytes"


@dataclass
class Estimate:
    """Peak bytes of one job, as named parts.

    Attributes
    ----------
    what : str
        The job, as messages name it ("check single-hop", "train").
    parts : list of (label, bytes, lower)
        Each part's label, its bytes and the command-line parameter(s) that shrink it.
    """

    what: str
    parts: list[tuple[str, int, str]] = field(default_factory=list)

    def add(self, label: str, nbytes: int, lower: str) -> Estimate:
        """Add a part of ``nbytes`` bytes; ``lower`` names the parameters that shrink it. Returns ``self``.

        Parameters
        ----------
        label : str
            What the part holds, as messages name it.
        nbytes : int
            Its bytes (a negative number counts as 0).
        lower : str
            The command-line parameter(s) that shrink it.

        Returns
        -------
        Estimate
            ``self``, so that parts chain.
        """
        self.parts.append((label, max(0, int(nbytes)), lower))
        return self

    @property
    def total(self) -> int:
        """Sum of the parts, plus the interpreter's base."""
        return PYTHON_BASE + sum(nbytes for _, nbytes, _ in self.parts)

    def as_dict(self) -> dict:
        """The estimate as plain data (GiB per part)."""
        return {"total_gib": round(self.total / GIB, 6),
                "parts": {label: round(nbytes / GIB, 6) for label, nbytes, _ in self.parts}}

    def require(self, budget: Budget | None) -> Estimate:
        """Refuse (``InputError``: estimate, budget, what to lower) when the total exceeds the budget.

        Parameters
        ----------
        budget : Budget or None
            The budget (``None``: the default budget).

        Returns
        -------
        Estimate
            ``self`` when it fits.

        Raises
        ------
        InputError
            The estimate exceeds the budget (the message names the largest part and what to lower).
        """
        limit = as_budget(budget).max_bytes
        if self.total <= limit:
            return self
        label, nbytes, lower = max(self.parts, key=lambda p: p[1]) if self.parts else ("", 0, "the sizes")
        enough = f"--max-gib {math.ceil(self.total / GIB * 100) / 100:g}"  # the smallest budget that fits
        if nbytes < PYTHON_BASE:  # the job itself is small: nothing to lower would make it fit
            raise InputError(f"{self.what} needs about {size_text(self.total)} of memory, the interpreter's "
                             f"{size_text(PYTHON_BASE)} included (the largest part of the job itself: "
                             f"{label}, {size_text(nbytes)}), more than the budget of {size_text(limit)}: "
                             f"raise the budget ({enough} or more)")
        raise InputError(f"{self.what} needs about {size_text(self.total)} of memory (largest part: "
                         f"{label}, {size_text(nbytes)}), more than the budget of {size_text(limit)}: lower "
                         f"{lower}, or raise the budget ({enough} or more)")


def array_bytes(budget: Budget | None = None) -> int:
    """Bytes of one array of a checker chunk under ``budget``: THE forward pass with its error bounds holds
    about :data:`BOUNDED_ARRAYS` float64 arrays per intermediate (values, bounds and two temporaries), so each
    gets that fraction of the budget's chunk bytes (:meth:`Budget.chunk_bytes`).

    Parameters
    ----------
    budget : Budget or None
        The run's budget (``None``: the default budget).

    Returns
    -------
    int
        Bytes per array: 16 MiB under any budget of 3.75 GiB or more, less under a smaller one.

    Raises
    ------
    InputError
        ``budget`` is not a Budget or None.
    """
    return max(1, as_budget(budget).chunk_bytes() // BOUNDED_ARRAYS)


def queries_per_chunk(width: int, T: int, bytes_per_array: int) -> int:
    """Queries in one chunk of THE forward pass: as many as keep a ``T × width`` float64 intermediate per
    query within ``bytes_per_array`` (at least one). The one formula the checker sizes its chunks with
    (``constructions.decoding.chunk_size``) and :func:`checker_chunk_bytes` counts.

    Parameters
    ----------
    width : int
        The widest per-position intermediate (max of d, m and the read-out's rows).
    T : int
        Positions per query.
    bytes_per_array : int
        Bytes one array may take (:func:`array_bytes`).

    Returns
    -------
    int
        At least 1.
    """
    return max(1, int(bytes_per_array) // (8 * max(1, int(width)) * max(1, int(T))))


def checker_chunk_bytes(width: int, T: int, n_queries: int, budget: Budget | None = None) -> int:
    """Peak bytes of the checker's chunks as it sizes them (:func:`queries_per_chunk` queries of
    :func:`array_bytes` per array, at most all queries); :data:`CHUNK_COPIES` intermediates of
    :data:`BOUNDED_ARRAYS` arrays are alive at once.

    Parameters
    ----------
    width : int
        The widest per-position intermediate (max of d, m and the read-out's rows).
    T : int
        Positions per query.
    n_queries : int
        Queries checked.
    budget : Budget or None
        The run's budget (``None``: the default budget).

    Returns
    -------
    int
    """
    queries = min(queries_per_chunk(width, T, array_bytes(budget)), max(1, n_queries))
    return CHUNK_COPIES * BOUNDED_ARRAYS * queries * max(1, int(width)) * max(1, int(T)) * 8
