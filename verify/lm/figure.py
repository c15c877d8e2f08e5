"""The probe-lm figure: per-layer decoding accuracy, superposition R² and interventions, with controls."""

from __future__ import annotations

import os
from typing import IO

from georecall.io import atomic_write

__all__ = ["figure"]


def figure(doc: dict, out: str) -> list[str]:
    """Draw ``lm_layers.{png,svg}`` from a :func:`~georecall.verify.lm.run.probe_lm` document.

    Left panel: held-out decoding accuracy per layer (subject state alone, in the prompt, shuffled labels,
    the baseline, the random-init model) with the interventions' success and stay; right panel: the
    superposition fit's held-out R² per layer and its controls. Written atomically at 130 dpi.

    Parameters
    ----------
    doc : dict
        A :func:`~georecall.verify.lm.run.probe_lm` document.
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
    layers = [row["layer"] for row in doc["layers"]]
    rnd = {row["layer"]: row for row in doc.get("random_layers", [])}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    ax.plot(layers, [r["decode_alone"] for r in doc["layers"]], "o-", label="decoding, subject state")
    ax.plot(layers, [r["decode_prompt"] for r in doc["layers"]], "s-", ms=3, label="decoding, in the prompt")
    ax.plot(layers, [r.get("decode_shuffled") for r in doc["layers"]], "--", label="shuffled labels")
    ax.plot(layers, [r["baseline"] for r in doc["layers"]], ":", color="k", label="max(chance, majority)")
    if rnd:
        ax.plot(layers, [rnd[x]["decode_alone"] for x in layers], "-", color="grey",
                label="random-init model")
    for x in doc.get("interventions", []):
        if x.get("edits"):
            ax.plot([x["layer"]], [x["success"]], "r*", ms=11)
            ax.plot([x["layer"]], [x["stay"]], "g^", ms=8)
    ax.plot([], [], "r*", label="intervention: answer -> j")
    ax.plot([], [], "g^", label="intervention: others stay")
    ax.set_xlabel("layer")
    ax.set_ylabel("held-out accuracy (mean over relations)")
    ax.set_ylim(-0.02, 1.02)
    # between the accuracy lines (about 0.3) and the "others stay" markers (about 1)
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.01, 0.42))
    ax.set_title("linear decoding of attributes", fontsize=10)
    ax = axes[1]
    ax.plot(layers, [r["r2_u"] for r in doc["layers"]], "o-", label="R², unembedding vectors")
    ax.plot(layers, [r["r2_h"] for r in doc["layers"]], "s-", ms=3, label="R², attribute states")
    ax.plot(layers, [r.get("r2_shuffled") for r in doc["layers"]], "--", label="R², shuffled facts")
    ax.plot(layers, [r["presence_r2"] for r in doc["layers"]], ":", color="k",
            label="R², relation pattern only")
    if rnd:
        ax.plot(layers, [rnd[x]["r2_u"] for x in layers], "-", color="grey", label="R², random-init model")
    ax.set_xlabel("layer")
    ax.set_ylabel("held-out R² of the subject state")
    ax.legend(fontsize=7)
    ax.set_title("superposition fit h_s ≈ Σ_r A_r v_{a_r(s)}", fontsize=10)
    fig.suptitle(f"{doc['model']}: {doc['subjects']} subjects, {doc['relations_n']} relations", fontsize=10)
    fig.tight_layout()
    paths = []
    for ext in ("png", "svg"):
        path = os.path.join(out, f"lm_layers.{ext}")

        def save(f: IO[bytes], ext: str = ext) -> None:
            fig.savefig(f, format=ext, dpi=130)
        atomic_write(path, save)
        paths.append(path)
    plt.close(fig)
    return paths
