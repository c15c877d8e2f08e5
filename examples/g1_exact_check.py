"""Build G1 (the paper's Theorem 4.1) on random bijections and check every query exactly, in integer mode.

    python examples/g1_exact_check.py
"""

import numpy as np

from georecall.constructions.single_hop import build_g1, single_hop_queries
from georecall.theory.tasks import random_task
from georecall.verify.checking.check import check_queries

rng = np.random.default_rng(0)
N, R = 1024, 8
task = random_task(N, R, rng)
built = build_g1(task, "binary", integer=True)
tokens, answers = single_hop_queries(task)
result = check_queries(built.model, tokens, answers, integer=True)
print(f"G1, N={N}, R={R}: d = {built.model.d} (promised {built.promise.d}), m = {built.model.mlp_width}")
print(f"{result.n_correct}/{result.n_queries} queries right, min margin {result.min_margin:g} "
      f"(promised >= {built.promise.margin:g}), exact integer arithmetic")
assert result.exact and result.min_margin >= built.promise.margin
