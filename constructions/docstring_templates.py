"""The docstrings every built-in construction module repeats, written once: a module's ``build_*`` (its family
on a task) and its ``*_nominal_promise`` (its promise at the registry's nominal codes) take their text from
here, filled from the function's own signature and the family or promise it wraps.

A builder's own docstring is where the construction, its inequality and its theorem are stated: that is the
family's (``g1_family`` and so on); these two kinds of function only apply it, so their docstrings say which
and point there."""

from __future__ import annotations

import inspect

__all__ = ["nominal_promise_docstring", "task_builder_docstring"]

_TASK_BUILDER = """{label} on ``task``:
``assemble({family}(task.N, task.R, {hops}codes, attributes=task.attributes, ...), task)``
(:func:`{family}` states the construction; options as there).

Parameters
----------
task : Task
    The facts; its N, R and attribute variant (``task.attributes``) size the family.
{k_entry}codes : Codes or str
    The codebook, or its kind (``"binary"``, ``"sign"``, ``"gaussian"``).
**options
    The keyword options of :func:`{family}`:
    {options}.

Returns
-------
Construction
    The family's model with ``task``'s declared table, its promise, codes, constants and layout.

Raises
------
ConditionError, FamilyError, InputError
    As :func:`{family}` (outside its conditions, a codebook that does not fit) and
    :func:`~georecall.constructions.building.assemble` (``task`` does not fit the family).
"""

_NOMINAL_PROMISE = """{label}'s promise at binary codes of length ``D = ⌈log2 N⌉`` and its default constants:
the registry's ``nominal_promise`` (the sizes of the tables and memory estimates).

Parameters
----------
N : int
    Entities.
R : int
    Relations.
k : int
    {k_text}

Returns
-------
Promise
    As :func:`{promise}` at those codes and constants
    (:func:`~georecall.constructions.building.nominal_geometry`).

Raises
------
InputError
    {raises}
"""


def _takes_hops(function) -> bool:
    """Whether ``function``'s ``k`` is a required parameter (a k-hop function) rather than absent or defaulted
    (a single-hop one, which takes ``k`` only to share a signature)."""
    k = inspect.signature(function).parameters.get("k")
    return k is not None and k.default is inspect.Parameter.empty


def task_builder_docstring(label: str, family):
    """Decorator: give a ``build_*`` function (``assemble(family(task.N, task.R, ...), task)``) its docstring.

    Parameters
    ----------
    label : str
        The construction's id as the paper writes it (``"G1"``, ``"A2(a)"``).
    family : callable
        The family the builder applies; its keyword-only parameters but ``attributes`` (which the task sets)
        are listed as the builder's options, in signature order.

    Returns
    -------
    callable
        A decorator that sets the builder's ``__doc__`` and returns it; the builder has a ``k`` entry exactly
        when its signature requires ``k``.

    Examples
    --------
    >>> from georecall.constructions.g2 import build_g2
    >>> "k : int" in build_g2.__doc__, "``beta``" in build_g2.__doc__
    (True, True)
    """
    options = [name for name, parameter in inspect.signature(family).parameters.items()
               if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name != "attributes"]

    def decorate(builder):
        hops = _takes_hops(builder)
        builder.__doc__ = _TASK_BUILDER.format(
            label=label, family=family.__name__, hops="k, " if hops else "",
            k_entry="k : int\n    Hops per query.\n" if hops else "",
            options=", ".join(f"``{name}``" for name in options))
        return builder

    return decorate


def nominal_promise_docstring(label: str, promise):
    """Decorator: give a ``*_nominal_promise`` function (``promise`` at the nominal codes) its docstring.

    Parameters
    ----------
    label : str
        The construction's id as the paper writes it.
    promise : callable
        The promise function it evaluates (named in Returns).

    Returns
    -------
    callable
        A decorator that sets the function's ``__doc__`` and returns it; ``k`` is described as hops when the
        function requires it, and as the ignored shared-signature argument when it has a default.

    Examples
    --------
    >>> from georecall.constructions.g1 import g1_nominal_promise
    >>> "ignored (a single hop)" in g1_nominal_promise.__doc__
    True
    """
    def decorate(function):
        hops = _takes_hops(function)
        function.__doc__ = _NOMINAL_PROMISE.format(
            label=label, promise=promise.__name__,
            k_text="Hops per query (>= 1)." if hops else
            ("Hops per query; ignored (a single hop), taken so that every registry entry's\n    "
             "``nominal_promise`` has the signature ``(N, R, k)``."),
            raises="N, R or k not a positive integer." if hops else "N or R not a positive integer.")
        return function

    return decorate
