"""Bring your own construction: a one-hot variant of G1, defined outside georecall and checked exhaustively.

Construction (OH1). The attribute codes are one-hot: ``a_j = 1_j ∈ R^N`` (D = N, ``|a|² = 1``, every pair
orthogonal, so ``gap = |a|² − max_{i≠j}<a_i, a_j> = 1``). Everything else is G1's: the subject embedding is
the block superposition ``e_s = Σ_r J_{B_r} 1_{π_r(s)}``, the relation token opens gate ``g_r`` with value G,
the gated selector copies block ``B_ρ`` into the output block, and ``U_j = λ·J_O 1_j``. After uniform
attention with gain g = 2 the MLP sees ``y = 2·e_s + q_r``; a unit of an unasked relation gets at most
``2·1 − G < 0`` for G > 2, and the asked block arrives as ``2·1_{π_ρ(s)}``: the logit of the right answer is
``2λ`` and every other is 0. So the promise is: d = R·N + R + N, m = 2·R·N, margin 2λ, on all N·R queries,
provided G > 2 and λ > 0. It is the "lookup table" end of the design space: d linear in N, where G1 with
binary codes needs ⌈log2 N⌉.

The spec gives a *family*: everything but the entity table, built without ever seeing a task, and declares
how the task enters (``task_encoding``: ``E[s, B_r] = a_{π_r(s)}``). georecall assembles ``F ⊕ enc(π)``
itself, so ``check`` (one task) and ``certify`` (every task) speak of the same object.

Check it on one task, or certify it for every task, from the command line (the current directory must
contain ``examples/``):

    georecall check single-hop --construction examples/my_construction.py:SPEC --N 64 --R 3
    georecall certify single-hop --construction examples/my_construction.py:SPEC --N 64 --R 3
    georecall check single-hop --construction examples.my_construction:SPEC --N 64 --R 3 --json

or in Python: ``run_check(SPEC, N, R)`` (``georecall.verify.checking.run``) and ``certify(SPEC, N, R)``
(``georecall.verify.checking.certify``), as ``__main__`` below does.
"""

import numpy as np

from georecall.constructions.codes import Codes
from georecall.constructions.encoding import Family, TaskEncoding
from georecall.constructions.layout import Layout
from georecall.constructions.model import Layer, Model
from georecall.constructions.parts import code_readout, gated_selector, uniform_gain_attention
from georecall.constructions.registry import ConstructionSpec
from georecall.errors import ConditionError
from georecall.theory.statements import Condition, Promise, one_layer_params


def one_hot_promise(N: int, R: int, *, gate: float = 4.0, lam: float = 1.0) -> Promise:
    """What OH1 promises, from the argument above (never read off a built model)."""
    d, m = R * N + R + N, 2 * R * N
    conditions = (
        Condition("gate: G > c1·max|a| = 2", gate, 2.0),
        Condition("read-out scale: λ > 0", lam, 0.0),
    )
    return Promise(
        "OH1",
        "one-hot G1 (user construction)",
        d,
        m,
        one_layer_params(N, R, d, m),
        N * R * N,
        2 * lam,
        conditions,
    )


ENCODING = TaskEncoding("relations", "blocks", "single")  # E[s, B_r] = a_{π_r(s)}: G1's superposition


def one_hot_family(N: int, R: int, k: int = 1, *, attributes: str = "shared", lam: float = 1.0,
                   gate: float = 4.0, rng=None) -> Family:
    """OH1 without a task (single hop): every field but the entity table, which georecall adds from the
    task as ``ENCODING`` declares. Takes no code kind or length: its codes are one-hot by definition, so its
    spec declares only ``lam`` among the common options (``--codes`` and ``--D`` are refused, exit 2).

    Raises
    ------
    ConditionError
        Outside its conditions (k != 1, G <= 2, λ <= 0, disjoint attributes): the command line reports it
        in one line, exit 2.
    """
    if k != 1 or attributes != "shared":
        raise ConditionError(f"OH1 is single-hop with shared attributes: got k = {k}, {attributes}")
    promise = one_hot_promise(N, R, gate=gate, lam=lam).require()
    one_hot = Codes(
        "one-hot",
        np.eye(N),
        norm_sq=1.0,
        max_abs=1.0,
        mu=0.0 if N > 1 else -1.0,
        gap=1.0,
        distinct=True,
        distinct_lhs=1,
        distinct_rhs=0,
        certificate="one-hot codes are orthogonal",
    )
    layout = Layout()
    blocks, gates, out = layout.add("blocks", R, N), layout.add("gates", R), layout.add("out", N)
    Q = np.zeros((R, layout.d))
    Q[np.arange(R), gates] = gate
    mlp = gated_selector(layout.d, blocks, [gates], out, gate)  # c2·G with c2 = 1
    model = Model(
        np.zeros((0, layout.d)),  # the entity table: left to the task (ENCODING)
        Q,
        layers=(Layer(uniform_gain_attention(layout.d, 2.0), mlp),),
        meta={"construction": "OH1", "layout": layout.as_dict()},
        **code_readout(one_hot, N, layout.d, out, lam),  # U_j = λ·a_j on `out`, stored compactly
    )
    return Family(model, promise, one_hot, {"gate": gate, "lambda": lam}, layout, ENCODING, N, R)


SPEC = ConstructionSpec(
    "OH1",
    "one-hot",
    "one-hot G1: a lookup-table subject embedding (user-defined example)",
    None,  # no builder of a task: check builds the family assembled on the task, F ⊕ enc(π)
    lambda N, R, k=1: one_hot_promise(N, R),
    options={"gate"},
    common={"lam"},  # of the common options (codes, D, lam) only the read-out scale: its codes are one-hot
    verify_cases=({"N": 64, "R": 3},),
    task_encoding=ENCODING,
    family=one_hot_family,
)


if __name__ == "__main__":
    from georecall.verify.checking.certify import certify
    from georecall.verify.checking.run import run_check

    report = run_check(SPEC, 64, 3, seed=0)
    print(
        f"{report.name}: {report.result.n_correct}/{report.result.n_queries} queries right, d = "
        f"{report.achieved['d']} (promised {report.promise.d}), min margin {report.result.min_margin:g} "
        f"(promised {report.promise.margin:g}) -> {'PASS' if report.passed else 'FAIL'}"
    )
    assert report.passed
    every = certify(SPEC, 64, 3, seed=0)
    print(f"{every.name}: {every.verdict} for every task, min margin {every.min_margin:g} (allowance "
          f"{every.allowance:.2g})")
    assert every.verdict == "CERTIFIED"
