"""Names that moved out of a module when it was split by concept: still importable from where they were.

A module split into siblings keeps a table of the public names that left it, by their new module
(``_MOVED``), and makes it its module-level ``__getattr__`` (PEP 562) with :func:`moved_names`. ``from
georecall.verify.experiments.sweep import TrialSettings`` (old code) then gives the very object
``georecall.verify.experiments.sweep_trial`` defines, with a :class:`DeprecationWarning` naming that module.
Nothing is imported until a moved name is asked for, so a sibling may import the split module freely. The
project's own code imports every name from its new module (``tests/test_moved.py`` checks both).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping, Sequence

__all__ = ["moved_names"]


def moved_names(module: str, homes: Mapping[str, Sequence[str]]) -> Callable[[str], object]:
    """A module ``__getattr__`` that finds each moved name in its new module, with a DeprecationWarning.

    Parameters
    ----------
    module : str
        The split module's name (its ``__name__``).
    homes : mapping
        Each new module (its full dotted name) and the names that moved to it.

    Returns
    -------
    callable
        ``__getattr__(name)``: the object ``name`` is in its new module (warning ``DeprecationWarning``:
        import it from there); any other name raises ``AttributeError`` as a module without one would.

    Raises
    ------
    ValueError
        A name listed under two modules.
    """
    new_home: dict[str, str] = {}
    for home, names in homes.items():
        for name in names:
            if name in new_home:
                raise ValueError(f"{name!r} is listed under {new_home[name]!r} and {home!r}")
            new_home[name] = home

    def __getattr__(name: str) -> object:
        home = new_home.get(name)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} moved to {home}.{name}: import it from {home}",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), name)

    return __getattr__
