"""Tasks as R-regular edge-coloured digraphs (docs/theory.md, "Task"; docs/bounds.md, "Capacity–depth
tradeoff"), built and validated with networkx.

A task with bijections π_0..π_{R−1} of [N] is the multidigraph on [N] with an edge ``s -> π_r(s)`` of colour
r for every (s, r): every vertex has exactly one out-edge and one in-edge of each colour. Self-loops and
parallel edges of different colours are allowed (a bijection may fix a point; two relations may agree).

The *gadget family* (§4, capacity–depth tradeoff): M roots whose depth-k trees use pairwise disjoint internal
vertices and distinct leaves. Any assignment of distinct leaves is realizable, because the constraints are
partial injections of each colour, and a partial injection of [N] always extends to a permutation.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from georecall.errors import InputError
from georecall.theory.tasks import Task, as_rng, check_positive_int, is_integer

__all__ = ["from_graph", "gadget_leaves", "gadget_task", "leaf_vector", "to_graph", "tree_size",
           "validate_graph"]


def to_graph(task: Task) -> nx.MultiDiGraph:
    """The R-regular edge-coloured digraph of a task: an edge ``s -> π_r(s)`` of colour r for every (s, r).

    Parameters
    ----------
    task : Task
        The task.

    Returns
    -------
    networkx.MultiDiGraph
        Vertices ``0..N−1``, edge attribute ``colour``, ``graph.graph["R"] = R``.
    """
    graph = nx.MultiDiGraph()
    graph.add_nodes_from(range(task.N))
    graph.graph["R"] = task.R
    for r in range(task.R):
        graph.add_edges_from(zip(range(task.N), task.table[r].tolist()), colour=r)
    return graph


def validate_graph(graph: nx.MultiDiGraph, R: int | None = None) -> None:
    """Check that every vertex has exactly one out-edge and one in-edge of each colour.

    Parameters
    ----------
    graph : networkx.MultiDiGraph
        Vertices ``0..N−1``, edges with a ``colour`` in ``0..R−1``.
    R : int, optional
        The number of colours (default ``graph.graph["R"]``).

    Raises
    ------
    InputError
        R unknown, vertices not ``0..N−1``, a colour out of range, or the first vertex and colour without
        exactly one out- and one in-edge (named).
    """
    R = graph.graph.get("R") if R is None else R
    if R is None:
        raise InputError("the number of colours R is unknown: pass R or set graph.graph['R']")
    N = graph.number_of_nodes()
    if not all(is_integer(v) for v in graph.nodes) or sorted(graph.nodes) != list(range(N)):
        raise InputError("vertices must be 0..N-1 (integer labels)")
    out_count = np.zeros((N, R), dtype=np.int64)
    in_count = np.zeros((N, R), dtype=np.int64)
    for u, v, colour in graph.edges(data="colour"):
        if colour is None or not 0 <= colour < R:
            raise InputError(f"edge {u} -> {v} has colour {colour!r}, outside [0, {R})")
        out_count[u, colour] += 1
        in_count[v, colour] += 1
    for name, count in (("out", out_count), ("in", in_count)):
        bad = np.argwhere(count != 1)
        if bad.size:
            vertex, colour = (int(x) for x in bad[0])
            raise InputError(f"vertex {vertex} has {count[vertex, colour]} {name}-edges of colour {colour} "
                             f"(an R-regular edge-coloured digraph needs exactly one)")


def from_graph(graph: nx.MultiDiGraph, R: int | None = None) -> Task:
    """The task of a graph, after :func:`validate_graph`.

    Parameters
    ----------
    graph : networkx.MultiDiGraph
        An R-regular edge-coloured digraph.
    R : int, optional
        The number of colours (default ``graph.graph["R"]``).

    Returns
    -------
    Task

    Raises
    ------
    InputError
        As :func:`validate_graph`.
    """
    validate_graph(graph, R)
    R = graph.graph.get("R") if R is None else R
    table = np.empty((R, graph.number_of_nodes()), dtype=np.int64)
    for u, v, colour in graph.edges(data="colour"):
        table[colour, u] = v
    return Task(table)


def leaf_vector(task: Task, vertex: int, k: int) -> np.ndarray:
    """The depth-k leaf vector ``(π_w(vertex))_{|w| = k}`` in path order ``(r_k, ..., r_1)``.

    Parameters
    ----------
    task : Task
        A task with shared attributes.
    vertex : int
        The root, in ``[0, N)``.
    k : int
        The depth (>= 1).

    Returns
    -------
    numpy.ndarray
        ``(R^k,)``.

    Raises
    ------
    InputError
        ``vertex`` not an integer in ``[0, N)``, or k not a positive integer.
    """
    if not is_integer(vertex):
        raise InputError(f"vertex must be an integer id, got {vertex!r}")
    if not 0 <= vertex < task.N:
        raise InputError(f"vertex {vertex} outside [0, {task.N})")
    return task.k_hop(k)[..., vertex].reshape(-1)


def tree_size(R: int, k: int) -> int:
    """Vertices of a complete R-ary tree of depth k: ``1 + R + ... + R^k``.

    Parameters
    ----------
    R, k : int
        Branching and depth (k >= 0).

    Returns
    -------
    int
    """
    return sum(R**j for j in range(k + 1))


def gadget_task(N: int, R: int, k: int, M: int, leaves: np.ndarray | None = None,
                rng: np.random.Generator | int | None = None) -> tuple[Task, np.ndarray, np.ndarray]:
    """A member of the gadget family (docs/bounds.md, "Capacity–depth tradeoff"): M roots ``0..M−1`` whose
    depth-k trees have disjoint internal vertices and distinct leaves, completed to R full permutations.

    Any leaf assignment is realizable: the constraints are partial injections of each colour, and a partial
    injection of [N] always extends to a permutation (here uniformly at random).

    Parameters
    ----------
    N, R, k, M : int
        Entities, relations, depth, roots; ``N >= M·(1 + R + ... + R^k)``.
    leaves : numpy.ndarray, optional
        ``(M, R^k)`` in path order ``(r_k, ..., r_1)`` like ``Task.k_hop``: distinct vertices that are not
        roots or internal vertices. Default: drawn at random.
    rng : numpy.random.Generator or int or None
        The random source for the leaves and the completion.

    Returns
    -------
    task : Task
    roots : numpy.ndarray
        ``(M,)``.
    leaves : numpy.ndarray
        ``(M, R^k)``, the assignment realized.

    Raises
    ------
    InputError
        A size not a positive integer, N too small, or ``leaves`` not integers, of the wrong shape, or not
        distinct, in range and outside the roots and internal vertices.
    """
    N, R, k, M = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k), ("M", M)))
    internal_per_root = tree_size(R, k - 1)  # root and internal vertices, levels 0..k-1
    need = M * tree_size(R, k)
    if N < need:
        raise InputError(f"the gadget family needs N >= M·(1 + R + ... + R^k) = {need}; got N = {N}")
    rng = as_rng(rng)
    # Vertex layout: root/internal vertices of root i occupy a contiguous range, level by level (BFS order).
    internal = np.arange(M * internal_per_root).reshape(M, internal_per_root)
    free = np.arange(M * internal_per_root, N)
    if leaves is None:
        leaves = rng.choice(free, size=(M, R**k), replace=False)
    given = np.asarray(leaves)
    if given.dtype.kind not in "iu":  # (a float 1.7 would be cast to vertex 1)
        raise InputError(f"leaves must be integer vertex ids, got an array of {given.dtype}")
    leaves = given.astype(np.int64)
    if leaves.shape != (M, R**k):
        raise InputError(f"leaves must have shape (M, R^k) = {(M, R**k)}, got {leaves.shape}")
    if np.unique(leaves).size != leaves.size or np.isin(leaves, internal).any() or (leaves < 0).any() \
            or (leaves >= N).any():
        raise InputError("leaves must be distinct vertices in [0, N) outside the roots and internal vertices")
    partial = np.full((R, N), -1, dtype=np.int64)
    digits = np.stack(np.unravel_index(np.arange(R**k), (R,) * k), axis=1)  # BFS leaf -> (r_1, ..., r_k)
    bfs_to_path = np.ravel_multi_index(tuple(digits[:, ::-1].T), (R,) * k)
    # Level-l vertex with BFS index i (within its root's block) has children at indices R·i + 1 + r.
    for i in range(internal_per_root):
        for r in range(R):
            child = R * i + 1 + r
            if child < internal_per_root:
                partial[r, internal[:, i]] = internal[:, child]
            else:  # a leaf; BFS numbers leaves by (r_1, ..., r_k), path order is (r_k, ..., r_1)
                partial[r, internal[:, i]] = leaves[:, bfs_to_path[child - internal_per_root]]
    table = np.empty((R, N), dtype=np.int64)
    for r in range(R):
        table[r] = _complete_partial_injection(partial[r], rng)
    roots = internal[:, 0]
    return Task(table), roots, leaves


def _complete_partial_injection(partial: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Extend ``partial`` (−1 = undefined, defined values distinct) to a permutation, uniformly at random."""
    undefined = partial < 0
    unused = np.setdiff1d(np.arange(partial.size), partial[~undefined])
    out = partial.copy()
    out[undefined] = rng.permutation(unused)
    return out


def gadget_leaves(task: Task, roots: np.ndarray, k: int) -> np.ndarray:
    """Leaf vectors of the given roots, in path order (to compare with the assignment of :func:`gadget_task`).

    Parameters
    ----------
    task : Task
        A task with shared attributes.
    roots : numpy.ndarray
        ``(M,)`` vertices.
    k : int
        The depth.

    Returns
    -------
    numpy.ndarray
        ``(M, R^k)``.
    """
    return task.k_hop(k).reshape(-1, task.N)[:, roots].T
