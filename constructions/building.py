"""What every construction module shares: a built :class:`Construction` (model, promise, codes, constants,
layout), assembling a family on a task (``F ⊕ enc(π)``), the codebook a builder uses, and the code geometry
of the nominal promises (binary codes at unit scale)."""

from __future__ import annotations

from dataclasses import dataclass

from georecall.constructions.codes import Codes, binary_length, make_codes
from georecall.constructions.encoding import Family, assemble_model
from georecall.constructions.layout import Layout
from georecall.constructions.model import Model
from georecall.errors import InputError
from georecall.theory.statements import (
    Promise,
)
from georecall.theory.tasks import Task

__all__ = ["answer_count", "assemble", "Construction", "nominal_geometry", "resolve_codes", "single_hop_meta"]


@dataclass(frozen=True, eq=False)
class Construction:
    """A built model with the promise it was built under, its codes, constants and residual layout."""

    model: Model
    promise: Promise
    codes: Codes
    constants: dict
    layout: Layout | None = None


def assemble(family: Family, task: Task) -> Construction:
    """The construction on ``task``: ``M(π) = F ⊕ enc(π)`` (``encoding.assemble_model``) with the family's
    promise, codes, constants and layout.

    Parameters
    ----------
    family : Family
    task : Task

    Returns
    -------
    Construction

    Raises
    ------
    FamilyError, InputError
        From :func:`~georecall.constructions.encoding.assemble_model`.
    """
    return Construction(assemble_model(family, task), family.promise, family.codes, family.constants,
                        family.layout)


def resolve_codes(N: int, codes: Codes | str, D: int | None, rng, integer: bool) -> Codes:
    """The codebook a builder uses: a given :class:`Codes` (which must have N codes, and D must then be None
    or agree), or ``make_codes(kind, N, D, rng)`` at integer scale when ``integer``.

    Parameters
    ----------
    N : int
        Codes needed.
    codes : Codes or str
        A codebook, or a kind for :func:`~georecall.constructions.codes.make_codes`.
    D : int or None
        Code length.
    rng : numpy.random.Generator or int or None
        The random source of drawn codes.
    integer : bool
        Integer scale (±1 entries).

    Returns
    -------
    Codes

    Raises
    ------
    InputError
        A codebook with fewer than N codes, a D that contradicts it, or non-integer codes in integer mode
        (and whatever :func:`~georecall.constructions.codes.make_codes` raises).
    ConditionError
        Binary codes too short for N.
    """
    if isinstance(codes, Codes):
        if codes.N < N:
            raise InputError(f"codebook has {codes.N} codes, fewer than N = {N}")
        if D is not None and D != codes.D:
            raise InputError(f"D = {D} contradicts the codebook given, whose codes have length {codes.D}")
        if integer and not codes.integer:
            raise InputError("integer mode needs a codebook with integer (±1) entries")
        return codes
    return make_codes(codes, N, D, rng, scale="integer" if integer else "unit")


def nominal_geometry(N: int) -> tuple[int, dict]:
    """The code geometry behind every nominal promise: binary codes at unit scale, ``D = ⌈log2 N⌉``,
    ``gap = 2/D`` (coherence μ = 1 − 2/D) and the exact distinctness pair, as keyword arguments of the
    ``theory.statements`` promise functions.

    Parameters
    ----------
    N : int
        Number of entities.

    Returns
    -------
    (D, geometry) : the code length and ``{"gap": ..., "distinct": ...}``.
    """
    D = binary_length(N)
    return D, {"gap": 2 / D if N > 1 else 2.0, "distinct": (D, D - 2 if N > 1 else -D)}


def single_hop_meta(construction: str, attributes: str, codes: Codes, layout: Layout, **constants) -> dict:
    """The ``meta`` of a single-hop family's model (G1, A1): JSON-able facts about the weights' origin, which
    never change what the model computes.

    Parameters
    ----------
    construction : str
        The construction's id (``"G1"``, ``"A1"``, or the id of a spec reusing the family).
    attributes : str
        The answer ids' variant, ``"shared"`` or ``"disjoint"``.
    codes : Codes
        The codebook; its kind and length D are recorded.
    layout : Layout
        The residual layout, recorded as :meth:`Layout.as_dict` gives it.
    **constants
        The family's constants (``lam``, ``gate``, ``integer``, ...), recorded as given.

    Returns
    -------
    dict
        ``{"construction", "attributes", "codes", "D", "layout", **constants}``.
    """
    return {"construction": construction, "attributes": attributes, "codes": codes.kind, "D": codes.D,
            "layout": layout.as_dict(), **constants}


def answer_count(N: int, R: int, attributes: str) -> int:
    """The number of answer ids (the read-out's rows ``n_out``): ``N`` when the R relations share the
    entities' ids as answers, ``N·R`` when each relation has its own disjoint set of N answers.

    Parameters
    ----------
    N : int
        Entities.
    R : int
        Relations.
    attributes : str
        ``"shared"`` or ``"disjoint"``.

    Returns
    -------
    int

    Raises
    ------
    InputError
        ``attributes`` neither ``"shared"`` nor ``"disjoint"``.
    """
    if attributes not in ("shared", "disjoint"):
        raise InputError(f"attributes must be 'shared' or 'disjoint', got {attributes!r}")
    return N * R if attributes == "disjoint" else N
