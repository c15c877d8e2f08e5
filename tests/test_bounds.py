"""Counting, graphs, lower bounds and tables (docs/bounds.md)."""

import csv
import io
import itertools
import json
import math

import networkx as nx
import numpy as np
import pytest
from conftest import tables
from hypothesis import given
from hypothesis import strategies as st

from georecall.bounds import graphs, lower
from georecall.bounds.counting import (
    F_lower,
    all_permutations,
    ceil_log2_product,
    closed_forms,
    composition_table,
    enumerate_counts,
    exact_log2,
    log2_factorial,
    log2_falling,
    product_value,
)
from georecall.bounds.tables import bound_rows, render
from georecall.theory.tasks import Task, random_task


def brute_force_counts(N, R, k):
    """|F_k| and |Trees_k| with plain Python loops over every task (independent of the vectorized code)."""
    perms = list(itertools.permutations(range(N)))
    tables_seen, trees_seen = set(), set()
    for task in itertools.product(perms, repeat=R):
        row, leaves = [], []
        for path in itertools.product(range(R), repeat=k):  # (r_k, ..., r_1)
            image = []
            for s in range(N):
                v = s
                for r in reversed(path):
                    v = task[r][v]
                image.append(v)
            row.append(tuple(image))
            leaves.append(image[0])
        tables_seen.add(tuple(row))
        trees_seen.add(tuple(leaves))
    return len(tables_seen), len(trees_seen)


@pytest.mark.parametrize("N, R, k_max", [(2, 2, 3), (3, 2, 3), (3, 1, 4), (4, 2, 2), (3, 3, 2)])
def test_enumeration_equals_brute_force(N, R, k_max):
    counts = enumerate_counts(N, R, k_max)
    for k in range(1, k_max + 1):
        assert (counts.F[k], counts.trees[k]) == brute_force_counts(N, R, k)


def test_golden_counts_by_hand():
    # N = 2, R = 2 by hand: tasks (I,I),(I,S),(S,I),(S,S). Two-hop tables: (I,I) and (S,S) give all-identity,
    # (I,S) and (S,I) give (I,S,S,I): |F_2| = 2; leaf vectors of vertex 0: (0,0,0,0) and (0,1,1,0).
    # Larger golden values: tests/test_counting_reference.py.
    c = enumerate_counts(2, 2, 2)
    assert (c.F, c.trees) == ({1: 4, 2: 2}, {1: 4, 2: 2})


@pytest.mark.parametrize("N, R, k_max", [(1, 3, 3), (2, 1, 3), (3, 2, 3), (4, 3, 2), (5, 2, 3), (6, 2, 2),
                                         (6, 1, 3), pytest.param(7, 1, 3, marks=pytest.mark.slow)])
def test_k1_closed_forms_and_sandwich_against_enumeration(N, R, k_max):
    counts = enumerate_counts(N, R, k_max)
    assert counts.F[1] == math.factorial(N) ** R and counts.trees[1] == N**R
    for k in range(1, k_max + 1):
        lower = closed_forms(N, R, k).trees_lower
        assert lower is None or lower <= counts.trees[k]
        assert product_value(F_lower(N, R, k)) <= counts.F[k]


def test_enumeration_refuses_too_many_tasks():
    with pytest.raises(ValueError, match="exceed the enumeration limit"):
        enumerate_counts(6, 3, 1)


def test_composition_table():
    perms = all_permutations(4)
    comp = composition_table(perms)
    rng = np.random.default_rng(0)
    for a, b in rng.integers(0, 24, size=(30, 2)):
        assert tuple(perms[comp[a, b]]) == tuple(perms[a][perms[b]])


@given(n=st.integers(0, 3000), m=st.integers(0, 3000))
def test_log2_falling_is_exact(n, m):
    if m > n:
        assert log2_falling(n, m) == -math.inf
    else:
        exact = math.perm(n, m)
        assert log2_falling(n, m) == pytest.approx(math.log2(exact) if exact < 2**1000 else exact_log2(exact),
                                                   rel=1e-15, abs=1e-12)


def test_big_falling_factorials_agree_between_exact_and_mpmath_paths():
    n = 2**20
    exact = exact_log2(math.perm(n, 20_000))
    assert log2_falling(n, 20_000) == pytest.approx(exact, rel=1e-14)
    assert log2_factorial(10_000) == pytest.approx(exact_log2(math.factorial(10_000)), rel=1e-14)


# ---------------------------------------------------------------------------------------------- graphs


@given(table=tables(max_N=20, max_R=4))
def test_task_graph_round_trip_and_validation(table):
    task = Task.from_table(table)
    graph = graphs.to_graph(task)
    graphs.validate_graph(graph)
    assert np.array_equal(graphs.from_graph(graph).table, task.table)
    assert all(graph.out_degree(v) == task.R and graph.in_degree(v) == task.R for v in graph)


@given(R=st.integers(1, 3), k=st.integers(1, 3), M=st.integers(1, 4), extra=st.integers(0, 20),
       seed=st.integers(0, 2**31))
def test_gadget_family_members_are_valid_with_the_assigned_leaves(R, k, M, extra, seed):
    N = M * graphs.tree_size(R, k) + extra
    task, roots, leaves = graphs.gadget_task(N, R, k, M, rng=seed)
    graphs.validate_graph(graphs.to_graph(task))
    assert np.array_equal(graphs.gadget_leaves(task, roots, k), leaves)
    assert np.unique(leaves).size == leaves.size
    # internal vertices of different roots are disjoint: BFS from each root to depth k-1 stays in its block
    answers = [task.k_hop(j).reshape(-1, N)[:, roots] for j in range(1, k)]
    internal = np.concatenate([roots[None]] + answers) if answers else roots[None]
    assert np.unique(internal).size == internal.size


def test_gadget_family_refuses_when_it_does_not_fit():
    with pytest.raises(ValueError, match=r"N >= M·\(1 \+ R \+ ... \+ R\^k\) = 14"):
        graphs.gadget_task(13, 2, 2, 2)


def corruptions(task):
    """Graphs that are not R-regular edge-coloured digraphs, each with the expected message."""
    g = graphs.to_graph(task)
    u, v, key = next(iter(g.edges(keys=True)))
    removed = g.copy()
    removed.remove_edge(u, v, key)
    yield removed, "has 0 out-edges of colour"
    doubled = g.copy()
    doubled.add_edge(0, 1, colour=0)
    yield doubled, "has 2 out-edges of colour 0"
    recoloured = g.copy()
    recoloured.edges[u, v, key]["colour"] = 7
    yield recoloured, "outside"
    redirected = g.copy()
    target = int(task.table[0, 0])
    redirected.remove_edge(0, target, next(k for k, d in redirected[0][target].items() if d["colour"] == 0))
    redirected.add_edge(0, int(task.table[0, 1]), colour=0)
    yield redirected, "in-edges of colour 0"


def test_corrupted_graphs_fail_the_validator():
    task = random_task(6, 3, 4)
    for graph, message in corruptions(task):
        with pytest.raises(ValueError, match=message):
            graphs.validate_graph(graph)
    with pytest.raises(ValueError, match="R is unknown"):
        graphs.validate_graph(nx.MultiDiGraph())


# ---------------------------------------------------------------------------------------------- bounds


def test_total_information_single_hop_closed_form():
    bound = lower.total_information(4096, 16, 1, b=1)
    assert bound.count_exact
    assert bound.log2_count_lower == pytest.approx(16 * exact_log2(math.factorial(4096)), rel=1e-15)
    assert 16 * (math.log2(4096) - math.log2(math.e)) < bound.d_bound < 16 * math.log2(4096)
    assert bound.d_min == 169


@pytest.mark.parametrize("fn", [lower.total_information, lower.per_entity, lower.tradeoff,
                                lower.chain_of_thought])
def test_bounds_are_monotone(fn):
    base = fn(4096, 4, 2, 1, 0)
    assert fn(4096, 8, 2, 1, 0).d_bound >= base.d_bound  # more relations, more to store
    assert fn(4096, 4, 2, 2, 0).d_bound <= base.d_bound  # more bits per parameter, fewer parameters
    assert fn(4096, 4, 2, 1, 1000).d_bound <= base.d_bound  # other fact-specific parameters help
    assert fn(2**16, 4, 2, 1, 0).d_bound >= base.d_bound  # more entities


def test_depth_makes_no_cot_bounds_exponential_and_cot_bounds_flat():
    no_cot = [lower.per_entity(2**20, 4, k).d_bound for k in (1, 2, 3)]
    cot = [lower.chain_of_thought(2**20, 4, k).d_bound for k in (1, 2, 3)]
    assert no_cot[1] > 3.5 * no_cot[0] and no_cot[2] > 3.5 * no_cot[1]  # about R = 4 times per hop
    assert cot[0] == cot[1] == cot[2] == pytest.approx(4 * 20)


def test_tradeoff_optimal_M_beats_its_neighbours():
    bound = lower.tradeoff(4096, 4, 2, 1, P0=20_000)
    M = bound.params["M"]
    for other in (M - 1, M + 1):
        if other >= 1:
            value = (lower.gadget_log2(4096, 4, 2, other) - 20_000) / other
            assert value <= bound.d_bound + 1e-9
    assert M > 1  # a large P0 is amortized over many roots


def test_every_construction_sits_above_its_bound():
    for row in bound_rows([2**8, 2**12, 2**16], [1, 3, 8], [1, 2, 3], [1, 4]):
        assert row["d"] >= row["d_min"], row


def test_g1_within_one_plus_order_one_over_log_n():
    for N in (2**8, 2**12, 2**16, 2**20):
        row = next(r for r in bound_rows([N], [16], [1]) if r["construction"] == "G1")
        L = math.log2(N)
        assert 1 < row["fact_bits_ratio"] <= 1 + 2.45 / (L - 1.45)
    row = next(r for r in bound_rows([4096], [16], [1]) if r["construction"] == "G1")
    assert row["fact_bits_ratio"] == 1.1365  # 192 / 168.945 = 1.136, not 1.137
    assert row["bound_bits_per_subject"] == pytest.approx(168.945, abs=5e-4)


def brute_d_min(factors, per_d, P0, b):
    """Smallest d >= 0 with 2^((per_d·d + P0)·p) >= C^q, by linear search in integers."""
    from fractions import Fraction
    p, q = Fraction(b).numerator, Fraction(b).denominator
    C = product_value(factors)
    d = 0
    while 2 ** ((per_d * d + P0) * p) < C**q:
        d += 1
    return d


@given(n=st.integers(1, 40), m=st.integers(0, 40), e=st.integers(0, 4), per_d=st.integers(1, 50),
       P0=st.integers(0, 60), b=st.sampled_from([1, 2, 3, 0.5, 1.5, 2.25]))
def test_d_min_is_decided_exactly(n, m, e, per_d, P0, b):
    factors = ((n, min(m, n), e),)
    assert lower.d_min_exact(factors, per_d, P0, b) == brute_d_min(factors, per_d, P0, b)


def test_d_min_at_exact_powers_of_two():
    # C = 2^t: the bound is met with equality, d_min = t / per_d exactly (no 1e-9 fudge needed)
    assert lower.total_information(2, 3, 1, 1).d_min == 2  # (2!)^3 = 8 = 2^3, N = 2: 2d >= 3
    assert lower.per_entity(4, 3, 1, 2).d_min == 3  # 4^3 = 2^6, b = 2: 2d >= 6
    assert lower.per_entity(4, 3, 1, 2, P0=1).d_min == 2


def test_ceil_log2_large_path_agrees_with_the_integer():
    for factors in (((70_000, 20_000, 1),), ((3000, 3000, 70),), ((2**16, 2**16, 1), (9, 9, 3))):
        assert ceil_log2_product(factors) == (product_value(factors) - 1).bit_length()


def test_total_information_for_k2_is_near_the_single_hop_bound():
    one, two = lower.total_information(4096, 4, 1), lower.total_information(4096, 4, 2)
    assert not two.count_exact and two.d_min >= one.d_min - 1 and two.d_bound > 42
    assert two.d_bound <= one.d_bound


def test_gap_rows_at_needed_and_per_parameter_bits():
    from georecall.bounds.tables import gap_rows
    rows = {r["construction"]: r for r in gap_rows([4096], [16], [1], {"G1": 2}, {"G1": 1})}
    # G1 answers in one pass with P0 = 0: per entity, d·b >= R·log2 N = 192 (stronger than total
    # information's 169 at b = 1, 85 at b = 2)
    assert rows["G1"]["needed_d_min"] == 96 and rows["G1"]["per_parameter_d_min"] == 192
    assert rows["G1"]["bound"] == "per-entity"
    assert rows["G1"]["needed_gap"] == pytest.approx(220 / 96, abs=1e-4)
    assert "needed_gap" not in rows["A1"]


@pytest.mark.parametrize("fmt", ["md", "csv", "json", "latex"])
def test_table_formats_carry_formula_parameters_and_version(fmt):
    rows = bound_rows([1024], [4], [1, 2], [1])
    text = render(rows, fmt)
    if fmt == "json":
        doc = json.loads(text)
        assert doc["version"] and all(r["formula"] and r["version"] for r in doc["rows"])
    elif fmt == "csv":
        parsed = list(csv.DictReader(io.StringIO(text)))
        assert len(parsed) == len(rows) and parsed[0]["formula"] and parsed[0]["version"]
    elif fmt == "md":  # bounds named in words
        assert "total information" in text and "chain of thought" in text
    else:
        assert "& total &" in text and "& CoT &" in text and f"% georecall {rows[0]['version']}" in text
    with pytest.raises(ValueError, match="format"):
        render(rows, "html")


def test_leading_terms_are_sympy_expressions():
    import sympy as sp
    terms = lower.leading_terms()
    value = terms["chain-of-thought"].subs({sp.Symbol("N", positive=True): 1024,
                                            sp.Symbol("R", positive=True): 4,
                                            sp.Symbol("b", positive=True): 1})
    assert sp.simplify(value - 40) == 0


def test_one_entity_has_one_task_and_no_ratio():
    """N = 1: one task (log2 of the count is 0), so G1's fact-bits ratio is undefined (None), not a division
    by zero (found by the long fuzz run: `georecall bounds --N 1 --R 2 --k 1` crashed with exit 3)."""
    from georecall.bounds.tables import bound_rows

    rows = bound_rows([1, 2], [2], [1])
    g1 = {row["N"]: row for row in rows if row["construction"] == "G1"}
    assert g1[1]["log2_count_lower"] == 0 and g1[1]["fact_bits_ratio"] is None
    assert g1[2]["log2_count_lower"] > 0 and g1[2]["fact_bits_ratio"] > 0


def test_ceil_log2_of_an_astronomical_count_without_forming_it():
    """Counts far beyond EXACT_BITS: a power of two is decided in integers; any other count by high-precision
    logarithms, checked here against mpmath at 200 digits and, for a count small enough, the exact integer.
    (Found by the long fuzz run: `bounds --bits 0.0837` made the exponents ~10^17 and the old fallback formed
    the integer C: 24 GB and no end.)"""
    import mpmath

    from georecall.bounds.counting import EXACT_BITS, ceil_log2_product

    huge = 10**17
    assert ceil_log2_product(((4, 1, huge), (2, 2, 3), (7, 0, 5), (1, 1, 9))) == 2 * huge + 3
    for factors in (((3, 1, huge),), ((64, 5, huge), (64, 1, 2)), ((2**40, 3, 10**6),)):
        with mpmath.workdps(200):
            x = sum(e * mpmath.log(math.perm(n, m), 2) for n, m, e in factors)
            expected = int(mpmath.ceil(x))
        assert ceil_log2_product(factors) == expected
    just_over = ((3, 1, EXACT_BITS),)  # about 1.6·EXACT_BITS bits: the exact integer is still affordable
    assert ceil_log2_product(just_over) == (3**EXACT_BITS - 1).bit_length()


def test_bound_tables_with_a_float_bits_value_finish():
    from georecall.bounds.tables import bound_rows

    rows = bound_rows([64], [2], [1], bits=(0.08368825910511998,))
    for row in rows:  # the exact d_min against the float formula, away from integers
        if abs(row["d_bound"] - round(row["d_bound"])) > 1e-6:
            assert row["d_min"] == max(0, math.ceil(row["d_bound"])), row


def test_a_single_hop_construction_asked_for_at_k_2_says_why_it_has_no_row(capsys):
    """``bounds --construction G1 --k 2`` printed an empty table and said nothing; it notes why (the
    control: at k = 1 the row is there and there is no note)."""
    import json

    from georecall.cli import main

    assert main(["bounds", "--construction", "G1", "G2", "--N", "64", "--R", "3", "--k", "1", "2",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["notes"] == ["G1 (geometric) answers single-hop queries: no row at k = 2"]
    assert {(r["construction"], r["k"]) for r in doc["rows"]} >= {("G1", 1), ("G2", 2)}
    assert main(["bounds", "--construction", "G1", "--N", "64", "--R", "3", "--k", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == []


def test_latex_sets_a_bar_as_a_bar_and_keeps_a_captions_math():
    """``|`` in text mode is an em-dash under pdfLaTeX's default encoding: it is ``\\textbar{}``; a
    caption's ``$…$`` is math, kept as written (it was escaped to ``\\$d\\$``), an unpaired ``$`` escaped."""
    from georecall.bounds.tables import latex_caption, latex_escape

    assert latex_escape("log2|F_k|") == r"log2\textbar{}F\_k\textbar{}"
    assert latex_caption("Lower bounds on $d$ & more") == r"Lower bounds on $d$ \& more"
    assert latex_caption("costs 5$") == r"costs 5\$"
    assert latex_caption("plain") == latex_escape("plain")  # the control: no math, the same escape
    import contextlib
    import io

    from georecall.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["bounds", "--N", "64", "--R", "3", "--k", "1", "--format", "latex", "--caption",
                     "Bounds on $d$"]) == 0
    assert r"\caption{Bounds on $d$" in out.getvalue()


@pytest.mark.parametrize("command", [["count", "--N", "4", "--R", "2", "--k", "2"],
                                     ["tradeoff", "--N", "64", "--R", "2", "--k-max", "2"]])
def test_count_and_tradeoff_tables_say_their_n_and_r(command, capsys):
    """A count or tradeoff table written for a paper did not say N or R (a bounds table does): Markdown has
    the line under it, LaTeX the caption and a comment, CSV the first columns; ``--columns`` showing N
    leaves it out of the line (the control)."""
    from georecall.cli import main

    N, R = command[2], command[4]
    assert main([*command, "--format", "md"]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"every row: N = {N}, R = {R}")
    assert main([*command, "--format", "latex", "--caption", "Counts"]) == 0
    assert f"$N = {N}$" in capsys.readouterr().out
    assert main([*command, "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith(f"{N},{R},")
    if command[0] == "tradeoff":
        assert main([*command, "--format", "md", "--columns", "k,N,d"]) == 0
        assert capsys.readouterr().out.rstrip().endswith(f"every row: R = {R}")


def test_a_table_without_the_tradeoff_bound_is_not_charged_for_its_gadget_scan(capsys):
    """G1's bound is total information: at N = 2^40 nothing is scanned, yet the estimate charged 2,891 GiB
    for the tradeoff bound's gadget scan and refused; G2's row does scan (the control: refused)."""
    from georecall.cli import main

    N = str(2**40)
    assert main(["bounds", "--N", N, "--R", "16", "--k", "1", "--construction", "G1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["d_min"] > 0
    assert main(["bounds", "--N", N, "--R", "16", "--k", "1", "--construction", "G2"]) == 2
    assert "gadget scan of the tradeoff bound" in capsys.readouterr().err
