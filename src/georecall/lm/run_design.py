"""What the ``probe-lm`` study (:mod:`.run`) declares before a run: the thresholds of its verdict, the sizes
of its probes (folds, templates, LRE's training facts, β, doses, the finite-difference step, the power draws),
the context every text is read after, the default LRE and intervention layers, and the seed streams every
random choice draws from (``docs/lm.md``, "Thresholds"; changing these changes the verdict, and is done
before a run)."""

from __future__ import annotations

import numpy as np

from georecall.experiments import power
from georecall.lm import controls
from georecall.theory import seeds

__all__ = ["BETAS", "DOSES", "FD_STEP", "FOLDS", "LRE_MIN_TEST", "LRE_TRAIN", "POWER_DRAWS", "PREFIX",
           "TEMPLATES", "THRESHOLDS", "default_intervene_layers", "default_lre_layers", "stream_rng"]

# Declared before the runs they judge (docs/lm.md, "Thresholds"); changing them changes the verdict only.
# The first seven date from the first SmolLM2 run; the rest (power, known facts, LRE, patching) from issue
# 35's rewrite, before its run.
THRESHOLDS = {
    "decode_margin": power.DECODE_MARGIN,  # accuracy - max(chance, majority, shuffled, random model)
    "encoding_share": 0.5,  # share of the relations that can be told that are decodable
    "superposition_r2": 0.5,  # held-out R² of the superposition fit
    "superposition_margin": 0.10,  # ... above the shuffled-facts, presence-only and random-model R²
    "intervention_success": 0.5,  # answer becomes j
    "intervention_gain": 0.4,  # ... above how often the unedited answer is already j
    "intervention_stay": 0.8,  # the other relations' answers unchanged
    "power_required": power.POWER_REQUIRED,  # a negative verdict needs the planted control this often
    "named_snr": power.NAMED_SNR,  # ... at this planted signal-to-noise ratio (decoding)
    "superposition_snr": 3.0,  # ... and at this one (superposition: R² >= 0.5 needs SNR >= 1 even ideally)
    "told_min": 3,  # relations that can be told needed for a layer-level encoding verdict
    "lre_faithful": 0.5,  # held-out LRE faithfulness (vocabulary) ...
    "lre_gain": 0.2,  # ... above the bias alone
    "patch_moved": 0.5,  # patching moves the answer to the other subject's in this share of pairs
    # power of the probes of the model's own answer (issue 35, second part; declared before its run): a
    # negative LRE, patching or intervention verdict needs its planted control (src/georecall/lm/controls.py)
    # passing the same rule in power_required of the draws at these strengths
    "lre_named": controls.LRE_NAMED,  # linear share of the planted readout's logits
    "patch_named": controls.PATCH_NAMED,  # share of the planted answer read at the patched position
    "intervention_snr": 3.0,  # planted superposition SNR (as superposition_snr)
}
FOLDS = 5
TEMPLATES = 2
LRE_TRAIN = 5
LRE_MIN_TEST = 3
BETAS = (0.0, 0.5, 1.0, 2.0, 4.0)
DOSES = (0.25, 1.0, 4.0)
FD_STEP = 1e-3
POWER_DRAWS = power.DRAWS  # plantings per SNR for every power estimate
# Every text read starts with this one-token context, so that no state is read at position 0: there decoder
# LMs keep an "attention sink" with massive activations (docs/lm_smollm2_run1_sink.txt).
PREFIX = "\n"


def default_intervene_layers(L: int) -> list[int]:
    """The declared intervention layers: a quarter, half and three quarters of the depth.

    Parameters
    ----------
    L : int
        The model's number of blocks (layers are ``0..L``).

    Returns
    -------
    list of int
        ``round(L/4)``, ``round(L/2)``, ``round(3L/4)`` (halves rounded up), distinct and sorted.
    """
    return sorted({int(L * f + 0.5) for f in (0.25, 0.5, 0.75)})


def default_lre_layers(L: int) -> list[int]:
    """The declared LRE layers: every third layer from 1 to L − 1 (the Jacobian is costly).

    Parameters
    ----------
    L : int
        The model's number of blocks.

    Returns
    -------
    list of int
    """
    return list(range(1, max(2, L), 3))


_KEYS = {"lm-shuffle": 1000, "lm-decode": 1001, "lm-sup": 1002, "lm-intervene": 1003, "lm-power": 1004,
         "lm-patch": 1005, "lm-lre": 1006, "lm-sup-power": 1007, "lm-lre-power": 1008, "lm-patch-power": 1009,
         "lm-iv-power": 1010}


def stream_rng(seed: int, name: str, *key: int) -> np.random.Generator:
    """The study's named random stream ``name`` of run seed ``seed`` (one stream per use, further keyed).

    Parameters
    ----------
    seed : int
        The run seed.
    name : str
        The stream's name (a key of the declared streams).
    *key : int
        Further keys (a layer, a relation).
    """
    return seeds.rng(seed, "probes", _KEYS[name], *key)
