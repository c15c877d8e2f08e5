"""Named residual layouts: a construction allocates its coordinates by name and never computes offsets by
hand.

A :class:`Layout` hands out consecutive coordinates: ``layout.add("blocks", R, D)`` returns an ``(R, D)``
array of coordinate indices (``blocks[r, i]`` is entry i of block ``B_r``), ``layout.add("gates", R)`` an
``(R,)`` array, and ``layout.d`` is the width so far. The built model records ``layout.as_dict()`` in its
``meta`` so that the demo, probes and users read the blocks by name. The width a construction *achieves* is
measured from the arrays it builds; the width its theorem *promises* comes from ``theory.statements``: the
checker compares the two.
"""

from __future__ import annotations

import math

import numpy as np

from georecall.errors import InputError

__all__ = ["Layout"]


class Layout:
    """Blocks of residual coordinates by name, allocated in order.

    Examples
    --------
    >>> layout = Layout()
    >>> layout.add("blocks", 2, 3).tolist()
    [[0, 1, 2], [3, 4, 5]]
    >>> layout.add("gates", 2).tolist(), layout.d
    ([6, 7], 8)
    """

    def __init__(self) -> None:
        self._blocks: dict[str, tuple[int, tuple[int, ...]]] = {}
        self.d = 0

    def add(self, name: str, *shape: int) -> np.ndarray:
        """Allocate ``prod(shape)`` new coordinates under ``name``; returns their indices with that shape.

        Parameters
        ----------
        name : str
            The block's name (new to this layout).
        *shape : int
            The block's shape (at least one non-negative integer).

        Returns
        -------
        numpy.ndarray
            The new coordinates (int64), consecutive from the previous width d, shaped ``shape``.

        Raises
        ------
        InputError
            ``name`` is already allocated, or ``shape`` is empty or not non-negative integers.
        """
        if name in self._blocks:
            raise InputError(f"layout block {name!r} is already allocated")
        if not shape or any(
            isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0 for n in shape
        ):
            raise InputError(f"layout block {name!r} needs a shape of non-negative integers, got {shape}")
        shape = tuple(int(n) for n in shape)
        self._blocks[name] = (self.d, shape)
        self.d += math.prod(shape)
        return self[name]

    def __getitem__(self, name: str) -> np.ndarray:
        start, shape = self._blocks[name]
        return np.arange(start, start + math.prod(shape), dtype=np.int64).reshape(shape)

    def __contains__(self, name: str) -> bool:
        return name in self._blocks

    def __len__(self) -> int:
        return self.d

    def span(self, name: str) -> slice:
        """The block's coordinates as a slice ``start:stop``.

        Parameters
        ----------
        name : str
            An allocated block (``KeyError`` otherwise).

        Returns
        -------
        slice
        """
        start, shape = self._blocks[name]
        return slice(start, start + math.prod(shape))

    def as_dict(self) -> dict[str, dict]:
        """JSON-able description: ``{name: {"start": .., "stop": .., "shape": [..]}}`` in allocation order."""
        return {
            name: {"start": start, "stop": start + math.prod(shape), "shape": list(shape)}
            for name, (start, shape) in self._blocks.items()
        }

    @classmethod
    def from_dict(cls, blocks: dict[str, dict]) -> Layout:
        """Rebuild a layout from :meth:`as_dict` (e.g. a model's ``meta["layout"]``), checking contiguity.

        Parameters
        ----------
        blocks : dict
            ``{name: {"start": .., "shape": [..]}}`` in allocation order (``stop`` is not read).

        Returns
        -------
        Layout

        Raises
        ------
        InputError
            A block that does not start where the previous one stopped, or an invalid shape.
        """
        layout = cls()
        for name, block in blocks.items():
            if block["start"] != layout.d:
                raise InputError(f"layout block {name!r} starts at {block['start']}, expected {layout.d}")
            layout.add(name, *block["shape"])
        return layout
