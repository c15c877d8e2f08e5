"""Decoding with THE forward pass: argmax predictions in bounded-memory chunks (:func:`predict`,
:func:`chunk_size`, :func:`iter_chunks`) and greedy chain-of-thought decoding (:func:`greedy_decode`).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from georecall import memory
from georecall.constructions.forward import forward
from georecall.constructions.model import Model
from georecall.errors import InputError

__all__ = ["DEFAULT_CHUNK_BYTES", "chunk_size", "greedy_decode", "iter_chunks", "predict"]


# Kept for callers of the name: the largest chunk of any budget (memory.CHUNK_BYTES, its one definition).
DEFAULT_CHUNK_BYTES = memory.CHUNK_BYTES


def chunk_size(model: Model, T: int, chunk_bytes: int | None = None) -> int:
    """Queries per chunk so that the largest per-query intermediate stays within ``chunk_bytes``
    (:func:`georecall.memory.queries_per_chunk`, the formula the memory estimate counts).

    Parameters
    ----------
    model : Model
    T : int
        The sequence length.
    chunk_bytes : int, optional
        The bytes of one intermediate (default: one array's share of the default budget,
        :func:`georecall.memory.array_bytes`).

    Returns
    -------
    int
        At least 1.
    """
    return memory.queries_per_chunk(max(model.d, model.mlp_width, model.n_out), T,
                                    memory.array_bytes() if chunk_bytes is None else chunk_bytes)


def iter_chunks(n: int, size: int) -> Iterator[slice]:
    """Consecutive slices covering ``range(n)``, each of at most ``size`` items.

    Parameters
    ----------
    n : int
        Items.
    size : int
        Items per slice (>= 1).

    Yields
    ------
    slice
    """
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def predict(model: Model, tokens: np.ndarray, *, chunk: int | None = None) -> np.ndarray:
    """Argmax predictions at the last position, by THE forward pass in bounded-memory chunks.

    Parameters
    ----------
    model : Model
    tokens : numpy.ndarray
        ``(B, T)`` token ids.
    chunk : int, optional
        Queries per chunk (default :func:`chunk_size`).

    Returns
    -------
    numpy.ndarray
        ``(B,)`` int64.

    Raises
    ------
    InputError
        As :func:`forward`.
    """
    tokens = np.asarray(tokens)
    chunk = chunk or chunk_size(model, tokens.shape[1])
    out = np.empty(tokens.shape[0], dtype=np.int64)
    for part in iter_chunks(tokens.shape[0], chunk):
        out[part] = forward(model, tokens[part]).argmax(axis=1)
    return out


def greedy_decode(model: Model, prompts: np.ndarray, steps: int, *, integer: bool = False):
    """Greedy chain-of-thought decoding: ``steps`` times, predict at the last position and append the
    predicted entity as a new input token (re-embedded by the input table ``E``).

    Parameters
    ----------
    model : Model
        Its outputs must be entities (``n_out == N``) for the prediction to be fed back.
    prompts : numpy.ndarray
        ``(B, T)`` token ids.
    steps : int
        Tokens generated.
    integer : bool
        Run THE forward pass in integer mode (the caller proved :func:`integer_bounds` for every length).

    Returns
    -------
    generated : numpy.ndarray
        ``(B, steps)`` int64.
    margins : numpy.ndarray
        ``(B, steps)``: top logit minus runner-up (``inf`` with one output).

    Raises
    ------
    InputError
        ``n_out != N``, or as :func:`forward`.
    """
    if model.n_out != model.n_entities:
        raise InputError(
            f"decoding feeds predictions back as entities: needs n_out == N, "
            f"got n_out = {model.n_out}, N = {model.n_entities}"
        )
    seq = np.asarray(prompts, dtype=np.int64)
    generated = np.empty((seq.shape[0], steps), dtype=np.int64)
    margins = np.empty((seq.shape[0], steps))
    for t in range(steps):
        logits = forward(model, seq, integer=integer)
        top2 = np.partition(logits, -2, axis=1)[:, -2:] if logits.shape[1] > 1 else None
        generated[:, t] = logits.argmax(axis=1)
        margins[:, t] = (top2[:, 1] - top2[:, 0]) if top2 is not None else np.inf
        seq = np.concatenate([seq, generated[:, t : t + 1]], axis=1)
    return generated, margins
