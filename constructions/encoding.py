"""How the task enters a construction: the declaration ``georecall certify`` relies on (docs/theory.md,
"Certification for every task").

A construction whose facts live in its entity table declares a :class:`TaskEncoding`: the entity table is a
*block superposition* over P slots,

    E[s, blocks[b]] = a_{answers[b, s]}  (b = 0..P−1),   E[s, c] = 0 on every other coordinate c,

where ``answers`` is the task's table (one slot per relation: G1, C1) or its k-hop table (one slot per
relation path: G2), ``blocks (P, D)`` a named block of the construction's residual layout and ``a_j`` row j
of the construction's codebook; every other array of the model is task-independent. The declaration also
says which slot answers a query (``queries``): the asked relation's (``"single"``), the asked path's
(``"paths"``), or, for chain-of-thought, the slot of the relation of step t at the current entity (``"cot"``).

The certifier never trusts a declaration: it builds the construction on several tasks and checks that every
other array is identical and that the entity table is the declared superposition (refusing otherwise).
:func:`recording` makes that check cheap at any N: inside it,
:func:`georecall.constructions.parts.block_superposition` records its arguments and returns a read-only table
of zeros (whose pages the operating system never commits), so the N × d table is never formed; the certifier
then compares the recorded arguments with the declaration, exactly.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np

from georecall.errors import InputError
from georecall.theory.tasks import Task

__all__ = ["ARRAYS", "QUERY_KINDS", "SLOT_KINDS", "Superposition", "TaskEncoding", "active_recording",
           "recording"]

SLOT_KINDS = ("relations", "paths")
# The entity table (block superposition: G1, G2, C1) or the MLP's output rows (one unit per fact: A1, A2(a)).
ARRAYS = ("entity_embedding", "layers.0.mlp.W2")
QUERY_KINDS = ("single", "paths", "cot")


@dataclass(frozen=True)
class TaskEncoding:
    """The declared task encoding of a construction (module docstring).

    Attributes
    ----------
    slots : "relations" (P = R slots, ``answers = task.table``) or "paths" (P = R^k, ``answers =
        task.k_hop(k)`` flattened in path order)
    blocks : the name of the ``(P, D)`` block of the construction's layout (``Construction.layout``)
    queries : which slot answers a query: "single" (query ``(s, ρ)``: slot ρ), "paths" (query ``(s, w)``: slot
        w), "cot" (step t of chain ``(s; r_1..r_k)``: slot ``r_t`` of the entity at the current position)
    array : the one task-dependent array: ``"entity_embedding"`` (the superposition above) or
        ``"layers.0.mlp.W2"`` (facts in the MLP: unit ``u = b·N + e`` writes ``a_{answers[b, e]}`` on the
        coordinates of ``blocks``, a 1-D layout block, and nothing else of W2 depends on the task)
    """

    slots: Literal["relations", "paths"]
    blocks: str
    queries: Literal["single", "paths", "cot"]
    array: str = "entity_embedding"

    def __post_init__(self) -> None:
        if self.slots not in SLOT_KINDS:
            raise InputError(f"task encoding: slots must be one of {SLOT_KINDS}, got {self.slots!r}")
        if self.queries not in QUERY_KINDS:
            raise InputError(f"task encoding: queries must be one of {QUERY_KINDS}, got {self.queries!r}")
        if self.array not in ARRAYS:
            raise InputError(f"task encoding: the declared array must be one of {ARRAYS}, got {self.array!r}")
        if (self.slots == "paths") != (self.queries == "paths"):
            raise InputError("task encoding: path slots go with path queries (and only with them)")

    def answers(self, task: Task, k: int) -> np.ndarray:
        """The declared ``(P, N)`` table: the answer (a row of the codebook) each slot holds for each
        entity."""
        if self.slots == "relations":
            return task.table
        return task.k_hop(k).reshape(-1, task.N)

    def as_dict(self) -> dict:
        return {"array": self.array, "slots": self.slots, "blocks": self.blocks, "queries": self.queries}


@dataclass
class Superposition:
    """One recorded call of ``block_superposition``: its codebook vectors, answers, blocks, width and the
    zero table it returned instead of the superposition."""

    vectors: np.ndarray
    answers: np.ndarray
    blocks: np.ndarray
    d: int
    result: np.ndarray | None = None


_RECORDING: contextvars.ContextVar[list[Superposition] | None] = contextvars.ContextVar(
    "georecall_superposition_recording", default=None)


@contextmanager
def recording() -> Iterator[list[Superposition]]:
    """Within the block, ``block_superposition`` records its arguments and returns a read-only zero table
    instead of the superposition (never written, so never committed to memory).

    Yields
    ------
    list of Superposition
        The calls recorded, in order (the list grows while the block runs).
    """
    calls: list[Superposition] = []
    token = _RECORDING.set(calls)
    try:
        yield calls
    finally:
        _RECORDING.reset(token)


def active_recording() -> list[Superposition] | None:
    """The list the current :func:`recording` block appends to.

    Returns
    -------
    list of Superposition or None
        None outside a :func:`recording` block.
    """
    return _RECORDING.get()
