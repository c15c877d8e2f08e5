"""The capacity-depth tradeoff: 2-hop recall with path blocks (G2, no chain-of-thought) against C1 (CoT),
both checked on every query, next to their lower bounds.

    python examples/cot_vs_no_cot.py
"""

from georecall.bounds import lower
from georecall.verify.checking.run import check_multi_hop

N, R, k = 512, 3, 2
for construction in ("path-blocks", "cot"):
    report = check_multi_hop(N, R, k, construction=construction, seed=0)
    bound = (lower.tradeoff if construction == "path-blocks" else lower.chain_of_thought)(N, R, k, b=1)
    print(
        f"{report.name:>10}: d = {report.achieved['d']:4d}, lower bound d >= {bound.d_min:4d}, "
        f"{report.result.n_correct}/{report.result.n_queries} right, "
        f"min margin {report.result.min_margin:.3g}"
    )
    assert report.passed and report.achieved["d"] >= bound.d_min
