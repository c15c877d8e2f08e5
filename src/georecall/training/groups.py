"""Parameter groups: the names training freezes and decays by (``train(frozen=..., weight_decay=...)``),
shared by the dense trainer and the structured step."""

from __future__ import annotations

__all__ = ["GROUPS", "group_of"]

GROUPS = ("entity_embedding", "relation_embedding", "position_embedding", "unembedding", "attention", "mlp")


def group_of(key: str) -> str:
    """The freezing group of a parameter key of :func:`georecall.constructions.model.flatten`.

    Parameters
    ----------
    key : str
        A flattened parameter name: ``"entity_embedding"``, or ``"layers.<i>.<group>.<array>"``.

    Returns
    -------
    str
        One of :data:`GROUPS` for the keys the model produces (``"layers.0.mlp.W1"`` → ``"mlp"``).
    """
    if key.startswith("layers."):
        return key.split(".")[2]
    return key
