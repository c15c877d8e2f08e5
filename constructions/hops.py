"""What the k-hop construction modules share (docs/theory.md, "Positional heads and leakage"): queries
``⟨r_k, ..., r_1, s⟩`` read with positional heads, their leakage, the one-hot positions and the code
read-out.

Its underscore names are the k-hop construction modules' own (:mod:`.g2`, :mod:`.a2_width`, :mod:`.a2_depth`,
:mod:`.c1`), not a public interface."""

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

__all__ = []


def _check_attention(attention: str) -> None:
    if attention not in ("softmax", "hard"):
        raise InputError(f"attention must be 'softmax' or 'hard' (an idealization), got {attention!r}")


def _shared(attributes: str) -> None:
    if attributes != "shared":
        raise InputError(f"the multi-hop constructions answer shared attributes only, got {attributes!r}")


def _geometry(codes: Codes) -> dict:
    return {"gap": codes.gap, "distinct": (codes.distinct_lhs, codes.distinct_rhs), "norm_sq": codes.norm_sq}


def _meta(construction: str, k: int, codes: Codes, layout: Layout, attention: str) -> dict:
    return {"construction": construction, "k": k, "codes": codes.kind, "D": codes.D, "attention": attention,
            "layout": layout.as_dict()}


def _hop_heads(d: int, pos: np.ndarray, groups: np.ndarray, k: int, gate: float, attention: str,
               beta: float | None):
    """The k positional heads of G2 and A2(a): head j fetches ``r_j`` (position ``k − j``) from the last
    position into gate group ``G_j`` with gain G (a relation token carries its identity in group 1's
    coordinates)."""
    return positional_heads(d, pos, [{k: k - j} for j in range(1, k + 1)], groups[0],
                            [groups[j] for j in range(k)], [gate] * k, attention, beta)


def _model(name: str, N: int, k: int, codes: Codes, layout: Layout, E: np.ndarray, Q: np.ndarray,
           U_out: np.ndarray, layers: tuple, pos: np.ndarray, attention: str, lam: float) -> Model:
    """The Model (one-hot positions, code read-out of N answers on ``U_out``)."""
    d = layout.d
    return Model(E, Q, layers=layers, position_embedding=one_hot_positions(pos, d),
                 meta=_meta(name, k, codes, layout, attention), **code_readout(codes, N, d, U_out, lam))


def _constants(k: int, attention: str, lam: float, leakage_others: int, **constants) -> dict:
    return {"k": k, **constants, "attention": attention,
            "leakage": softmax_leakage(constants.get("beta"), leakage_others), "lambda": lam}


def _default_beta(attention: str, beta: float | None, eps: float, others: int) -> float | None:
    """The β a builder uses: None for hard attention, else the given β or the one meeting the leakage
    target."""
    if attention == "hard":
        return None
    return beta_for_leakage(eps, others) if beta is None else float(beta)
