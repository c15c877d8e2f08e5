"""Bits of knowledge per parameter at the capacity threshold of a sweep (:mod:`.sweep`): the bits a model
must hold to answer every query of an unknown task, over the parameters of the model trained at d*, beside
the constructions and published capacities of trained language models.
"""

from __future__ import annotations

import numpy as np

from georecall.bounds.counting import F_lower, log2_product
from georecall.constructions import registry
from georecall.experiments.sweep_records import is_floor_censored
from georecall.experiments.sweep_trial import FROZEN_GROUPS, TrialSettings
from georecall.theory.tasks import check_positive_int, task_for_seed
from georecall.training.parameters import init_model
from georecall.training.train import training_data

__all__ = ["BITS_REFERENCES", "bits_per_parameter", "knowledge_bits", "knowledge_table", "model_parameters"]

# Published capacities of trained language models, in bits of knowledge per parameter (approximate)
BITS_REFERENCES: dict[str, float] = {
    "Allen-Zhu & Li 2024 (Physics of Language Models 3.3: knowledge capacity)": 2.0,
    "Morris et al. 2025 (How much do language models memorize?)": 3.6,
}


def knowledge_bits(N: int, R: int, k: int = 1) -> dict:
    """The bits a model must hold to answer every query of an unknown task: ``log2`` of the number of tasks
    it must tell apart. k = 1: ``R·log2 N!`` (``(N!)^R`` tasks, exact). k >= 2: ``log2 |F_k|`` from the proved
    lower bound ``(L − 1)!·(N!)^{R−1}`` (``bounds.counting.F_lower``): at least that many bits.

    Parameters
    ----------
    N, R, k : int
        Entities, relations, hops (positive).

    Returns
    -------
    dict
        ``bits`` (float), ``exact`` (k = 1) and ``count`` (what was counted, in words).

    Raises
    ------
    InputError
        A size that is not a positive integer.
    """
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    return {"bits": float(log2_product(F_lower(N, R, k))), "exact": k == 1,
            "count": "(N!)^R tasks" if k == 1 else "|F_k| >= (L-1)!·(N!)^(R-1) k-hop answer tables"}


def model_parameters(N: int, R: int, d: int, settings: TrialSettings) -> dict:
    """Parameters of the model a trial of ``settings`` trains at width d, counted from the model itself
    (``Model.parameter_count``).

    Parameters
    ----------
    N, R, d : int
        The task's sizes and the model's width.
    settings : TrialSettings
        The trial's MLP width factor, attention, heads, hops and CoT.

    Returns
    -------
    dict
        ``all`` (every parameter) and, per mode of :data:`.sweep_trial.FROZEN_GROUPS`, the parameters it
        trains.
    """
    T = None
    if settings.k > 1 or settings.cot:  # positions: the sequence length of the trial's queries
        T = training_data(task_for_seed(N, R, 0), settings.k, settings.cot)[3]
    model = init_model(N, R, d, settings.width_factor * d, attention=settings.attention, heads=settings.heads,
                       positions=T, rng=0, dtype=np.dtype(np.float32))
    total = model.parameter_count()
    arrays = model.arrays()
    out = {"all": total}
    for mode, groups in FROZEN_GROUPS.items():
        out[mode] = total - sum(int(arrays[g].size) for g in groups if g in arrays)
    return out


def bits_per_parameter(records: list[dict]) -> list[dict]:
    """Bits of knowledge per parameter at the capacity threshold, per (N, R, k, mode) of threshold records.

    For every seed with a measured d*: ``knowledge_bits(N, R, k)`` over the parameter count of the model
    trained at d* (all parameters; ``per_trained_parameter``: over the parameters not frozen in that mode); a
    search censored at the floor of its range, whose d* is only an upper bound, is left out
    (:func:`.sweep_records.is_floor_censored`). Beside them: the same ratio for the constructions at (N, R,
    k) (their nominal sizes: G1 and A1 for one hop, G2 and C1 for k hops) and :data:`BITS_REFERENCES`.

    Parameters
    ----------
    records : list of dict
        Sweep records (threshold records are used; others are skipped).

    Returns
    -------
    list of dict
        One row per (N, R, k, CoT, mode): ``bits`` (:func:`knowledge_bits`), ``seeds`` (per seed: d*, the
        parameter count, the two ratios), their ``mean``, ``constructions`` and ``references``.
    """
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        measured = r.get("d_star") is not None and not is_floor_censored(r)
        if r.get("kind", "threshold") == "threshold" and measured:
            groups.setdefault((r["N"], r["R"], r.get("k", 1), bool(r.get("cot")), r["mode"]), []).append(r)
    rows = []
    for (N, R, k, cot, mode), group in sorted(groups.items()):
        group.sort(key=lambda r: r["seed"])
        bits = knowledge_bits(N, R, k)
        seeds = []
        for r in group:
            settings = TrialSettings(steps=r["steps"], lr=r["lr"], width_factor=r["width_factor"],
                                     attention=r["attention"], dtype=r["dtype"], k=r.get("k", 1),
                                     cot=bool(r.get("cot")), heads=r.get("heads", 1))
            counts = model_parameters(N, R, r["d_star"], settings)
            seeds.append({"seed": r["seed"], "d_star": r["d_star"], "parameters": counts["all"],
                          "bits_per_parameter": bits["bits"] / counts["all"],
                          "per_trained_parameter": bits["bits"] / counts[mode]})
        constructions = {}
        for name in (("G1", "A1") if k == 1 else (("C1",) if cot else ("G2",))):
            promise = registry.get(name).nominal_promise(N, R, k)
            constructions[name] = {"d": int(promise.d), "parameters": int(promise.params),
                                   "bits_per_parameter": bits["bits"] / promise.params}
        values = [s["bits_per_parameter"] for s in seeds]
        rows.append({"N": N, "R": R, "k": k, "cot": cot, "mode": mode, **bits, "seeds": seeds,
                     "mean": float(np.mean(values)), "constructions": constructions,
                     "references": dict(BITS_REFERENCES)})
    return rows


def knowledge_table(rows: list[dict]) -> str:
    """:func:`bits_per_parameter` as text.

    Parameters
    ----------
    rows : list of dict
        What :func:`bits_per_parameter` returns.

    Returns
    -------
    str
        One line per row and one of references; empty when no search reached 100%.
    """
    if not rows:
        return ""
    lines = ["bits of knowledge per parameter at d* (log2 of the tasks told apart / the trained model's "
             "parameters):"]
    for row in rows:
        per_seed = ", ".join(f"{s['bits_per_parameter']:.2f} (seed {s['seed']}, d* = {s['d_star']}, "
                             f"{s['parameters']:,} params)" for s in row["seeds"])
        built = ", ".join(f"{name} {c['bits_per_parameter']:.3f} (d = {c['d']})"
                          for name, c in row["constructions"].items())
        bound = "" if row["exact"] else " (at least)"
        lines.append(f"  N={row['N']} R={row['R']} k={row['k']}{' CoT' if row['cot'] else ''} {row['mode']}: "
                     f"{row['bits']:,.0f} bits{bound}; {per_seed}; constructions: {built}")
    lines.append("  references: " + "; ".join(f"≈{v:g} bits/param, {k}" for k, v in BITS_REFERENCES.items()))
    return "\n".join(lines)
