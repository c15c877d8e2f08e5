"""The constructions and tasks of the public API: list and resolve a construction, make THE task of a run,
build a construction on a task.

``gr.list_constructions()`` lists the registry (:mod:`georecall.constructions.registry`, the one list of
constructions), ``gr.construction(name)`` resolves a name as every command does, ``gr.task(N, R, seed)`` is
the task every command builds from ``(N, R, seed)`` (:func:`georecall.theory.tasks.task_for_seed`) and
``gr.build(name, task)`` runs the construction's builder on it with the codes stream of ``seed``, as
``check`` does before it checks.
"""

from __future__ import annotations

from typing import Any, Literal

from georecall.api_command import python_words

__all__ = ["build", "construction", "list_constructions", "task"]


def list_constructions(hops: str | None = None) -> list[str]:
    """The registered constructions' command-line names, in the registry's order.

    Parameters
    ----------
    hops : {"single", "multi"}, optional
        Only single-hop or only k-hop constructions (default: all).

    Returns
    -------
    list of str
        Names such as ``"geometric"``; :func:`construction` gives each one's spec. (Not called
        ``constructions``: that is the subpackage :mod:`georecall.constructions`.)

    Raises
    ------
    InputError
        ``hops`` is neither "single" nor "multi".

    Examples
    --------
    >>> import georecall as gr
    >>> "geometric" in gr.list_constructions()
    True
    >>> gr.list_constructions(hops="multi")[0]
    'path-blocks'
    """
    from georecall.constructions import registry  # the registry builds its specs: imported when asked
    from georecall.errors import InputError

    if hops not in (None, "single", "multi"):
        raise InputError(f"hops must be 'single' or 'multi', got {hops!r}")
    return [spec.name for spec in registry.specs(hops)]


def construction(name: str):
    """The registered construction ``name``: its spec (id, result, promise, builder, options).

    Parameters
    ----------
    name : str
        A command-line name (``"geometric"``), an id (``"G1"``), or ``MODULE:ATTR`` / ``FILE.py:ATTR`` naming
        a :class:`~georecall.constructions.registry.ConstructionSpec` of your own.

    Returns
    -------
    ConstructionSpec

    Raises
    ------
    InputError
        An unknown name, or a user file that cannot be loaded.

    Examples
    --------
    >>> import georecall as gr
    >>> spec = gr.construction("geometric")
    >>> spec.id, spec.hops
    ('G1', 'single')
    >>> gr.construction("G2").name
    'path-blocks'
    """
    from georecall.constructions import registry  # as in list_constructions()

    return registry.resolve(name)


def task(N: int, R: int, seed: int = 0, *, attributes: Literal["shared", "disjoint"] = "shared",
         symmetric: bool = False):
    """THE task of a run: R random bijections of the N entities, a function of ``(N, R, seed)`` alone, the
    same one every command builds.

    Parameters
    ----------
    N : int
        Entities.
    R : int
        Relations.
    seed : int
        The run seed (the task stream of its SeedSequence).
    attributes : {"shared", "disjoint"}
        Whether every relation maps into the same N attributes, or relation r into its own.
    symmetric : bool
        Each relation a perfect matching (an involution; N even).

    Returns
    -------
    Task
        ``task.table[r, s]`` is the answer π_r(s).

    Raises
    ------
    InputError
        N or R not a positive integer, a negative seed, or ``symmetric`` with N odd.

    Examples
    --------
    >>> import georecall as gr
    >>> t = gr.task(4, 2, seed=0)
    >>> t.N, t.R, t.table.shape
    (4, 2, (2, 4))
    >>> sorted(t.table[0].tolist())
    [0, 1, 2, 3]
    """
    from georecall.theory.tasks import task_for_seed  # numpy: imported when asked

    return task_for_seed(N, R, seed, attributes=attributes, symmetric=symmetric)


def build(name: str, task, *, k: int | None = None, seed: int = 0, codes: str | None = None,
          D: int | None = None, **options: Any):
    """Build the construction ``name`` on ``task``: the weights ``check`` checks.

    Parameters
    ----------
    name : str
        A construction (as for :func:`construction`).
    task : Task
        The facts to store (:func:`task`).
    k : int, optional
        Hops (default 1 for a single-hop construction, 2 for a k-hop one).
    seed : int
        The run seed (its codes stream draws random codes).
    codes : str, optional
        Attribute codes ("binary", "sign", "gaussian", ...; default: the construction's own).
    D : int, optional
        Code length (default: the construction's own, ⌈log2 N⌉ for binary codes).
    **options
        The builder's own constants (``gate``, ``beta``, ``lam``, ``attention``, ``integer``, ...).

    Returns
    -------
    Construction
        ``.model`` (the :class:`~georecall.constructions.model.Model`), ``.promise`` (the theorem's sizes
        and margin), ``.codes``, ``.constants``.

    Raises
    ------
    InputError
        An unknown construction, an option it does not take, or sizes outside its theorem's conditions
        (:class:`~georecall.errors.ConditionError`, naming the inequality).

    Examples
    --------
    >>> import georecall as gr
    >>> built = gr.build("geometric", gr.task(16, 2))
    >>> built.model.d == built.promise.d
    True
    """
    from georecall.theory import seeds  # imported with the builders, when asked
    from georecall.verify.checking.run import validate_request

    spec = construction(name)
    k = (1 if spec.hops == "single" else 2) if k is None else k
    given = {key: value for key, value in options.items() if value is not None}
    code_options = {key: value for key, value in (("codes", codes), ("D", D)) if value is not None}
    # the one validation (and wording) of what a spec is asked for, as check and certify use
    with python_words():  # the refusals name options as Python does
        given = validate_request(spec, options=given, codes=codes, D=D, k=k, attributes=task.attributes)
        return spec.builder(task, k, rng=seeds.rng(seed, "codes"), **code_options, **given)
