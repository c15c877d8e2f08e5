"""The relaxation behind certify: query types, the linear pieces of a one-layer model at the read
position, the per-slot extremes over the codebook, and the float allowances (docs/theory.md, "Certification
for every task").

Every slot of every entity position ranges over the whole codebook independently (a product set containing
every input a task can produce). With attention whose weights read no token content, the residual at the
read position is ``Σ_u x_u·C_u`` with fixed ``C_u`` (:class:`Pieces`), so each unit's pre-activation is
``c_u + Σ_slot <a_{j_slot}, w_{u,slot}>`` and its maximum over the product set is the sum of the per-slot
maxima (exact). Float mode widens every comparison by a forward-error allowance from the magnitudes in the
computation (:func:`float_allowance`), never a multiple of the promised logit scale.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from georecall.constructions.array_scans import abs_max, column_extremes
from georecall.constructions.encoding import TaskEncoding
from georecall.constructions.model import Model
from georecall.errors import InputError
from georecall.theory.statements import Promise
from georecall.theory.tasks import paths
from georecall.verify.checking.decoders import dense_decode

__all__ = [
    "CHUNK_BYTES",
    "CHUNK_POINTS",
    "ETA",
    "KEEP_FAILING",
    "MAX_POINTS",
    "UNIT",
    "Lowest",
    "Pieces",
    "QueryType",
    "SparseRight",
    "Unsupported",
    "chunk_rows",
    "codebook_allowance",
    "content_key",
    "decode_distinct",
    "exact_scores",
    "failure_limits",
    "float_allowance",
    "point_chunks",
    "preactivation_slack",
    "query_types",
    "stand_in",
]

MAX_POINTS = 2**24  # largest product of enumerated slot codebooks per query type
CHUNK_POINTS = 2**16  # points evaluated at once (at most)
CHUNK_BYTES = 2**27  # the arrays of one chunk of points (``chunk_rows``)
KEEP_FAILING = 64  # failing points kept (lowest margins first) for the search of a realizable one
FAR = 800  # score gaps beyond which a softmax weight is 0 in float64 (e^-800 < 2^-1074)
ETA = 2.0**-1074  # the smallest subnormal: a product's absolute underflow error is at most ETA / 2
UNIT = -1  # the "position" of a slot that is an MLP unit's row (facts in W2: A1, A2(a))


# --------------------------------------------------------------------------------------- query types


@dataclass
class QueryType:
    """Everything of a query but the entities' slot values: its tokens (entities as -1), the entity
    positions, the answer slot ``(position, slot)``, the answer id offset, and how to name it."""

    tokens: list[int]
    entity_positions: list[int]
    answer: tuple[int, int]
    offset: int
    label: dict
    # the path from the subject to each entity position (relations in the order applied)
    prefix: dict[int, list[int]]


def query_types(encoding: TaskEncoding, N: int, R: int, k: int, disjoint: bool) -> list[QueryType]:
    """Every query type of a task encoding, in the order the certificate reports them: one per relation ρ
    (``"single"``: tokens ``[ρ, s]``, slot ρ of the entity at position 1), one per path w of the R^k
    (``"paths"``: tokens ``[r_k, ..., r_1, s]``, slot w of the entity at position k), or one per path and
    step t = 1..k (``"cot"``: the path's tokens then the entities ``v_0 = s, ..., v_{t−1}``, slot ``r_t``
    of ``v_{t−1}`` at position ``k + t − 1``).

    Parameters
    ----------
    encoding : TaskEncoding
        Its ``queries`` (``"single"``, ``"paths"`` or ``"cot"``) chooses the shape.
    N : int
        Entities (relation ρ's token is ``N + ρ``).
    R : int
        Relations.
    k : int
        Hops (unused for ``"single"``).
    disjoint : bool
        Disjoint attributes: relation ρ's answer ids are offset by ``ρ·N`` (single-hop queries only).

    Returns
    -------
    list of QueryType
        Tokens with -1 at the entity positions, the entity positions, the answer ``(position, slot)``, the
        answer id offset, the label, and each entity position's prefix of relations from the subject.
    """
    out = []
    if encoding.queries == "single":
        for rho in range(R):
            out.append(QueryType([N + rho, -1], [1], (1, rho), rho * N if disjoint else 0,
                                  {"relation": rho}, {1: []}))
        return out
    rows = paths(R, k)  # (R^k, k): columns r_k..r_1
    for w in range(rows.shape[0]):
        rel_tokens = [N + int(r) for r in rows[w]]
        applied = [int(r) for r in rows[w][::-1]]  # r_1 first
        if encoding.queries == "paths":
            out.append(QueryType(rel_tokens + [-1], [k], (k, w), 0, {"path": w, "relations": applied},
                                  {k: []}))
        else:  # chain-of-thought: step t reads the entity v_{t−1} at position k + t − 1
            for t in range(1, k + 1):
                ents = list(range(k, k + t))
                out.append(QueryType(rel_tokens + [-1] * t, ents, (k + t - 1, applied[t - 1]), 0,
                                      {"path": w, "relations": applied, "step": t},
                                      {k + i: applied[:i] for i in range(t)}))
    return out


# ---------------------------------------------------------------------------------- the linear pieces


class Pieces:
    """Per sequence length T: the maps ``S·C_u`` (S the common denominator in integer mode, 1 otherwise) and
    their products with W1 and the read-out columns, with the per-slot extremes over the codebook."""

    def __init__(self, model: Model, blocks: np.ndarray, vectors: np.ndarray, integer: bool) -> None:
        self.model, self.blocks, self.vectors, self.integer = model, blocks, vectors, integer
        layer = model.layers[0]
        self.att, self.mlp = layer.attention, layer.mlp
        self.cols = model.readout.columns
        self.cmax, self.cmin = column_extremes(vectors)
        self.Q = model.relation_embedding.astype(np.float64)
        self._cache: dict[int, dict] = {}
        self.weight_error: dict[int, float] = {}  # per T: relative rounding of the softmax weights
        supp = np.zeros(model.d, dtype=bool)
        supp[blocks.reshape(-1)] = True
        supp |= np.any(model.relation_embedding != 0, axis=0)
        self.token_support = np.flatnonzero(supp)

    def weights(self, T: int) -> np.ndarray:
        """The heads' weights ``(H, T)`` at the read position T − 1 of a T-token query. Scores read positions
        only (checked exactly); they are computed as exact rationals of the stored floats, so hard attention's
        maximal positions are decided exactly (never ``==`` on floats); softmax weights are float64 values of
        the exact scores, their rounding bounded in :attr:`weight_error`.

        Parameters
        ----------
        T : int
            The query's length in tokens (``Unsupported``: a query or key map reading token coordinates).
        """
        att = self.att
        if att is None:
            return np.zeros((0, T))
        if att.kind == "uniform":
            return np.full((att.heads, T), 1.0 / T)
        assert att.W_Q is not None and att.W_K is not None
        P = self.model.position_embedding
        out = np.empty((att.heads, T))
        error = 0.0
        for h in range(att.heads):
            for name, W in (("W_Q", att.W_Q[h]), ("W_K", att.W_K[h])):
                if np.any(W[self.token_support] != 0):
                    raise Unsupported(f"{att.kind} attention: {name}[{h}] reads coordinates that tokens "
                                       "use, so its weights depend on the task")
            scores = [Fraction(0)] * T if P is None else exact_scores(P, att.W_Q[h], att.W_K[h],
                                                                       att.inverse_temperature, T)
            if att.kind == "hard":
                top = max(scores)
                hits = np.array([score == top for score in scores], dtype=np.float64)
                out[h] = hits / hits.sum()
                continue
            # the exact differences to the top score, each rounded once (relative u); a difference below
            # -FAR gives exp() = 0 (true value < e^-FAR, far below the smallest subnormal): never converted,
            # so no score of any size overflows a float (docs/theory.md)
            top = max(scores)
            gaps = [score - top for score in scores]
            rounded = np.array([float(g) if g > -FAR else -np.inf for g in gaps])
            e = np.exp(rounded)
            out[h] = e / e.sum()
            # relative error of each weight: the differences' rounding (u·|diff|) through exp, exp's and the
            # normalization's own rounding; plus, as an absolute error per weight, the underflow (subnormal
            # results, and the weights set to 0 beyond -FAR), counted relative to the weights' sum of 1
            near = np.abs(rounded[np.isfinite(rounded)])
            spread = 2.0**-53 * float(near.max(initial=0.0)) * (1 + 2.0**-50)
            error = max(error, 2 * math.expm1(spread + 4 * 2.0**-53) + (T + 4) * 2.0**-52
                        + 4 * T * 2.0**-1000)
        self.weight_error[T] = error
        return out

    def at(self, T: int) -> dict:
        """The pieces of a T-token query, computed once per T: ``scale`` (S), ``weights`` (:meth:`weights`)
        and per position ``u`` the maps through W1 (``rel_pre``, ``pos_pre``, ``G``, with ``G``'s extremes
        ``hi``, ``lo``) and the read-out (``rel_read``, ``pos_read``, ``H``), and which slots they read
        (``G_any``, ``H_any``).

        Parameters
        ----------
        T : int
            The query's length in tokens (integer mode refuses attention that is not uniform: ``InputError``).
        """
        if T in self._cache:
            return self._cache[T]
        model, att, mlp = self.model, self.att, self.mlp
        d = model.d
        w = self.weights(T)
        VO = [] if att is None else [att.value_output(h).astype(np.float64) for h in range(att.heads)]
        scale = 1
        if self.integer and att is not None:
            if att.kind != "uniform":
                raise InputError(f"integer mode needs uniform attention, not {att.kind} (use --float)")
            scale = T
        W1 = mlp.W1.astype(np.float64) if mlp is not None else np.zeros((d, 0))
        P = model.position_embedding
        per_u = []
        for u in range(T):
            if self.integer:
                Cu = sum(VO) if VO else np.zeros((d, d))  # S·(1/T)·Σ_h VO_h with S = T
                Cu = np.array(Cu, dtype=np.float64)
            else:
                Cu = np.zeros((d, d))
                for h, vo in enumerate(VO):
                    Cu += w[h, u] * vo
            if u == T - 1:
                Cu[np.arange(d), np.arange(d)] += scale
            CW1 = Cu @ W1
            Cread = Cu[:, self.cols]
            # which units / read-out columns read a slot: from |C_u|·|W1| (a sum of nonnegative terms is zero
            # only when every term is: no float cancellation can hide a dependence)
            reads = (np.abs(Cu) @ np.abs(W1))[self.blocks]
            piece = {"rel_pre": self.Q @ CW1, "rel_read": self.Q @ Cread,
                     "pos_pre": np.zeros(W1.shape[1]) if P is None else P[u].astype(np.float64) @ CW1,
                     "pos_read": np.zeros(self.cols.size) if P is None else P[u].astype(np.float64) @ Cread,
                     "G": CW1[self.blocks],  # (P, D, m)
                     "H": Cread[self.blocks]}  # (P, D, c)
            piece["hi"], piece["lo"] = self._extremes(piece["G"])
            piece["G_any"] = np.any(reads != 0, axis=1)  # (P, m): which units read slot b here
            piece["H_any"] = np.any(np.abs(Cu)[:, self.cols][self.blocks] != 0, axis=(1, 2))  # (P,)
            per_u.append(piece)
        out = {"scale": scale, "weights": w, "u": per_u}
        self._cache[T] = out
        return out

    def _extremes(self, G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``max_j <a_j, G[b, :, u]>`` and the min, for every slot b and unit u: per coordinate for columns
        with one nonzero (exact), by products with the codebook in row blocks otherwise."""
        P, D, m = G.shape
        hi, lo = np.zeros((P, m)), np.zeros((P, m))
        nnz = np.count_nonzero(G, axis=1)  # (P, m)
        one = nnz == 1
        if np.any(one):
            i = np.argmax(G != 0, axis=1)  # the coordinate of the nonzero
            c = np.take_along_axis(G, i[:, None, :], axis=1)[:, 0, :]
            top = np.where(c > 0, c * self.cmax[i], c * self.cmin[i])
            bottom = np.where(c > 0, c * self.cmin[i], c * self.cmax[i])
            hi[one], lo[one] = top[one], bottom[one]
        many = nnz > 1
        for b in np.flatnonzero(many.any(axis=1)):
            units = np.flatnonzero(many[b])
            top = np.full(units.size, -np.inf)
            bottom = np.full(units.size, np.inf)
            step = max(1, 2**22 // max(1, units.size))
            for start in range(0, self.vectors.shape[0], step):
                prod = self.vectors[start : start + step] @ G[b][:, units]
                top = np.maximum(top, prod.max(axis=0))
                bottom = np.minimum(bottom, prod.min(axis=0))
            hi[b, units], lo[b, units] = top, bottom
        return hi, lo


def exact_scores(P: np.ndarray, W_Q: np.ndarray, W_K: np.ndarray, beta: float, T: int) -> list[Fraction]:
    """``β·<P[u] W_K, P[T−1] W_Q>`` for u < T as exact rationals of the stored floats (only nonzero entries
    enter: the positional heads' P and W are one-hot).

    Parameters
    ----------
    P : numpy.ndarray
        ``(T', d)`` position embedding, ``T' >= T``.
    W_Q, W_K : numpy.ndarray
        ``(d, d_k)`` one head's query and key maps.
    beta : float
        The head's inverse temperature β.
    T : int
        Sequence length; the query is at position ``T − 1``.

    Returns
    -------
    list of Fraction
        The T scores, exactly (the sums of products of the floats' exact values).
    """
    def row(vector: np.ndarray, W: np.ndarray) -> dict[int, Fraction]:
        out: dict[int, Fraction] = {}
        for i in np.flatnonzero(vector):
            scale = Fraction(float(vector[i]))
            for c in np.flatnonzero(W[i]):
                out[int(c)] = out.get(int(c), Fraction(0)) + scale * Fraction(float(W[i, c]))
        return out

    query = row(P[T - 1], W_Q)
    b = Fraction(float(beta))
    scores = []
    for u in range(T):
        key = row(P[u], W_K)
        scores.append(b * sum((value * query[c] for c, value in key.items() if c in query), Fraction(0)))
    return scores


class SparseRight:
    """``X @ W`` for a fixed ``W (a, b)`` and many ``X (n, a)``: as gathers of columns of X when every column
    of W has few nonzeros (the selectors' W1 and W2 have one or two per unit), else one BLAS product. Sums of
    integers below 2^53 are exact in any order, so integer mode stays exact."""

    def __init__(self, W: np.ndarray) -> None:
        self.W = np.ascontiguousarray(W, dtype=np.float64)
        a, b = self.W.shape
        nnz = np.count_nonzero(self.W, axis=0)
        self.ranks = int(nnz.max(initial=0))
        self.sparse = 4 * self.ranks <= a
        if self.sparse:
            self.index = np.zeros((self.ranks, b), dtype=np.intp)
            self.value = np.zeros((self.ranks, b))
            rows, cols = np.nonzero(self.W.T)  # row of W.T = column of W, in order
            rank = np.arange(rows.size) - np.searchsorted(rows, rows)
            self.index[rank, rows] = cols
            self.value[rank, rows] = self.W.T[rows, cols]

    def add_to(self, out: np.ndarray, X: np.ndarray) -> None:
        """``out += X @ W``.

        Parameters
        ----------
        out, X : numpy.ndarray
            ``(n, b)``, added to in place, and ``(n, a)``.
        """
        if not self.sparse:
            out += X @ self.W
            return
        for k in range(self.ranks):
            out += X[:, self.index[k]] * self.value[k]

    def add_to_T(self, outT: np.ndarray, XT: np.ndarray) -> None:
        """``outT += (X @ W).T = W.T @ X.T`` for coordinate-major ``XT (a, n)``, ``outT (b, n)``: the sparse
        case gathers whole rows of ``XT`` (contiguous), the same products and sums as :meth:`add_to`.

        Parameters
        ----------
        outT, XT : numpy.ndarray
            ``(b, n)``, added to in place, and ``(a, n)``.
        """
        if not self.sparse:
            outT += self.W.T @ XT
            return
        for k in range(self.ranks):
            outT += XT[self.index[k]] * self.value[k][:, None]


class Unsupported(ValueError):
    """The model lacks the structure the certifier needs (the reason): UNKNOWN."""


# ------------------------------------------------------------------------------------ float allowance


def float_allowance(model: Model, T: int, points_terms: int = 0, weight_error: float = 0.0) -> float:
    """A forward-error allowance for float64 margins: twice a bound on ``max_j |fl(logit_j) − logit_j|``
    for THE forward pass and for the certifier's own evaluation (docs/theory.md), underflow included (``n·η``
    per dot product of length n, η = 2^-1074 the smallest subnormal: the relative ``γ_n`` terms vanish at
    subnormal magnitudes, the absolute ones do not).

    Stage by stage, layer by layer, with ∞-norm magnitude bounds ``B`` (as ``integer_bounds``; ``|W|`` the
    largest column sum of absolute values) and ``γ_n = n·u/(1 − n·u)`` (u = 2^-53): embeddings exact;
    attention output (T·H products of length d, weights computed with relative error <= γ_{T+8})
    ``e_y <= γ_{n_y}·B_y`` with ``n_y = T·H·(2d + 2) + T + 8``; pre-activations
    ``e_z <= |W1|·e_y + γ_{d+2}·B_z``; ReLU is 1-Lipschitz; MLP output ``e_v <= e_y + |W2|·e_z +
    γ_{m+3}·B_v``; logits ``e_l <= |U|·e_v + γ_{c+2}·B_l`` (c read coordinates). ``points_terms`` adds the
    certifier's extra summation length (slot terms) to ``n_y`` and to the pre-activations' ``d + 2``. The
    allowance is ``4·e_l`` (two logits, two evaluations), doubled again for safety: ``8·e_l``.

    The unit roundoff is float64's: the allowance covers arithmetic in float64, not a forward pass in a
    lower precision.

    Parameters
    ----------
    model : Model
        The model (any number of layers); its entity table's magnitude enters ``B`` (the certifier passes a
        stand-in table holding the codebook's largest magnitude).
    T : int
        Sequence length of the queries.
    points_terms : int
        Extra terms per summation of the certifier's own evaluation (0 for THE forward pass alone).
    weight_error : float
        A bound on the relative rounding of each attention weight beyond ``γ_{T+8}`` (the certifier's
        softmax of exactly computed scores: ``Pieces.weights``); adds ``weight_error·B·Σ_h |W_V||W_O|`` to
        the attention output's error (the weights sum to 1).

    Raises
    ------
    Unsupported
        The bound overflows float64 (weights near its largest magnitudes).

    Returns
    -------
    float
        The allowance (> 0; the ``γ_n`` assume ``n·u < 1``, i.e. fewer than 2^53 terms, which holds at every
        size that fits in memory).
    """
    u = 2.0**-53
    d = model.d

    def gamma(n: int) -> float:
        return n * u / (1 - n * u)

    def col(W) -> float:
        return float(np.abs(W).sum(axis=-2).max(initial=0.0))

    B = max(float(np.abs(model.entity_embedding).max(initial=0.0)),
            float(np.abs(model.relation_embedding).max(initial=0.0)))
    if model.position_embedding is not None:
        B += float(np.abs(model.position_embedding).max(initial=0.0))
    extra = points_terms
    e = 0.0
    for layer in model.layers:
        att = layer.attention
        if att is not None:
            pre = B * sum(col(att.W_V[h]) * col(att.W_O[h]) for h in range(att.heads))
            B_y = B + pre
            n_y = T * att.heads * (2 * d + 2) + T + 8 + extra
            # underflow: n·η per dot product, and each of T weights' absolute underflow through |W_V||W_O|
            e = e + gamma(n_y) * B_y + weight_error * pre + n_y * ETA * (1 + 2 * T * sum(
                col(att.W_V[h]) * col(att.W_O[h]) for h in range(att.heads)))
            B = B_y
        if layer.mlp is not None:
            mlp = layer.mlp
            B_z = B * col(mlp.W1) + float(np.abs(mlp.b1).max(initial=0.0))
            e_z = col(mlp.W1) * e + gamma(d + 2 + extra) * B_z + (d + 2 + extra) * ETA
            B_v = B + B_z * col(mlp.W2) + float(np.abs(mlp.b2).max(initial=0.0))
            e = e + col(mlp.W2) * e_z + gamma(mlp.width + 3) * B_v + (mlp.width + 3) * ETA
            B = B_v
    c = model.readout.columns.size
    U = model.readout.matrix
    e_l = col(U.T) * e + gamma(c + 2) * B * col(U.T) + (c + 2) * ETA
    return _finite(8.0 * e_l)


class Lowest:
    """The enumeration's running minimum over chunks of points: the lowest margin and its point, and the
    :data:`KEEP_FAILING` lowest failing points (margin < ``limit`` or <= ``floor``), lowest first.

    A non-finite margin (NaN, ±inf: logits that overflowed) is a failing point, recorded as ``-inf``: never
    absent from the minimum. (One possible answer, where every margin is ``+inf``, is decided by the answer
    count in ``certify.certify_built``, not here.)"""

    def __init__(self, n_live: int, limit: float, floor: float) -> None:
        self.low, self.low_values = math.inf, [0] * n_live
        self.failing: list = []
        self.limit, self.floor = limit, floor

    def add(self, margins: np.ndarray, values: list[np.ndarray]) -> None:
        """Fold in one chunk: ``margins[p]`` at the point whose j-th live slot is ``values[j][p]``.

        Parameters
        ----------
        margins, values : numpy.ndarray, list of numpy.ndarray
            The chunk's ``(n,)`` margins (a non-finite one counts as ``-inf``), one ``(n,)`` array per slot.
        """
        margins = np.asarray(margins, dtype=np.float64)
        if not np.all(np.isfinite(margins)):
            margins = np.where(np.isfinite(margins), margins, -np.inf)
        i = int(np.argmin(margins))
        if margins[i] < self.low:
            self.low, self.low_values = float(margins[i]), [int(v[i]) for v in values]
        bad = np.flatnonzero((margins < self.limit) | (margins <= self.floor))
        if bad.size:
            pick = bad[np.argsort(margins[bad], kind="stable")[:KEEP_FAILING]]
            self.failing += [(float(margins[p]), [int(v[p]) for v in values]) for p in pick]
            self.failing.sort(key=lambda f: f[0])
            del self.failing[KEEP_FAILING:]


def chunk_rows(per_point_bytes: int) -> int:
    """Points per chunk: :data:`CHUNK_POINTS`, fewer when a point's arrays take more than
    ``CHUNK_BYTES / CHUNK_POINTS`` (a chunk's arrays stay within :data:`CHUNK_BYTES`, which
    ``certify.certify_estimate`` counts).

    Parameters
    ----------
    per_point_bytes : int
        Bytes the enumeration's arrays take per point.

    Returns
    -------
    int
    """
    return max(1, min(CHUNK_POINTS, CHUNK_BYTES // max(1, int(per_point_bytes))))


def point_chunks(N: int, n_live: int, rows: int = CHUNK_POINTS):
    """The N^n_live joint points in chunks of ``rows``: ``(idx, values)``, where ``values[j]`` is the j-th
    live slot's code index at each point (the mixed-radix digits of ``idx``, least significant first).

    Parameters
    ----------
    N : int
        Codes per slot (the radix).
    n_live : int
        Live slots (the digits).
    rows : int
        Points per chunk (the last may be shorter).

    Yields
    ------
    (numpy.ndarray, list of numpy.ndarray)
        ``idx`` the chunk's int64 point indices, and ``n_live`` int64 arrays of the same length.
    """
    n_points = N**n_live
    for start in range(0, n_points, rows):
        idx = np.arange(start, min(n_points, start + rows), dtype=np.int64)
        values = []
        rest = idx
        for _ in range(n_live):
            rest, v = np.divmod(rest, N)
            values.append(v)
        yield idx, values


def content_key(*parts) -> bytes:
    """A SHA-256 digest of ``parts``' contents, each as an array's shape, dtype and bytes: equal keys mean
    equal numbers (up to a hash collision), so a memo keyed by it reuses a computation only for identical
    inputs (query types whose restricted arrays coincide, as G1's relations do by symmetry).

    Parameters
    ----------
    *parts : array_like
        Arrays or scalars (each passed through ``numpy.ascontiguousarray``).

    Returns
    -------
    bytes
        The 32-byte digest.
    """
    digest = hashlib.sha256()
    for part in parts:
        array = np.ascontiguousarray(part)
        digest.update(repr((array.shape, str(array.dtype))).encode())
        digest.update(array.tobytes())
    return digest.digest()


def decode_distinct(v: np.ndarray, answers: np.ndarray, U_read: np.ndarray) -> np.ndarray:
    """Dense margins of rows ``v`` with their answers, decoding each distinct (row, answer) once: rows are
    grouped by a 64-bit hash of their bytes, and the grouping is then checked exactly (every row equal to its
    group's representative, bit for bit); on any collision every row is decoded.

    Parameters
    ----------
    v : numpy.ndarray
        ``(n, D)`` float64 read residuals (their bytes are grouped as ``uint64`` words).
    answers : numpy.ndarray
        ``(n,)`` integer answer ids.
    U_read : numpy.ndarray
        ``(n_out, D)``: the read-out on the read coordinates.

    Returns
    -------
    numpy.ndarray
        ``(n,)`` float64 margins, equal to ``dense_decode(v, answers, U_read)[1]``.
    """
    bits = np.ascontiguousarray(v).view(np.uint64)
    key = answers.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        for c in range(bits.shape[1]):
            key = (key ^ bits[:, c]) * np.uint64(0x100000001B3)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rep = first[inverse.reshape(-1)]
    if not (np.array_equal(bits, bits[rep]) and np.array_equal(answers, answers[rep])):
        return dense_decode(v, answers, U_read)[1]
    return dense_decode(np.ascontiguousarray(v[first]), answers[first], U_read)[1][inverse.reshape(-1)]


def failure_limits(threshold: float | None, promise: Promise | None, integer: bool,
            allowance: float) -> tuple[float, float]:
    """Margins below the first value, or at most the second, are definite failures: below the promise (in
    float mode by more than the forward-error allowance, never a multiple of the logit scale) or not
    positive.

    Parameters
    ----------
    threshold : float or None
        The promised margin, or None without a promise.
    promise : Promise or None
        The promise (unused: ``threshold`` carries its margin).
    integer : bool
        Integer mode: margins are exact, no allowance.
    allowance : float
        The float-mode forward-error allowance (:func:`float_allowance`).

    Returns
    -------
    (float, float)
        Integer mode ``(threshold or 0, 0)``; float mode ``(threshold − allowance, −allowance)``, with
        ``−inf`` first when there is no promise.
    """
    if integer:
        return (threshold if threshold is not None else 0.0), 0.0
    if threshold is None:
        return -math.inf, -allowance
    return threshold - allowance, -allowance


def stand_in(model: Model, vectors: np.ndarray) -> Model:
    """``model`` with a one-row entity table holding the codebook's largest magnitude: the magnitudes the
    forward-error bounds need (the family's own table is left out).

    Parameters
    ----------
    model : Model
        The family's model; everything but its entity table is kept.
    vectors : numpy.ndarray
        The codebook; its largest absolute entry fills the ``(1, d)`` table.

    Returns
    -------
    Model
    """
    bound = abs_max(vectors)
    return Model(np.full((1, model.d), bound), model.relation_embedding, model.unembedding, model.layers,
                 model.position_embedding, readout_columns=model.readout_columns)


def codebook_allowance(model: Model, vectors: np.ndarray, T: int, terms: int,
                       weight_error: float = 0.0) -> float:
    """:func:`float_allowance` with the entity table's magnitude taken from the codebook.

    Parameters
    ----------
    model : Model
        The family's model (its entity table is replaced by :func:`stand_in`).
    vectors : numpy.ndarray
        The codebook.
    T : int
        Sequence length of the queries.
    terms : int
        Extra terms per summation of the certifier's own evaluation (``points_terms`` there).
    weight_error : float
        A bound on each attention weight's relative rounding beyond ``γ_{T+8}``, as there.

    Returns
    -------
    float

    Raises
    ------
    Unsupported
        As :func:`float_allowance`: the bound overflows float64.
    """
    return float_allowance(stand_in(model, vectors), T, terms, weight_error)


def preactivation_slack(model: Model, vectors: np.ndarray, T: int, terms: int, weight_error: float) -> float:
    """A bound on the float64 error of the certifier's per-unit maximum ``c_u + Σ_slot max_j <a_j, w>``
    (float mode): ``4·(γ_n·B_z + e_y·|W1|)`` with B_z the pre-activations' magnitude bound and e_y the
    attention output's error, as in :func:`float_allowance`. A unit is proved off only when its computed
    maximum is <= −slack; one within the slack is enumerated instead (sound either way).

    Parameters
    ----------
    model : Model
        The family's model; its first layer's attention and MLP are read (the MLP must exist).
    vectors : numpy.ndarray
        The codebook (its largest magnitude stands in for the entity table: :func:`stand_in`).
    T : int
        Sequence length of the queries.
    terms : int
        Extra terms per summation of the certifier's own evaluation (the slot terms).
    weight_error : float
        A bound on each attention weight's relative rounding beyond ``γ_{T+8}``
        (:func:`float_allowance`).

    Returns
    -------
    float
        The slack.

    Raises
    ------
    Unsupported
        The bound overflows float64 (weights too large to bound).
    """
    u = 2.0**-53
    probe = stand_in(model, vectors)
    d = model.d

    def col(W) -> float:
        return float(np.abs(W).sum(axis=-2).max(initial=0.0))

    B = max(float(np.abs(probe.entity_embedding).max(initial=0.0)),
            float(np.abs(probe.relation_embedding).max(initial=0.0)))
    if probe.position_embedding is not None:
        B += float(np.abs(probe.position_embedding).max(initial=0.0))
    layer = probe.layers[0]
    att, mlp = layer.attention, layer.mlp
    assert mlp is not None
    pre = 0.0 if att is None else B * sum(col(att.W_V[h]) * col(att.W_O[h]) for h in range(att.heads))
    B_y = B + pre
    n = T * (1 if att is None else att.heads) * (2 * d + 2) + T + 8 + terms + d + 2
    e_y = n * u / (1 - n * u) * B_y + weight_error * pre
    e_y += n * ETA  # underflow: n·η per dot product
    B_z = B_y * col(mlp.W1) + float(np.abs(mlp.b1).max(initial=0.0))
    return _finite(4.0 * (n * u / (1 - n * u) * B_z + e_y * col(mlp.W1) + (d + 2 + terms) * ETA))


def _finite(bound: float) -> float:
    """A forward-error bound that is a finite float, or :class:`Unsupported` naming the overflow (an
    infinite or NaN allowance would certify nothing and print as no number)."""
    if not math.isfinite(bound):
        raise Unsupported(f"float mode: the forward-error bound overflows ({bound}): the weights' magnitudes "
                          "exceed what float64 can bound")
    return bound
