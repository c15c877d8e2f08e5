"""What the k-hop construction modules share (docs/theory.md, "Positional heads and leakage"): queries
``⟨r_k, ..., r_1, s⟩`` read with positional heads, their leakage, the one-hot positions and the code
read-out.

Its public names are the shared parts of the k-hop construction modules (:mod:`.g2`, :mod:`.a2_width`,
:mod:`.a2_depth`, :mod:`.c1`)."""

from __future__ import annotations

import inspect
import textwrap

import numpy as np

from georecall.constructions.building import resolve_codes
from georecall.constructions.codes import Codes
from georecall.constructions.layout import Layout
from georecall.constructions.model import Model
from georecall.constructions.parts import (
    code_readout,
    one_hot_positions,
    positional_heads,
)
from georecall.errors import InputError
from georecall.theory.statements import (
    beta_for_leakage,
    softmax_leakage,
)
from georecall.theory.tasks import check_positive_int

__all__ = ["HOP_FAMILY_PARAMETERS", "HOP_FAMILY_RAISES", "check_attention", "code_geometry", "default_beta",
           "hop_constants", "hop_family_docstring", "hop_family_inputs", "hop_heads", "hop_model",
           "require_shared_attributes"]

# The k-hop families' common keyword parameters, described once: :func:`hop_family_docstring` puts the entries
# of a family's own parameters where its docstring says ``{hop family parameters}``.
HOP_FAMILY_PARAMETERS = {
    "k": "k : int\n    Hops, >= 1.",
    "codes": 'codes : Codes or str\n    A codebook, or its kind ("binary", "sign", "gaussian").',
    "D": "D : int, optional\n    Code length (default: the kind's).",
    "gate": "gate : float, optional\n    Gate constant G (default: the one in the leakage inequality above).",
    "beta": "beta : float, optional\n    Softmax inverse temperature (default: the one meeting the leakage "
            "target); ignored for hard\n    attention.",
    "attention": 'attention : str\n    "softmax", or "hard" (the ε = 0 idealization, labelled as such).',
    "lam": "lam : float\n    Read-out scale λ.",
    "rng": "rng : numpy.random.Generator, int or None\n    Random codes' stream.",
    "construction": "construction : str\n    The construction's id (default: this family's), named by its "
                    "promise, refusals and metadata;\n    a spec reusing this family passes its own.",
}
# ... and what every k-hop family raises, where its docstring says ``{hop family raises}``.
HOP_FAMILY_RAISES = """Raises
------
InputError
    ``k`` is not a whole number >= 1, an unknown attention kind, bad codes.
ConditionError
    The constants violate the construction's conditions (the promise's ``require``)."""


def hop_family_docstring(family):
    """Complete a k-hop family's docstring: ``{hop family parameters}`` becomes the entries of
    :data:`HOP_FAMILY_PARAMETERS` for the parameters ``family`` has (in its signature's order), and
    ``{hop family raises}`` becomes :data:`HOP_FAMILY_RAISES`; each at the placeholder's indentation.

    Parameters
    ----------
    family : callable
        A k-hop family whose docstring holds the placeholders (used as a decorator).

    Returns
    -------
    callable
        ``family``, its ``__doc__`` completed.

    Raises
    ------
    ValueError
        The docstring lacks a placeholder (a family documents these parameters in one place or not at all).

    Examples
    --------
    >>> from georecall.constructions.a2_depth import a2_depth_family
    >>> "Hops, >= 1." in a2_depth_family.__doc__, "gate :" in a2_depth_family.__doc__
    (True, False)
    """
    doc = family.__doc__
    if not doc:  # ``python -OO`` strips docstrings: nothing to complete
        return family
    names = [name for name in inspect.signature(family).parameters if name in HOP_FAMILY_PARAMETERS]
    texts = {"{hop family parameters}": "\n".join(HOP_FAMILY_PARAMETERS[name] for name in names),
             "{hop family raises}": HOP_FAMILY_RAISES}
    for placeholder, text in texts.items():
        line = next((line for line in doc.splitlines() if line.strip() == placeholder), None)
        if line is None:
            raise ValueError(f"{family.__name__}'s docstring has no line {placeholder!r}")
        indent = line[: len(line) - len(line.lstrip())]
        doc = doc.replace(line, textwrap.indent(text, indent))
    family.__doc__ = doc
    return family


def hop_family_inputs(N: int, k, codes: Codes | str, D: int | None, rng, attention: str,
                      attributes: str) -> tuple[int, Codes]:
    """What every k-hop family checks and resolves first: the hop count, the attention kind, shared
    attributes, and the codebook (for ``N`` entities; ``D`` and ``rng`` as the family's).

    Parameters
    ----------
    N : int
        Entities.
    k, codes, D, rng, attention, attributes
        As the family was given them.

    Returns
    -------
    tuple of (int, Codes)
        ``k`` as a whole number >= 1 and the resolved codebook.

    Raises
    ------
    InputError
        ``k`` is not a whole number >= 1, an unknown attention kind, attributes not shared, bad codes.
    """
    k = check_positive_int("k", k)
    check_attention(attention)
    require_shared_attributes(attributes)
    return k, resolve_codes(N, codes, D, rng, False)


def check_attention(attention: str) -> None:
    """Refuse an attention kind other than ``"softmax"`` or ``"hard"``.

    Parameters
    ----------
    attention : str
        The attention a builder was asked for.

    Raises
    ------
    InputError
        When it is neither ``"softmax"`` nor ``"hard"`` (an idealization).
    """
    if attention not in ("softmax", "hard"):
        raise InputError(f"attention must be 'softmax' or 'hard' (an idealization), got {attention!r}")


def require_shared_attributes(attributes: str) -> None:
    """Refuse an attribute set other than ``"shared"`` (the multi-hop constructions answer shared ones only).

    Parameters
    ----------
    attributes : str
        The attribute kind a builder was asked for.

    Raises
    ------
    InputError
        When it is not ``"shared"``.
    """
    if attributes != "shared":
        raise InputError(f"the multi-hop constructions answer shared attributes only, got {attributes!r}")


def code_geometry(codes: Codes) -> dict:
    """The geometry of a codebook a promise reads: its gap, its distinct-code counts and its squared norm.

    Parameters
    ----------
    codes : Codes
        The codebook.
    """
    return {"gap": codes.gap, "distinct": (codes.distinct_lhs, codes.distinct_rhs), "norm_sq": codes.norm_sq}


def _meta(construction: str, k: int, codes: Codes, layout: Layout, attention: str) -> dict:
    return {"construction": construction, "k": k, "codes": codes.kind, "D": codes.D, "attention": attention,
            "layout": layout.as_dict()}


def hop_heads(d: int, pos: np.ndarray, groups: np.ndarray, k: int, gate: float, attention: str,
               beta: float | None):
    """The k positional heads of G2 and A2(a): head j fetches ``r_j`` (position ``k − j``) from the last
    position into gate group ``G_j`` with gain G (a relation token carries its identity in group 1's
    coordinates).

    Parameters
    ----------
    d : int
        The residual width.
    pos : numpy.ndarray
        The coordinates of the one-hot positions.
    groups : numpy.ndarray
        The gate groups' coordinates, ``groups[j]`` for ``G_{j+1}``.
    k : int
        Hops.
    gate : float
        The gain G.
    attention : str
        ``"softmax"`` or ``"hard"``.
    beta : float or None
        The softmax's β (None with hard attention).
    """
    return positional_heads(d, pos, [{k: k - j} for j in range(1, k + 1)], groups[0],
                            [groups[j] for j in range(k)], [gate] * k, attention, beta)


def hop_model(name: str, N: int, k: int, codes: Codes, layout: Layout, E: np.ndarray, Q: np.ndarray,
           U_out: np.ndarray, layers: tuple, pos: np.ndarray, attention: str, lam: float) -> Model:
    """The Model of a k-hop construction (one-hot positions, code read-out of N answers on ``U_out``).

    Parameters
    ----------
    name : str
        The construction's id, recorded in the model's metadata.
    N, k : int
        Entities and hops.
    codes, layout : Codes, Layout
        The codebook and the residual layout (``layout.d`` is the width).
    E, Q, U_out : numpy.ndarray
        Entity and relation embeddings, and the read-out's coordinates.
    layers : tuple
        The model's layers.
    pos : numpy.ndarray
        The coordinates of the one-hot positions.
    attention : str
        ``"softmax"`` or ``"hard"``.
    lam : float
        The read-out's scale λ.
    """
    d = layout.d
    return Model(E, Q, layers=layers, position_embedding=one_hot_positions(pos, d),
                 meta=_meta(name, k, codes, layout, attention), **code_readout(codes, N, d, U_out, lam))


def hop_constants(k: int, attention: str, lam: float, leakage_others: int, **constants) -> dict:
    """The constants a k-hop builder records: k, the given ones, attention, the softmax leakage and λ.

    Parameters
    ----------
    k : int
        Hops.
    attention : str
        ``"softmax"`` or ``"hard"``.
    lam : float
        The read-out's scale λ.
    leakage_others : int
        How many positions a head's softmax leaks to (the leakage is computed from ``constants["beta"]``).
    **constants
        The builder's other constants (``beta`` among them).
    """
    return {"k": k, **constants, "attention": attention,
            "leakage": softmax_leakage(constants.get("beta"), leakage_others), "lambda": lam}


def default_beta(attention: str, beta: float | None, eps: float, others: int) -> float | None:
    """The β a builder uses: None for hard attention, else the given β or the one meeting the leakage
    target.

    Parameters
    ----------
    attention : str
        ``"softmax"`` or ``"hard"``.
    beta : float or None
        The β asked for (None: the one meeting the target).
    eps : float
        The leakage target.
    others : int
        How many positions the softmax leaks to.
    """
    if attention == "hard":
        return None
    return beta_for_leakage(eps, others) if beta is None else float(beta)
