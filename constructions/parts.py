"""The shared parts of the hand-built constructions, each written once.

- :func:`uniform_gain_attention`: one uniform head with ``W_V = I``, ``W_O = g·I`` (the single-hop mixer);
- :func:`block_superposition`: subject embeddings ``e_s = Σ_b J_{B_b} a_{answer_b(s)}`` (G1, G2, C1);
- :func:`gated_selector`: the AND-gated ReLU selector MLP (G1, G2, C1): unit ``(b, i, σ)`` computes
  ``ReLU(σ·y_{B_b,i} + Σ_j y_{gate_j(b)} − θ)`` and writes ``σ`` into ``O_i``;
- :func:`positional_heads`: softmax heads that fetch a one-hot code from a fixed position (multi-hop);
- :func:`one_hot_positions`, :func:`code_readout`, :func:`relation_tagged_readout`.
"""

from __future__ import annotations

import numpy as np

from georecall.constructions.codes import Codes
from georecall.constructions.model import MLP, Attention
from georecall.errors import InputError

__all__ = ["block_superposition", "code_readout", "gated_selector", "one_hot_positions", "positional_heads",
           "relation_tagged_readout", "uniform_gain_attention"]

SIGMA = np.array([1.0, -1.0])


def uniform_gain_attention(d: int, gain: float) -> Attention:
    """One uniform head with ``W_V = I_d`` and ``W_O = gain·I_d``: at the last of T positions it adds
    ``gain·mean_u x_u`` to the residual (the single-hop mixer: ``y = c1·e_s + c2·q_r`` over ``⟨r, s⟩``).

    Parameters
    ----------
    d : int
        Residual width.
    gain : float
        g.

    Returns
    -------
    Attention
    """
    return Attention("uniform", W_V=np.eye(d)[None], W_O=gain * np.eye(d)[None])


def block_superposition(codes: Codes, answers: np.ndarray, blocks: np.ndarray, d: int) -> np.ndarray:
    """Entity embeddings ``E (N, d)`` with ``E[s, blocks[b]] = a_{answers[b, s]}`` and zeros elsewhere: ``e_s
    = Σ_b J_{B_b} a_{answers[b, s]}``, the block superposition.

    Parameters
    ----------
    codes : Codes
        The codebook.
    answers : numpy.ndarray
        ``(P, N)``: one row per block (a relation for G1 and C1, a relation path for G2).
    blocks : numpy.ndarray
        ``(P, D)`` residual coordinates.
    d : int
        Residual width.

    Returns
    -------
    numpy.ndarray
        ``(N, d)`` float64, read-only (the Model takes it without a copy).
    """
    P, N = answers.shape
    E = np.zeros((N, d))
    for b in range(P):  # one block at a time (no (P, N, D) temporary); a column slice when the block is
        # contiguous: fancy-index assignment is about 4x slower at N = 2^20 (measured; row chunks were slower)
        E[:, _as_slice(blocks[b])] = codes.vectors[answers[b]]
    E.setflags(write=False)  # the Model takes it without a copy
    return E


def _as_slice(columns: np.ndarray) -> slice | np.ndarray:
    """``columns`` as a slice when they are consecutive increasing integers, else as they are."""
    columns = np.asarray(columns)
    if columns.size and np.array_equal(columns, np.arange(columns[0], columns[0] + columns.size)):
        return slice(int(columns[0]), int(columns[0]) + columns.size)
    return columns


def gated_selector(
    d: int, blocks: np.ndarray, gates: list[np.ndarray], out: np.ndarray, threshold: float
) -> MLP:
    """The AND-gated selector: ``m = 2·P·D`` units ``(b, i, σ)`` for ``blocks (P, D)`` and ``σ = ±1``.

    Unit ``(b, i, σ)`` computes ``ReLU(σ·y[blocks[b, i]] + Σ_j y[gates[j][b]] − threshold)`` and writes ``σ``
    into ``y[out[i]]``. When every gate of block b holds its open value and the gates sum to ``threshold``,
    the pair ``(b, i, ±)`` outputs ``ReLU(t) − ReLU(−t) = t = y[blocks[b, i]]``: the MLP copies block b into
    O. When some gate of b is shut by more than ``max |y[blocks[b, ·]]|``, the pair outputs 0 (the ReLU is the
    gate). Each builder states the inequality that makes "shut" hold for its gate values.

    Parameters
    ----------
    d : int
        Residual width.
    blocks : numpy.ndarray
        ``(P, D)`` coordinates of the blocks.
    gates : list of numpy.ndarray
        Per gate group, ``(P,)``: the gate coordinate of each block.
    out : numpy.ndarray
        ``(D,)`` coordinates of the output block O.
    threshold : float
        The sum of a block's open gates (the units' bias is ``−threshold``).

    Returns
    -------
    MLP
    """
    P, D = blocks.shape
    m = 2 * P * D
    unit = np.arange(m).reshape(P, D, 2)  # unit[b, i, 0] has σ = +1, unit[b, i, 1] has σ = −1
    W1 = np.zeros((d, m))
    W1[blocks[:, :, None], unit] = SIGMA
    for gate in gates:
        W1[np.asarray(gate)[:, None, None], unit] = 1.0
    W2 = np.zeros((m, d))
    W2[unit, np.asarray(out)[None, :, None]] = SIGMA
    return MLP(W1, np.full(m, -float(threshold)), W2, np.zeros(d))


def positional_heads(
    d: int,
    pos: np.ndarray,
    targets: list[dict[int, int]],
    read: np.ndarray,
    writes: list[np.ndarray],
    gains: list[float],
    kind: str,
    beta: float | None,
) -> Attention:
    """Heads that copy the coordinates ``read`` (a one-hot code) of one target position into ``writes[h]``.

    Head h at query position q scores ``β·[u = targets[h][q]]`` through one-hot positions ``pos`` (positions q
    absent from ``targets[h]`` score 0 everywhere); its value reads ``read`` and writes ``gains[h]·`` that
    code into ``writes[h]``. With n other visible positions it puts weight ``ε = n/(e^β + n)`` off target
    (``theory.statements.softmax_leakage``).

    Parameters
    ----------
    d : int
        Residual width.
    pos : numpy.ndarray
        ``(T,)`` coordinates of the one-hot positions.
    targets : list of dict
        Per head, ``{query position: target position}``.
    read : numpy.ndarray
        The coordinates copied.
    writes : list of numpy.ndarray
        Per head, the coordinates written (as many as ``read``).
    gains : list of float
        Per head, the factor written.
    kind : {"softmax", "hard"}
        The attention kind.
    beta : float or None
        The inverse temperature (None for hard attention).

    Returns
    -------
    Attention
    """
    H, T, width = len(targets), pos.size, read.size
    W_Q, W_K = np.zeros((H, d, T)), np.zeros((H, d, T))
    W_V, W_O = np.zeros((H, d, width)), np.zeros((H, width, d))
    for h, target in enumerate(targets):
        for q, u in target.items():
            W_Q[h, pos[q], u] = 1.0
        W_K[h, pos, np.arange(T)] = 1.0
        W_V[h, read, np.arange(width)] = 1.0
        W_O[h, np.arange(width), writes[h]] = gains[h]
    return Attention(
        kind, W_V=W_V, W_O=W_O, W_Q=W_Q, W_K=W_K, inverse_temperature=1.0 if beta is None else beta
    )


def one_hot_positions(pos: np.ndarray, d: int) -> np.ndarray:
    """Position embeddings ``P (T, d)`` with ``P[t] = 1_{pos[t]}``.

    Parameters
    ----------
    pos : numpy.ndarray
        ``(T,)`` residual coordinates.
    d : int
        Residual width.

    Returns
    -------
    numpy.ndarray
    """
    P = np.zeros((pos.size, d))
    P[np.arange(pos.size), pos] = 1.0
    return P


def _compact(U_cols: np.ndarray, columns: np.ndarray, d: int) -> dict:
    """Model keyword arguments for a read-out that is ``U_cols`` on ``columns`` and zero elsewhere: stored
    compactly (sorted columns) when it reads fewer than d coordinates, densely otherwise."""
    order = np.argsort(columns, kind="stable")
    if np.any(order != np.arange(order.size)):  # (no copy of U when the columns are already in order)
        columns, U_cols = np.asarray(columns)[order], U_cols[:, order]
    if np.unique(columns).size != columns.size:
        raise InputError("a read-out's columns must be distinct")
    if columns.size < d:
        if U_cols.flags.writeable or not U_cols.flags.c_contiguous:
            U_cols = np.ascontiguousarray(U_cols)  # (a copy only when it is not contiguous)
            U_cols.setflags(write=False)  # the Model takes it without a copy
        return {"unembedding": U_cols, "readout_columns": columns}
    U = np.zeros((U_cols.shape[0], d))
    U[:, columns] = U_cols
    U.setflags(write=False)
    return {"unembedding": U}


def code_readout(codes: Codes, n_out: int, d: int, out: np.ndarray, lam: float) -> dict:
    """The read-out ``U (n_out, d)`` with ``U_j = λ·a_j`` on the coordinates ``out`` and zero elsewhere, as
    Model keyword arguments (``Model(E, Q, layers=..., **code_readout(...))``): stored compactly, the
    ``(n_out, |out|)`` block and its columns (0.16 GiB instead of 2.8 for G1 at N = 2^20).

    Parameters
    ----------
    codes : Codes
        The codebook (its first ``n_out`` codes are read).
    n_out : int
        Read-out rows.
    d : int
        Residual width.
    out : numpy.ndarray
        The D coordinates read.
    lam : float
        λ.

    Returns
    -------
    dict
        ``unembedding`` (and ``readout_columns`` when fewer than d coordinates are read).

    Raises
    ------
    InputError
        ``out`` has repeated coordinates.
    """
    U = codes.vectors[:n_out]  # read-only; λ = 1 shares the codebook's array (0.16 GiB at N = 2^20)
    return _compact(U if lam == 1 else lam * U, np.asarray(out), d)


def relation_tagged_readout(
    codes: Codes, N: int, R: int, d: int, out: np.ndarray, tags: np.ndarray, lam: float, gamma: float
) -> dict:
    """Read-out for *disjoint* attributes (answer id ``r·N + j``): ``U_{(r,j)} = λ·(J_O a_j +
    γ·1_{tags[r]})``, as Model keyword arguments (compact storage on ``out`` and ``tags``, like
    :func:`code_readout`).

    ``tags[r]`` is a residual coordinate that holds a positive value ``t`` exactly when relation r is asked
    (G1's gate, A1's relation coordinate) and 0 otherwise. Against an answer of the wrong relation the right
    one gains ``λ·γ·t`` and loses at most ``λ·c·|a|²(1 − μ)`` on the code part when ``γ·t >= c·|a|²(1 − μ)``
    (c the scale of the code written in O): the single-hop margin is unchanged.

    Parameters
    ----------
    codes : Codes
        The codebook.
    N, R, d : int
        Entities, relations, residual width.
    out : numpy.ndarray
        The D coordinates of the output block.
    tags : numpy.ndarray
        ``(R,)`` relation-tag coordinates.
    lam, gamma : float
        λ and γ.

    Returns
    -------
    dict
        Model keyword arguments.

    Raises
    ------
    InputError
        Repeated coordinates among ``out`` and ``tags``.
    """
    out, tags = np.asarray(out), np.asarray(tags)
    U = np.zeros((N * R, out.size + R))
    U[:, : out.size] = lam * np.tile(codes.vectors[:N], (R, 1))
    U[np.arange(N * R), out.size + np.repeat(np.arange(R), N)] = lam * gamma
    return _compact(U, np.concatenate([out, tags]), d)
