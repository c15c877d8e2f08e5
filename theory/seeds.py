"""The seed contract: every random draw in georecall comes from one ``numpy.random.SeedSequence`` per run.

A run has one integer seed ``S >= 0`` (``--seed`` on the command line). Each kind of randomness draws from its
own *named stream*, the child ``SeedSequence(S, spawn_key=(STREAMS[name], *key))``:

========== ==== ====================================================================================
stream      id  what it draws
========== ==== ====================================================================================
task         0  the R bijections: a function of ``(N, R, S)`` alone (plus the task variant flags)
codes        1  random attribute codes (sign, Gaussian)
init         2  a trained model's initial weights
batches      3  minibatch order
probes       4  probe splits, intervened subjects
transfer     5  the new bijections and embeddings of freeze-and-swap
noise        6  perturbations added to hand-built weights
gadgets      7  the lower-bound gadget graphs
========== ==== ====================================================================================

Extra ``key`` integers separate draws that must differ within one stream (a sweep's trial ``(mode, d)``
for ``init``, say). Because the ``task`` stream takes no key, the same ``(N, R, seed)`` gives the same task
in ``check``, ``precision``, ``train``, ``sweep`` and the mechanism study (a test checks this).
Nothing in georecall touches NumPy's global random state.
"""

from __future__ import annotations

import numpy as np

from georecall.errors import InputError

__all__ = ["STREAMS", "check_seed", "stream", "rng"]

STREAMS: dict[str, int] = {"task": 0, "codes": 1, "init": 2, "batches": 3, "probes": 4, "transfer": 5,
                           "noise": 6, "gadgets": 7}


def check_seed(seed) -> int:
    """Validate a run seed.

    Parameters
    ----------
    seed : int
        The seed.

    Returns
    -------
    int
        ``seed`` as a Python int.

    Raises
    ------
    InputError
        Not a non-negative integer (a bool is refused).
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"a seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def stream(seed: int, name: str, *key: int) -> np.random.SeedSequence:
    """The ``SeedSequence`` of stream ``name`` (and optional integer ``key``) of run seed ``seed``.

    Parameters
    ----------
    seed : int
        The run seed (>= 0).
    name : str
        A stream of ``STREAMS``.
    *key : int
        Non-negative integers separating draws within the stream.

    Returns
    -------
    numpy.random.SeedSequence
        ``SeedSequence(seed, spawn_key=(STREAMS[name], *key))``.

    Raises
    ------
    InputError
        An unknown stream, a bad key or a bad seed.
    """
    if name not in STREAMS:
        raise InputError(f"unknown random stream {name!r}; streams: {sorted(STREAMS)}")
    for part in key:
        if isinstance(part, bool) or not isinstance(part, (int, np.integer)) or part < 0:
            raise InputError(f"stream keys must be non-negative integers, got {key!r}")
    return np.random.SeedSequence(check_seed(seed), spawn_key=(STREAMS[name], *(int(p) for p in key)))


def rng(seed: int, name: str, *key: int) -> np.random.Generator:
    """A ``Generator`` on stream ``name`` of run seed ``seed``: ``rng(seed, "task")`` draws the task.

    Parameters
    ----------
    seed, name, *key
        As in :func:`stream`.

    Returns
    -------
    numpy.random.Generator

    Raises
    ------
    InputError
        As :func:`stream`.
    """
    return np.random.default_rng(stream(seed, name, *key))
