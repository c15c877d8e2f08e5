"""Witness tasks: a task that realizes a failing point of the product set (docs/theory.md,
"Certification for every task", refutation).

A failing point fixes some answers ``π_path(s)`` of one subject; :func:`realize` searches partial
injections depth-first for a task that has them and completes it to bijections. In G1 every tuple of one
subject's codes is realizable; in G2 the path slots are not independent, so a point may be unrealizable.
"""

from __future__ import annotations

import numpy as np

from georecall.theory.tasks import Task, paths
from georecall.verify.checking.certify_relaxation import UNIT, QueryType

__all__ = [
    "realize",
    "witness_for",
]



# ----------------------------------------------------------------------------------------- realizing


def realize(N: int, R: int, constraints: list[tuple[list[int], int]], *, symmetric: bool = False,
            attributes: str = "shared", subject: int | None = None, starts: list[int | None] | None = None,
            max_nodes: int = 20000) -> tuple[Task, int] | None:
    """A task and a subject s with ``π_path(s) = target`` for every ``(path, target)`` constraint (paths as
    relations in the order applied), or None when the search finds none.

    Depth-first over partial injections: each hop follows an edge already fixed, or fixes it (to the target at
    the last hop, else to a fresh entity, preferring ones not used yet); the partial injections are then
    completed to bijections (symmetric: to perfect matchings, paths of one hop only).

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
        touched = set(origin) | {x for f in fwd for x in f} | {y for f in fwd for y in f.values()}
        fresh = [y for y in range(N) if y not in touched and y not in bwd[r]]
        used = [y for y in range(N) if y in touched and y not in bwd[r]]
        candidates = (fresh[:4] + used)[:16]
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
