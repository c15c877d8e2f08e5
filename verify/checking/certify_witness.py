"""Witness tasks: a task that realizes a failing point of the product set (docs/theory.md,
"Certification for every task", refutation).

A failing point fixes some answers ``π_path(s)`` of one subject; :func:`realize` searches partial
injections depth-first for a task that has them and completes it to bijections. In G1 every tuple of one
subject's codes is realizable; in G2 the path slots are not independent, so a point may be unrealizable.

Facts declared as steps (A2(b)) have no product-set point to realize when the layered argument fails: the
state may leave the codebook. :func:`step_witness` then branches on the slots the units that fire read
(docs/theory.md, "Certification for every task", A2(b)): starting from a task whose chain reaches the state
where the argument failed, it evaluates THE forward pass on every query of the task (a failing one is the
candidate), takes the first slot ``π_r(v)`` that a pair firing on the failing query reads and that is not
fixed yet, and tries every value of it in turn (completing the rest to bijections), depth first, within
:data:`STEP_SEARCH_NODES` tasks (fewer for large N·R^k: at most 2·10^7 query evaluations). A task
found is only a candidate: certify reports REFUTED only when the ordinary checker fails it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from georecall.constructions.forward import forward
from georecall.constructions.model import MLP, Layer, Model
from georecall.theory.tasks import Task, paths
from georecall.verify.checking.certify_relaxation import UNIT, QueryType

__all__ = [
    "STEP_SEARCH_NODES",
    "realize",
    "step_model",
    "step_witness",
    "witness_for",
]

STEP_SEARCH_NODES = 2000  # tasks the A2(b) witness search evaluates at most (THE forward pass on one query)


# ----------------------------------------------------------------------------------------- realizing


def realize(N: int, R: int, constraints: list[tuple[list[int], int]], *, symmetric: bool = False,
            attributes: str = "shared", subject: int | None = None, starts: list[int | None] | None = None,
            max_nodes: int = 20000) -> tuple[Task, int] | None:
    """A task and a subject s with ``π_path(s) = target`` for every ``(path, target)`` constraint (paths as
    relations in the order applied), or None when the search finds none.

    Depth-first over partial injections: each hop follows an edge already fixed, or fixes it (to the target at
    the last hop, else to a fresh entity first, then to every named one: an origin, a target, an end of a
    fixed edge); the partial injections are then completed to bijections (symmetric: to perfect matchings,
    paths of one hop only). Unnamed entities are interchangeable, so within ``max_nodes`` the search misses no
    realizable set of constraints (tests/test_certify.py checks it against the true task that realizes them).

    Parameters
    ----------
    N, R : int
        Sizes.
    constraints : list of (list of int, int)
        Paths from the subject and the entity each must reach.
    symmetric : bool
        Relations must be fixed-point-free involutions (N even).
    attributes : str
        The task's attribute variant.
    subject : int, optional
        The subject (default: the first that works).
    starts : list of (int or None), optional
        Per constraint, the entity its path starts from (None: the subject).
    max_nodes : int
        Search budget (partial assignments tried).

    Returns
    -------
    (Task, int) or None
    """
    if symmetric and any(len(p) != 1 for p, _ in constraints):
        return None
    subjects = range(N) if subject is None else [subject]
    budget = [max_nodes]
    for s in subjects:
        fwd: list[dict[int, int]] = [dict() for _ in range(R)]
        bwd: list[dict[int, int]] = [dict() for _ in range(R)]
        origin = [s if starts is None or starts[c] is None else int(starts[c])  # type: ignore[arg-type]
                  for c in range(len(constraints))]
        if _search(N, origin, constraints, 0, 0, origin[0] if origin else s, fwd, bwd, symmetric, budget):
            table = _complete(N, R, fwd, symmetric)
            if table is None:
                continue
            return Task(table, attributes), s  # type: ignore[arg-type]
        if budget[0] <= 0:
            return None
    return None


def _fix(r: int, x: int, y: int, fwd, bwd, symmetric: bool) -> list[tuple[int, int]] | None:
    """Fix π_r(x) = y if consistent; returns the edges added (for undoing) or None."""
    if symmetric and x == y:
        return None
    want = [(x, y), (y, x)] if symmetric else [(x, y)]
    added: list[tuple[int, int]] = []
    for a, b in want:
        if a in fwd[r]:
            if fwd[r][a] != b:
                for a2, _ in added:
                    del bwd[r][fwd[r].pop(a2)]
                return None
            continue
        if b in bwd[r]:
            for a2, _ in added:
                del bwd[r][fwd[r].pop(a2)]
            return None
        fwd[r][a], bwd[r][b] = b, a
        added.append((a, b))
    return added


def _undo(r: int, added, fwd, bwd) -> None:
    for a, _ in added:
        del bwd[r][fwd[r].pop(a)]


def _search(N, origin, constraints, c, hop, at, fwd, bwd, symmetric, budget) -> bool:
    budget[0] -= 1
    if budget[0] <= 0:
        return False
    if c == len(constraints):
        return True
    path, target = constraints[c]
    if hop == len(path):
        nxt = origin[c + 1] if c + 1 < len(constraints) else at
        return at == target and _search(N, origin, constraints, c + 1, 0, nxt, fwd, bwd, symmetric, budget)
    r = path[hop]
    if at in fwd[r]:
        return _search(N, origin, constraints, c, hop + 1, fwd[r][at], fwd, bwd, symmetric, budget)
    last = hop == len(path) - 1
    if last:
        candidates = [target]
    else:
        # Entities no constraint names and no fixed edge touches are interchangeable (relabelling them maps
        # one completion to another), so a few fresh ones stand for all of them; every named entity (an
        # origin, a constraint's target, an end of a fixed edge) is tried. Leaving targets out of the named
        # ones missed π(π(s)) = t1 with π(s) = t0 whenever t0 was not among the first fresh entities.
        named = (set(origin) | {t for _, t in constraints} | {x for f in fwd for x in f}
                 | {y for f in fwd for y in f.values()})
        fresh = [y for y in range(N) if y not in named and y not in bwd[r]]
        used = [y for y in range(N) if y in named and y not in bwd[r]]
        candidates = fresh[:4] + used
    for y in candidates:
        added = _fix(r, at, y, fwd, bwd, symmetric)
        if added is None:
            continue
        if _search(N, origin, constraints, c, hop + 1, y, fwd, bwd, symmetric, budget):
            return True
        _undo(r, added, fwd, bwd)
    return False


def _complete(N: int, R: int, fwd, symmetric: bool) -> np.ndarray | None:
    table = np.empty((R, N), dtype=np.int64)
    for r in range(R):
        row = dict(fwd[r])
        if symmetric:
            free = [x for x in range(N) if x not in row]
            if len(free) % 2:
                return None
            for a, b in zip(free[0::2], free[1::2]):
                row[a], row[b] = b, a
        else:
            free_src = [x for x in range(N) if x not in row]
            taken = set(row.values())
            free_dst = [y for y in range(N) if y not in taken]
            row.update(zip(free_src, free_dst))
        table[r] = [row[x] for x in range(N)]
    return table


def witness_for(failing, types: list[QueryType], N: int, R: int, k: int, attributes: str,
                symmetric: bool, slots: str) -> tuple[Task, int, QueryType, float, list[int]] | None:
    """A task that realizes one of the product set's failing points, or None: the failing points are tried
    lowest margin first; each becomes constraints ``π_path(start) = j`` (every live slot's relations from
    the subject, or from the unit's own entity for a slot that is an MLP unit's row, must reach the code
    index j the point gave it), and :func:`realize` searches a task satisfying them all.

    Parameters
    ----------
    failing : list of (float, int, list of int, list of (int, int))
        The certifier's failing points ``(margin, query type index, code indices, live slots)``, lowest
        first; a live slot is ``(entity position, slot)``, position ``UNIT`` for a unit's row (slot
        ``b = w·N + e``).
    types : list of QueryType
        The query types the indices refer to (:func:`~georecall.verify.checking.certify_relaxation.
        query_types`).
    N, R, k : int
        Entities, relations and hops.
    attributes : str
        The task's attribute variant, ``"shared"`` or ``"disjoint"``.
    symmetric : bool
        Search symmetric tasks only (relations fixed-point-free involutions).
    slots : str
        ``"paths"`` when a slot is one of the R^k paths (in :func:`~georecall.theory.tasks.paths` order),
        otherwise a slot is a relation.

    Returns
    -------
    (Task, int, QueryType, float, list of int) or None
        The task, its subject, the failing point's query type, margin and code indices; None when no
        failing point is realized by a task within :func:`realize`'s search budget.
    """
    rows = paths(R, k) if slots == "paths" else None
    for margin, qi, values, live in failing:
        qt = types[qi]
        constraints = []
        starts: list[int | None] = []
        for (u, b), j in zip(live, values):
            if u == UNIT:  # a unit's row: slot b is (path or relation index, entity) flattened, b = w·N + e
                w, e = divmod(b, N)
                hops = [int(r) for r in rows[w][::-1]] if rows is not None else [w]
                constraints.append((hops, int(j)))
                starts.append(e)
                continue
            hops = [int(r) for r in rows[b][::-1]] if rows is not None else [b]  # slot b's relations, applied
            constraints.append((qt.prefix[u] + hops, int(j)))
            starts.append(None)
        subject = qt.tokens[-1] if qt.tokens and qt.tokens[-1] >= 0 else None
        found = realize(N, R, constraints, symmetric=symmetric, attributes=attributes, starts=starts,
                        subject=subject)
        if found is not None:
            task, s = found
            return task, s, qt, margin, values
    return None


# ------------------------------------------------------------------------------- steps (A2(b)): branching


def step_model(model: Model, block: np.ndarray, vectors: np.ndarray, step_scale: float,
               table: np.ndarray) -> Model:
    """The family of steps on one task: pair ``p = r·N + v`` of the shared MLP gets ``±κ·a_{π_r(v)}`` on the
    declared block (``encoding.assemble_model`` for steps; tests/test_certify.py compares them).

    Parameters
    ----------
    model : Model
        The family's model (W2 without the task's part).
    block : numpy.ndarray
        The declared coordinates S.
    vectors : numpy.ndarray
        The codebook.
    step_scale : float
        κ.
    table : numpy.ndarray
        The task's ``(R, N)`` table.

    Returns
    -------
    Model
        Every layer shares the one new MLP, as in the family.
    """
    mlp = model.layers[0].mlp
    assert mlp is not None
    W2 = np.array(mlp.W2)
    added = step_scale * np.asarray(vectors, dtype=np.float64)[np.asarray(table).reshape(-1)]
    W2[0::2, block] += added
    W2[1::2, block] -= added
    shared = MLP(mlp.W1, mlp.b1, W2, mlp.b2)
    return dataclasses.replace(model, layers=tuple(Layer(layer.attention, shared) for layer in model.layers))


def step_witness(model: Model, block: np.ndarray, vectors: np.ndarray, step_scale: float, N: int, R: int,
                 k: int, failures: list[tuple[int, int, int]], limit: float, floor: float,
                 max_nodes: int = STEP_SEARCH_NODES) -> tuple[Task, int, int, float] | None:
    """A task on which THE forward pass of the steps family answers a query with a margin below ``limit`` (or
    at most ``floor``), searched by branching on the slots that firing units read (module docstring).

    Parameters
    ----------
    model, block, vectors, step_scale
        The family (as :func:`step_model`).
    N, R, k : int
        Sizes.
    failures : list of (int, int, int)
        Where the layered argument failed: ``(layer j, 0-based; path index w; state c)``, searched in order.
    limit, floor : float
        A margin below ``limit`` or at most ``floor`` is a failure (``certify_relaxation.failure_limits``).
    max_nodes : int
        Evaluations in all.

    Returns
    -------
    (Task, int, int, float) or None
        The task, the subject, the path index and the margin THE forward pass computes there.
    """
    rows = paths(R, k)
    every = np.asarray([[N + int(r) for r in rows[w]] + [s] for w in range(rows.shape[0]) for s in range(N)],
                       dtype=np.int64)  # query index w·N + s
    budget = [max(20, min(max_nodes, 2 * 10**7 // max(1, every.shape[0])))]  # bounded work in all

    def search(fwd: list[dict[int, int]], bwd: list[dict[int, int]], s: int, w: int):
        """Whether some completion of the partial injections fails, depth first on the slots firing pairs
        read: the witness ``(task, subject, path index, margin)`` or None."""
        budget[0] -= 1
        table = _complete(N, R, fwd, False)
        if table is None:
            return None
        margin, worst, read = _step_evaluate(model, block, vectors, step_scale, N, k, rows, every, table, s,
                                             w)
        if margin < limit or margin <= floor:
            w_fail, s_fail = divmod(worst, N)
            return Task(table), s_fail, w_fail, margin
        free = next(((r, v) for r, v in read if v not in fwd[r]), None)
        if free is None:
            return None
        r, v = free
        for target in range(N):
            if budget[0] <= 0:
                return None
            if target in bwd[r]:
                continue
            fwd[r][v], bwd[r][target] = target, v
            found = search(fwd, bwd, s, w)
            del fwd[r][v], bwd[r][target]
            if found is not None:
                return found
        return None

    seen = set()
    for j, w, c in failures:
        if budget[0] <= 0 or (j, w, c) in seen:
            break
        seen.add((j, w, c))
        start = _chain_start(N, R, [int(r) for r in rows[w][::-1]], j, c)
        if start is None:
            continue
        fwd, bwd, s = start
        found = search(fwd, bwd, s, w)
        if found is not None:
            return found
    return None


def _step_evaluate(model: Model, block: np.ndarray, vectors: np.ndarray, step_scale: float, N: int, k: int,
                   rows: np.ndarray, every: np.ndarray, table: np.ndarray, s: int,
                   w: int) -> tuple[float, int, list[tuple[int, int]]]:
    """The lowest margin over every query of the task and its query, and the slots the pairs firing on
    query (s, w) read, layer by layer, the strongest first."""
    stepped = step_model(model, block, vectors, step_scale, table)
    answers = np.arange(N)
    for j in range(k):  # r_1 first: column k − 1 − j of the paths
        answers = table[rows[:, k - 1 - j][:, None], answers[None, :] if j == 0 else answers]
    answers = np.asarray(answers).reshape(-1)
    logits = np.array(forward(stepped, every), dtype=np.float64)
    at = np.arange(every.shape[0])
    right = logits[at, answers]
    logits[at, answers] = -np.inf
    margins = right - logits.max(axis=1) if logits.shape[1] > 1 else np.full(at.size, np.inf)
    worst = int(np.argmin(margins))
    _, trace = forward(stepped, every[w * N + s : w * N + s + 1], trace=True)
    read: list[tuple[int, int]] = []
    for hidden in trace.hidden:
        h = np.asarray(hidden, dtype=np.float64).reshape(-1, hidden.shape[-1])[-1]
        pairs = np.maximum(h[0::2], h[1::2])
        for p in np.flatnonzero(pairs > 0)[np.argsort(-pairs[pairs > 0], kind="stable")]:
            slot = divmod(int(p), N)
            if slot not in read:
                read.append(slot)
    return float(margins[worst]), worst, read


def _chain_start(N: int, R: int, applied: list[int], j: int, c: int):
    """Where the search starts for a failure at layer ``j`` in state ``c``: the partial injections
    ``(fwd, bwd)`` of a chain s -> ... -> c over the path's first j relations, and the subject s (None when
    no task has such a chain)."""
    fwd: list[dict[int, int]] = [dict() for _ in range(R)]
    bwd: list[dict[int, int]] = [dict() for _ in range(R)]
    if j == 0:
        return fwd, bwd, c
    reached = realize(N, R, [(applied[:j], c)], max_nodes=200)
    if reached is None:
        return None
    task, s = reached
    at = s
    for r in applied[:j]:
        nxt = int(task.table[r, at])
        if at in fwd[r] and fwd[r][at] != nxt:
            break
        fwd[r][at], bwd[r][nxt] = nxt, at
        at = nxt
    return fwd, bwd, s
