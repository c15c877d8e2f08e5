"""The bound and count tables of the public API: ``gr.lower_bounds`` (lower bounds on d beside every
construction's d; not called ``bounds``, the subpackage :mod:`georecall.bounds`) and ``gr.counts`` (the
exact enumeration of ``|F_k|`` and ``|Trees_k|``), each a :class:`Table`.

Each is the command of the same name (``georecall bounds``, ``georecall count``) run from Python through
:func:`georecall.api_command.run_command`: the same defaults, checks and rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from georecall.api_command import Result, run_command
from georecall.errors import InputError

__all__ = ["Table", "counts", "lower_bounds"]


class Table(Result):
    """A table of rows (one dict per row): the result of :func:`lower_bounds` or :func:`counts`.

    Attributes
    ----------
    rows : list of dict
        The rows, every key (the ``--format json`` rows).
    text : str
        The table as the command prints it (Markdown for ``lower_bounds``, fixed-width text for ``counts``).
    passed : bool
        ``counts``: every count agrees with its closed form and sandwich; ``lower_bounds``: True.

    Examples
    --------
    >>> import georecall as gr
    >>> table = gr.counts(N=3, R=1, k=1)
    >>> [row["F_k"] for row in table.rows], table.passed
    ([6], True)
    """

    @property
    def rows(self) -> list[dict]:
        """The rows, one dict per row with every key (the ``--format json`` rows)."""
        return self["rows"]

    @property
    def text(self) -> str:
        """The table as the command prints it (Markdown for ``lower_bounds``, fixed-width text for
        ``counts``)."""
        return self["text"] or repr(self)  # the text format is the command's own rendering


def _many(value: float | Sequence[float] | None) -> list | None:
    return None if value is None else list(value) if isinstance(value, Sequence) else [value]


def lower_bounds(N: int | Sequence[int] = 4096, R: int | Sequence[int] = 16,
                 k: int | Sequence[int] = (1, 2, 3), *, bits: float | Sequence[float] | None = None,
                 gaps: bool = False, constructions: Sequence[str] | None = None, **options: Any) -> Table:
    """Information-theoretic lower bounds on the width d (total information, per entity, capacity-depth,
    chain of thought), evaluated exactly, beside every construction's d and the gap d / d_min.

    Parameters
    ----------
    N, R, k : int or sequence of int
        Entities, relations, hops; a sequence gives one row per combination.
    bits : float or sequence of float, optional
        Bits per parameter b (default 1).
    gaps : bool
        The gap table instead: each construction at the b it needs.
    constructions : str or sequence of str, optional
        Only this construction, or these (default: every registered one). ``construction``, the command
        line's name, is taken too (not both).
    **options
        The rest of ``georecall bounds``'s options (``columns``, ``format``, ...); ``needed``, the gap
        table's b per construction, as ``{"G1": 2}`` (or the command line's ``["G1=2"]``).

    Returns
    -------
    Table

    Raises
    ------
    InputError
        Sizes out of range, ``bits`` with ``gaps``, an unknown construction, or both ``constructions`` and
        ``construction``.
    TypeError
        An option ``georecall bounds`` does not have.

    Examples
    --------
    >>> import georecall as gr
    >>> table = gr.lower_bounds(N=4096, R=16, k=1, constructions=["geometric"])
    >>> row = table.rows[0]
    >>> row["construction"], row["N"], row["d"] >= row["d_min"]
    ('G1', 4096, True)
    """
    if "construction" in options:  # the command's own name, which its refusals list: taken too
        if constructions is not None:
            raise InputError("lower_bounds: constructions and construction are one option: give one of them")
        constructions = options.pop("construction")
    names = [constructions] if isinstance(constructions, str) else constructions  # one name, not its letters
    needed = options.pop("needed", None)
    if isinstance(needed, Mapping):  # {"G1": 2}: the command line's "G1=2"
        needed = [f"{name}={b}" for name, b in needed.items()]
    elif isinstance(needed, str):
        needed = [needed]
    return Table(run_command("bounds", N=_many(N), R=_many(R), k=_many(k), bits=_many(bits), gaps=gaps,
                             construction=None if names is None else list(names), needed=needed,
                             **options).to_dict())


def counts(N: int = 5, R: int = 3, k: int = 2, **options: Any) -> Table:
    """Enumerate all (N!)^R tasks and count the distinct k-hop answer tables ``|F_k|`` and depth-k leaf
    vectors ``|Trees_k|`` for k = 1..k, beside their closed forms (small N only).

    Parameters
    ----------
    N : int
        Entities (N <= 5 with R <= 3, N <= 6 with R <= 2 fit the enumeration limit).
    R : int
        Relations.
    k : int
        Largest number of hops counted.
    **options
        The rest of ``georecall count``'s options (``format``, ``columns``, ...).

    Returns
    -------
    Table
        ``passed`` when every count agrees with its closed form and the sandwich holds.

    Raises
    ------
    InputError
        More tasks than the enumeration limit, or R^k over 2^20.
    TypeError
        An option ``georecall count`` does not have.

    Examples
    --------
    >>> import georecall as gr
    >>> table = gr.counts(N=3, R=2, k=2)
    >>> table.passed, table.rows[0]["F_k"] == table.rows[0]["F_1_closed"]
    (True, True)
    """
    return Table(run_command("count", N=N, R=R, k=k, **options).to_dict())
