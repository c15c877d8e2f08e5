"""What the k-hop construction modules share (docs/theory.md, "Positional heads and leakage"): queries
``⟨r_k, ..., r_1, s⟩`` read with positional heads, their leakage, the one-hot positions and the code
read-out.

Its public names are the shared parts of the k-hop construction modules (:mod:`.g2`, :mod:`.a2_width`,
:mod:`.a2_depth`, :mod:`.c1`)."""

from __future__ import annotations

import numpy as np

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

__all__ = ["check_attention", "code_geometry", "default_beta", "hop_constants", "hop_heads", "hop_model",
           "require_shared_attributes"]


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
