"""The table of what every k-hop construction promises for k = 1..k_max (``georecall tradeoff``): d, m and
parameters from each registered spec's nominal promise, nothing built."""

from __future__ import annotations

from georecall.constructions import registry
from georecall.constructions.codes import binary_length
from georecall.errors import InputError
from georecall.theory.tasks import check_positive_int

__all__ = ["tradeoff_rows"]


def tradeoff_rows(N: int, R: int, k_max: int, constructions: list[str] | None = None) -> list[dict]:
    """d, m and parameters every registered k-hop construction (or those whose ids or names
    ``constructions`` lists) promises for k = 1..k_max (binary codes, nominal constants: sizes do not depend
    on the attention constants).

    Parameters
    ----------
    N, R, k_max : int
        Entities, relations and the largest k (each a whole number >= 1).
    constructions : list of str, optional
        Ids or names (case-insensitive, as :func:`georecall.constructions.registry.get`); None: every
        registered multi-hop spec. A listed single-hop spec is not refused: its nominal promise does not
        depend on k, so its row repeats for every k.

    Returns
    -------
    list of dict
        One row per (k, construction), k ascending, then in the order chosen: ``k``, ``construction`` (the
        id), ``d``, ``m``, ``params``, ``fact_params`` (the nominal promise's), ``N``, ``R`` and
        ``D = max(1, ⌈log2 N⌉)`` (binary codes).

    Raises
    ------
    InputError
        N, R or k_max not a whole number >= 1, ``R^k_max`` over 2^40, or an unknown construction.
    UserCodeError
        A user's spec's ``nominal_promise`` raised or returned something else than a Promise (a subclass of
        InputError).
    """
    N, R, k_max = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k_max", k_max)))
    if R**k_max > 2**40:
        raise InputError(f"R^k_max = {R}^{k_max} is too large to tabulate (over 2^40 relation paths)")
    chosen = registry.specs("multi") if constructions is None else [registry.get(c) for c in constructions]
    rows = []
    for k in range(1, k_max + 1):
        for spec in chosen:
            p = spec.nominal_promise(N, R, k)
            rows.append(
                {
                    "k": k,
                    "construction": spec.id,
                    "d": p.d,
                    "m": p.m,
                    "params": p.params,
                    "fact_params": p.fact_params,
                    "N": N,
                    "R": R,
                    "D": binary_length(N),
                }
            )
    return rows
