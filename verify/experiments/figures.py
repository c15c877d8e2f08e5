"""Figures (optional ``plot`` extra: matplotlib). Each is written as PNG and SVG.

| file | what it shows | data |
|---|---|---|
| ``thresholds`` | capacity threshold d* against R·ln N, learned vs frozen, with the fitted c·R·ln N |
threshold records of ``--from`` (``georecall sweep threshold``) | | ``tradeoff`` | d against k: G2 (no CoT),
C1 (CoT) and their lower bounds | computed (``bounds.tables``) | | ``margins`` | histograms of per-query logit
margins: G1 (sign codes) and C1 (every decoding step) | computed (exhaustive checks) | | ``transfer`` |
freeze-and-swap accuracies (closed form, fitted) of each transfer record | transfer records of ``--from``
(``georecall transfer --append``) |
"""

from __future__ import annotations

import math
import os

import numpy as np

PLOT_HINT = "georecall figures needs matplotlib: pip install 'georecall[plot]' (or pip install matplotlib)"


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ImportError(PLOT_HINT) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, out_dir: str, name: str) -> list[str]:
    paths = []
    for ext in ("png", "svg"):
        path = os.path.join(out_dir, f"{name}.{ext}")
        fig.savefig(path, dpi=120, bbox_inches="tight")
        paths.append(path)
    return paths


def make_figures(records: list[dict], out_dir: str, *, seed: int = 0, N: int = 4096, R: int = 4,
                 k_max: int = 4) -> list[str]:
    """Draw every figure the records allow (plus the computed ones) into ``out_dir``; returns the paths."""
    plt = _pyplot()
    from georecall.bounds.tables import bound_rows
    from georecall.constructions.multi_hop import build_c1, chains, multi_hop_queries
    from georecall.theory.tasks import random_task
    from georecall.verify.checking.check import check_decoding
    from georecall.verify.experiments.sweep import fit_thresholds
    from georecall.verify.sections.suite import check_single_hop

    os.makedirs(out_dir, exist_ok=True)
    written = []

    thresholds = [r for r in records if r.get("kind") == "threshold" and r.get("d_star") is not None]
    if thresholds:
        fig, ax = plt.subplots(figsize=(5, 4))
        fits = fit_thresholds(thresholds)
        for mode, marker in (("learned", "o"), ("frozen", "s")):
            rows = [r for r in thresholds if r["mode"] == mode]
            if not rows:
                continue
            x = [r["R"] * math.log(r["N"]) for r in rows]
            ax.scatter(
                x, [r["d_star"] for r in rows], marker=marker, label=f"{mode} (c = {fits[mode]['c']:.2f})"
            )
            grid = np.linspace(0, max(x) * 1.05, 50)
            ax.plot(grid, fits[mode]["c"] * grid, linestyle="--")
        ax.set_xlabel("R · ln N")
        ax.set_ylabel("capacity threshold d*")
        ax.set_title("smallest d reaching 100% (gradient descent)")
        ax.legend()
        written += _save(fig, out_dir, "thresholds")
        plt.close(fig)

    rows = bound_rows([N], [R], list(range(1, k_max + 1)), [1])
    fig, ax = plt.subplots(figsize=(5, 4))
    for name, bound_label in (("G2", "no-CoT lower bound"), ("C1", "CoT lower bound")):
        mine = [r for r in rows if r["construction"] == name]
        ks = [r["k"] for r in mine]
        (line,) = ax.plot(ks, [r["d"] for r in mine], marker="o", label=f"{name} d")
        ax.plot(
            ks, [max(r["d_min"], 1) for r in mine], linestyle=":", color=line.get_color(), label=bound_label
        )
    ax.set_yscale("log")
    ax.set_xticks(range(1, k_max + 1))
    ax.set_xlabel("hops k")
    ax.set_ylabel("embedding dimension d")
    ax.set_title(f"capacity-depth tradeoff, N = {N}, R = {R}, b = 1")
    ax.legend()
    written += _save(fig, out_dir, "tradeoff")
    plt.close(fig)

    g1 = check_single_hop(1024, 8, codes="sign", D=48, seed=seed, keep=True)
    task = random_task(256, 3, np.random.default_rng(seed))
    c1 = build_c1(task, 3)
    tokens, _ = multi_hop_queries(task, 3)
    decoded = check_decoding(c1.model, tokens, chains(task, 3), keep=True)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    assert g1.promise is not None and g1.result.margins is not None and decoded.margins is not None
    axes[0].hist(g1.result.margins, bins=40)
    axes[0].axvline(g1.promise.margin, color="k", linestyle="--", label="promised lower bound")
    axes[0].set_title(f"G1, sign codes, N=1024, R=8 (min {g1.result.min_margin:.3g})")
    axes[1].hist(decoded.margins.ravel(), bins=40)
    axes[1].axvline(c1.promise.margin, color="k", linestyle="--", label="promised lower bound")
    axes[1].set_title("C1 decoding steps, N=256, R=3, k=3")
    for ax in axes:
        ax.set_xlabel("logit margin")
        ax.legend()
    written += _save(fig, out_dir, "margins")
    plt.close(fig)

    transfers = [r for r in records if r.get("kind") == "transfer"]
    if transfers:
        fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(transfers)), 3.5))
        bars = np.arange(len(transfers))
        ax.bar(
            bars - 0.2, [r["closed_form_accuracy"] for r in transfers], 0.4, label="closed form (zero-shot)"
        )
        ax.bar(bars + 0.2, [r["fitted_accuracy"] for r in transfers], 0.4, label="embeddings fitted")
        ax.set_xticks(bars, [r.get("label", str(i)) for i, r in enumerate(transfers)], rotation=20)
        ax.set_ylabel("accuracy on new bijections")
        ax.set_ylim(0, 1.05)
        ax.legend()
        written += _save(fig, out_dir, "transfer")
        plt.close(fig)
    return written
