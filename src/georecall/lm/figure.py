"""The probe-lm figure: per-layer probes of the model's own answer, decoding power, and dose-response."""

from __future__ import annotations

import os
from typing import IO

import numpy as np

from georecall.io import atomic_write

__all__ = ["figure"]


def figure(doc: dict, out: str) -> list[str]:
    """Draw ``lm_layers.{png,svg}`` from a :func:`~georecall.lm.run.probe_lm` document.

    Left: per layer, the logit lens and activation patching (per template; shares of known facts and of
    pairs), LRE faithfulness on held-out known facts (mean over the relations with enough known facts, and
    its bias-alone control) and the decoding accuracy (mean over relations), with the planted controls' power
    of patching (template 0) and LRE at their named strengths. Middle: each relation's power,
    the detection rate of a planted mechanism of the run's shape against the planted SNR, with the
    shuffled-label control and the required rate. Right: the interventions' dose-response (answer becomes
    j, others stay) per layer, and the planted control's selective share per dose. Written atomically at 130
    dpi.

    Parameters
    ----------
    doc : dict
        A :func:`~georecall.lm.run.probe_lm` document.
    out : str
        An existing (or creatable) folder.

    Returns
    -------
    list of str
        The paths written.

    Raises
    ------
    ImportError
        Without matplotlib (a plain ImportError: the caller gives the install hint).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(out, exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.6))
    _known_facts_panel(axes[0], doc)
    _power_panel(axes[1], doc)
    _intervention_panel(axes[2], doc)
    fig.suptitle(f"{doc['model']}: {doc['subjects']} subjects, {doc['relations_n']} relations", fontsize=10)
    fig.tight_layout()
    paths = _save(fig, out)
    plt.close(fig)
    return paths


def _known_facts_panel(ax, doc: dict) -> None:
    """Left panel: per layer, the model's own probes of known facts (lens, patching, LRE) and decoding."""
    layers = doc["layer_list"]
    _lens_and_patching(ax, doc)
    _lre_curves(ax, doc)
    ax.plot(layers, [row["decode_mean"] for row in doc["layers"]], "-", color="grey",
            label="decoding into U (mean of relations)")
    ax.set_xlabel("layer")
    ax.set_ylabel("share")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)  # below: no data hidden
    ax.set_title("known facts: lens, patching, LRE", fontsize=10)


def _lens_and_patching(ax, doc: dict) -> None:
    """Per template, the logit lens and the share of pairs patching moves (and template 0's planted power)."""
    layers = doc["layer_list"]
    styles = ["-", "--"]
    for t, tm in enumerate(doc["templates"]):
        lens = [np.nan if v is None else v for v in doc["logit_lens"][t]]
        ax.plot(layers, lens, styles[t], color="tab:blue", label=f"logit lens, template {tm}")
        if doc["patching"][t]["moved"]:
            ax.plot(doc["patching"][t]["layers"], doc["patching"][t]["moved"], styles[t], color="tab:red",
                    label=f"patching moves the answer, template {tm}")
        if t == 0 and doc["patching"][t].get("power"):
            named = float(doc["thresholds"]["patch_named"])
            rates = [pw["rate"][[float(v) for v in pw["strengths"]].index(named)]
                     for pw in doc["patching"][t]["power"]]
            ax.plot(doc["patching"][t]["layers"], rates, ":", color="tab:red", lw=1,
                    label=f"patching power (planted share {named:g}), template {tm}")


def _lre_curves(ax, doc: dict) -> None:
    """LRE faithfulness per layer, its bias-alone control and its power (means over relations told)."""
    told = [x for x in doc["lre"] if x["told"]]
    if not told:
        return
    lre_layers = doc["lre_layers"]
    ax.plot(lre_layers, [np.mean([x["layers"][k]["faithful"] for x in told])
                         for k in range(len(lre_layers))], "o-", color="tab:green",
            label=f"LRE faithful (mean of {len(told)} relations)")
    ax.plot(lre_layers, [np.mean([x["layers"][k]["bias_only"] for x in told])
                         for k in range(len(lre_layers))], "o:", color="tab:green", ms=3,
            label="LRE bias alone")
    if "power" in told[0]["layers"][0]:
        named = float(doc["thresholds"]["lre_named"])
        ax.plot(lre_layers, [np.mean([x["layers"][k]["power"]["rate"][
            [float(v) for v in x["layers"][k]["power"]["strengths"]].index(named)] for x in told])
            for k in range(len(lre_layers))], "x", color="tab:green", ms=7,
            label=f"LRE power (planted linear share {named:g}; mean)")


def _power_panel(ax, doc: dict) -> None:
    """Middle panel: each relation's decoding power against the planted SNR, with its controls."""
    T = doc["thresholds"]
    for x in doc["relations"]:
        pw = x["power"]
        ax.plot(pw["snrs"], pw["positive"], "-", lw=1, alpha=0.8, label=x["relation"])
    neg = [(snr, np.mean([x["power"]["negative"][k] for x in doc["relations"]]))
           for k, snr in enumerate(doc["snrs"]) if doc["relations"][0]["power"]["negative"][k] is not None]
    ax.plot([a for a, _ in neg], [b for _, b in neg], "kX", ms=9, label="shuffled labels (mean)")
    ax.axhline(T["power_required"], color="k", lw=0.6, ls=":")
    ax.axvline(T["named_snr"], color="k", lw=0.6, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("planted SNR")
    ax.set_ylabel("detection rate")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=6, ncol=2)
    ax.set_title("power of the decoding probe (planted, same shape)", fontsize=10)


def _intervention_panel(ax, doc: dict) -> None:
    """Right panel: the interventions' dose-response per layer and the planted control per dose."""
    for x in doc["interventions"]:
        if not x.get("edits"):
            continue
        ds = [d for d in x["doses"] if d["dose"] != "fitted"]
        line = ax.plot([d["dose"] for d in ds], [d["success"] for d in ds], "o-",
                       label=f"layer {x['layer']}: -> j")
        ax.plot([d["dose"] for d in ds], [np.nan if d["stay"] is None else d["stay"] for d in ds], "s--",
                color=line[0].get_color(), ms=3, label=f"layer {x['layer']}: others stay")
        fit = [d for d in x["doses"] if d["dose"] == "fitted"][0]
        ax.plot([x["fitted_ratio_median"]], [fit["success"]], "*", color=line[0].get_color(), ms=10)
    ivp = doc.get("intervention_power")
    if ivp:
        k = ivp["snrs"].index(doc["thresholds"]["intervention_snr"])
        ds = [(d, v) for d, v in zip(ivp["doses"], ivp["rate"][k]) if d != "fitted"]
        ax.plot([d for d, _ in ds], [v for _, v in ds], "k^-", lw=1, ms=5,
                label=f"planted control (SNR {doc['thresholds']['intervention_snr']:g}): selective")
    ax.set_xscale("log")
    ax.set_xlabel("|Δ| / |h| (star: the fitted Δ's median size)")
    ax.set_ylabel("share of edits")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7, loc="center left")
    ax.set_title("intervention h + Δ, Δ ∝ A_r(U_j − U_a)", fontsize=10)


def _save(fig, out: str) -> list[str]:
    """Write the figure as ``lm_layers.png`` and ``.svg`` into ``out``, atomically at 130 dpi; the paths."""
    paths = []
    for ext in ("png", "svg"):
        path = os.path.join(out, f"lm_layers.{ext}")

        def save(f: IO[bytes], ext: str = ext) -> None:
            fig.savefig(f, format=ext, dpi=130)
        atomic_write(path, save)
        paths.append(path)
    return paths
