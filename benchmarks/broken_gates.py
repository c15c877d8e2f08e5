"""A deliberately broken G1 for ``bench_certify.py`` (case ``refute-4096``): every gate ajar (b1 + 3),
so units fire for foreign relations and the checker fails 86 % of the seeded task's queries at N = 4096,
R = 16."""

from __future__ import annotations

import dataclasses

import numpy as np

from georecall.constructions import registry
from georecall.constructions.model import MLP, Layer

__all__ = ["SPEC", "family"]


def family(N, R, k=1, **options):
    """G1's family with ``b1 + 3``."""
    f = registry.get("G1").family(N, R, k, **options)
    mlp = f.model.layers[0].mlp
    layer = Layer(f.model.layers[0].attention, MLP(mlp.W1, np.asarray(mlp.b1) + 3.0, mlp.W2, mlp.b2))
    return dataclasses.replace(f, model=dataclasses.replace(f.model, layers=(layer,)))


_G1 = registry.get("G1")
SPEC = registry.ConstructionSpec("BG1", "broken-gates", "benchmark", None, _G1.nominal_promise,
                                 options=_G1.options, variants=_G1.variants,
                                 task_encoding=_G1.task_encoding, family=family)
