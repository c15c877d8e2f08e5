"""The construction registry: the ONE list of constructions.

Each :class:`ConstructionSpec` says what a construction is (id, command-line name, the result it implements),
how to build it, what its theorem promises at nominal constants (for tables), how many hops it answers, how
its answers are decoded, which lower bound governs it, which options its builder takes, the sizes
``georecall verify`` checks it at, and the bits per parameter it needs (:class:`BitsClaim`). The command
line's choices, the ``verify`` cases and rows (including "bits needed" and "lower bounds <= verified
constructions"), the tradeoff table and the bound tables are all derived from :func:`specs`: adding a
construction is one module plus one :func:`register` call.

Bring your own construction: define a spec in your own module and either call :func:`register` or point the
command line at it, ``georecall check single-hop --construction my_module:SPEC`` (or
``path/to/file.py:SPEC``); :func:`resolve` imports it. The checker then builds it on the seeded task and
checks every query against the promise the spec's builder returns (see ``examples/my_construction.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import os
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from georecall import usercode
from georecall.constructions.a1 import A1_ENCODING, a1_family, a1_nominal_promise
from georecall.constructions.a2_depth import A2B_ENCODING, a2_depth_family, a2_depth_nominal_promise
from georecall.constructions.a2_width import A2A_ENCODING, a2_width_family, a2_width_nominal_promise
from georecall.constructions.builder_options import BUILDER_OPTIONS, BuilderOption
from georecall.constructions.building import Construction, assemble, nominal_geometry
from georecall.constructions.c1 import C1_ENCODING, c1_family, c1_nominal_promise
from georecall.constructions.codes import CODE_KINDS
from georecall.constructions.encoding import Family, TaskEncoding
from georecall.constructions.g1 import G1_ENCODING, g1_family, g1_nominal_promise
from georecall.constructions.g2 import G2_ENCODING, g2_family, g2_nominal_promise
from georecall.constructions.model import Model
from georecall.errors import InputError, UserCodeError
from georecall.theory.statements import Promise
from georecall.theory.tasks import Task

__all__ = [
    "BOUNDS",
    "BUILTIN_IDS",
    "COMMON_OPTIONS",
    "BitsClaim",
    "ConstructionSpec",
    "assembled_family",
    "builder_option",
    "encoding_contradiction",
    "family_build",
    "get",
    "multi_hop_build",
    "multi_hop_family",
    "nominal_geometry",
    "option_text",
    "register",
    "resolve",
    "single_hop_build",
    "single_hop_family",
    "specs",
    "unregister",
]

# Options every builder takes: the codebook, its length, the read-out scale and the codes' random stream.
COMMON_OPTIONS = frozenset({"codes", "D", "lam"})
BOUNDS = ("total_information", "tradeoff", "chain_of_thought")


@dataclass(frozen=True)
class BitsClaim:
    """What a construction claims about bits per parameter, checked by ``georecall verify``'s "bits needed"
    row and used by its "lower bounds <= verified constructions" row and by the gap tables.

    Attributes
    ----------
    N, R, k : the instance the precision scan quantizes (binary codes, the seed's task).
    needed : the smallest b (per-tensor codebooks of 2^b values) keeping that instance exact; the row
        re-measures it and requires b − 1 to fail.
    table : the b the gap tables put the construction at, when its need does not grow with N (None: it is
        left out of the gap tables).
    per_parameter : bits per fact-specific parameter with per-coordinate codebooks, when the built embeddings
        of two tasks are known to fit them (checked by the row); None when not claimed.
    """

    N: int
    R: int
    k: int = 1
    needed: int = 1
    table: int | None = None
    per_parameter: int | None = None

    def __post_init__(self) -> None:
        for name in ("N", "R", "k", "needed"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(f"BitsClaim.{name} must be a whole number >= 1, got {value!r}")
        for name in ("table", "per_parameter"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise InputError(f"BitsClaim.{name} must be None or a whole number >= 1, got {value!r}")


@dataclass(frozen=True, eq=False)
class ConstructionSpec:
    """One construction, as the rest of georecall sees it.

    Attributes
    ----------
    id : short id used in reports and tables ("G1", "A2a", ...)
    name : command-line name ("geometric", "associative-width", ...)
    result : the paper result (or baseline) it implements
    build : ``build(task, k, *, rng, **options) -> Construction``; options are ``codes``, ``D``, ``lam`` and
        those in ``options``. None when ``family`` is given: it is then ``family_build(family)``, the family
        assembled on the task (``assemble(family(N, R, k, ...), task)``), and nothing else (a build given
        beside a family is not trusted to be it: certify then treats the spec as a builder of tasks); read
        it as ``builder``, the same callable typed as never None
    family : ``family(N, R, k, *, attributes, rng, **options) -> Family``: the construction's task-free part
        (``constructions.encoding.Family``), built without a task. With it, ``check`` builds and ``certify``
        proves the same object ``F ⊕ enc(π)`` and certify can say CERTIFIED; a spec with only a ``build``
        (which takes the task) is never CERTIFIED, only its family as built on one task
    nominal_promise : ``(N, R, k) -> Promise`` at binary codes and default constants (sizes for tables)
    hops : "single" (k = 1 only) or "multi" (any k >= 1)
    decoding : "last" (argmax at the last position) or "greedy" (chain-of-thought decoding of k tokens)
    bound : the lower bound that governs a model of its kind (one of ``BOUNDS``)
    options : builder options beyond the common ones (``gate``, ``beta``, ``attention``, ``gain``,
        ``integer``, each declared in :data:`~.builder_options.BUILDER_OPTIONS`, or its own)
    variants : task variants it supports beyond shared attributes ("disjoint", "symmetric")
    verify_cases : keyword sets (N, R, k, codes, D, options...) that ``georecall verify`` checks
    facts_in : where the facts live: "embeddings" (the bounds count them through d) or "mlp" (they are P0, the
        fact-specific parameters besides embeddings, and a bound on d alone is vacuous)
    readout : how the built model stores its read-out, for the memory estimate: "code"
        (``parts.code_readout``: the D code coordinates, plus R relation tags for disjoint attributes, stored
        compactly) or "dense" (``(n_out, d)``; the default, never an underestimate)
    bits : the bits-per-parameter claim (:class:`BitsClaim`) that ``verify`` checks, or None: then the
        construction is listed as "not covered" by the bits and bounds rows (never silently dropped)
    common : which of the common options (``COMMON_OPTIONS``: ``codes``, ``D``, ``lam``) its builder takes
        (default all three); one it does not take is refused when given, and never passed when not given
    task_encoding : how the task enters the built model (``constructions.encoding.TaskEncoding``), for
        ``georecall certify``; None: not declared (certify then answers UNKNOWN and says why)
    codes : the codebook kind its builder uses when none is asked (one of ``codes.CODE_KINDS``; "binary"
        for the built-ins), or None: its codes are its own (a builder that does not take ``codes``, e.g.
        one-hot codes by definition), never assumed to be binary. A spec whose ``common`` leaves out
        ``codes`` has None
    own_options : the declarations (:class:`~.builder_options.BuilderOption`) of builder options of its
        own, not in :data:`~.builder_options.BUILDER_OPTIONS`; their names join ``options``, and the command
        line offers them on its commands that build a construction of these hops
    """

    id: str
    name: str
    result: str
    build: Callable[..., Construction] | None
    nominal_promise: Callable[[int, int, int], Promise]
    hops: Literal["single", "multi"] = "single"
    decoding: Literal["last", "greedy"] = "last"
    bound: str = "total_information"
    options: frozenset[str] = frozenset()
    variants: frozenset[str] = frozenset()
    verify_cases: tuple[dict, ...] = field(default_factory=tuple)
    facts_in: Literal["embeddings", "mlp"] = "embeddings"
    readout: Literal["code", "dense"] = "dense"
    bits: BitsClaim | None = None
    common: frozenset[str] = COMMON_OPTIONS
    task_encoding: TaskEncoding | None = None
    family: Callable[..., Family] | None = None
    codes: str | None = "binary"
    own_options: tuple[BuilderOption, ...] = ()

    def __post_init__(self) -> None:
        if self.family is not None:
            if not callable(self.family):
                raise InputError(f"spec {self.id}: family must be a callable")
            if self.task_encoding is None:
                raise InputError(f"spec {self.id}: a family declares its task_encoding")
            if self.build is None:  # (a build given beside it, e.g. a wrapped one, is not the family's:
                # certify then treats the spec as a builder of tasks: ``assembles_family``)
                object.__setattr__(self, "build", family_build(self.family))
        elif self.build is None:
            raise InputError(f"spec {self.id}: give a build (taking the task) or a family (never seeing it)")
        if self.hops not in ("single", "multi"):
            raise InputError(f"spec {self.id}: hops must be 'single' or 'multi', got {self.hops!r}")
        if self.decoding not in ("last", "greedy"):
            raise InputError(f"spec {self.id}: decoding must be 'last' or 'greedy', got {self.decoding!r}")
        if self.facts_in not in ("embeddings", "mlp"):
            raise InputError(f"spec {self.id}: facts_in must be 'embeddings' or 'mlp', got {self.facts_in!r}")
        if self.readout not in ("code", "dense"):
            raise InputError(f"spec {self.id}: readout must be 'code' or 'dense', got {self.readout!r}")
        if self.task_encoding is not None and not isinstance(self.task_encoding, TaskEncoding):
            raise InputError(f"spec {self.id}: task_encoding must be a TaskEncoding or None")
        if self.bound not in BOUNDS:
            raise InputError(f"spec {self.id}: bound must be one of {BOUNDS}, got {self.bound!r}")
        if self.bits is not None and not isinstance(self.bits, BitsClaim):
            raise InputError(f"spec {self.id}: bits must be a BitsClaim or None, "
                             f"got {type(self.bits).__name__}")
        if self.bits is not None and self.hops == "single" and self.bits.k != 1:
            raise InputError(f"spec {self.id}: a single-hop construction's BitsClaim has k = 1, "
                             f"got {self.bits.k}")
        if not set(self.common) <= COMMON_OPTIONS:
            raise InputError(f"spec {self.id}: common options are a subset of {sorted(COMMON_OPTIONS)}, got "
                             f"{sorted(self.common)}")
        object.__setattr__(self, "common", frozenset(self.common))
        if "codes" not in self.common:  # a builder without a codes option uses codes of its own
            object.__setattr__(self, "codes", None)
        elif self.codes not in CODE_KINDS:
            raise InputError(f"spec {self.id}: codes must be one of {sorted(CODE_KINDS)} (the kind its "
                             f"builder uses when none is asked), got {self.codes!r}")
        object.__setattr__(self, "own_options", tuple(self.own_options))
        for option in self.own_options:
            if not isinstance(option, BuilderOption):
                raise InputError(f"spec {self.id}: own_options are BuilderOption declarations, got "
                                 f"{type(option).__name__}")
            if option.name in BUILDER_OPTIONS or option.name in COMMON_OPTIONS:
                raise InputError(f"spec {self.id}: option {option.name!r} is declared in BUILDER_OPTIONS: "
                                 "list it in options, declare only options of its own")
        if len({option.name for option in self.own_options}) != len(self.own_options):
            raise InputError(f"spec {self.id}: own_options declares an option twice")
        object.__setattr__(self, "options", frozenset(self.options)
                           | {option.name for option in self.own_options})
        object.__setattr__(self, "variants", frozenset(self.variants))

    @property
    def label(self) -> str:
        """The spec's id and name, as tables show it: ``"G1 (geometric)"``."""
        return f"{self.id} ({self.name})"

    @property
    def builder(self) -> Callable[..., Construction]:
        """``build``, typed as never None: ``__post_init__`` derives it from ``family`` when it is not given.

        Raises
        ------
        InputError
            If the spec has no build (only when ``build`` was reset to None after construction).
        """
        if self.build is None:
            raise InputError(f"spec {self.id}: give a build (taking the task) or a family (never seeing it)")
        return self.build

    @property
    def assembles_family(self) -> bool:
        """Whether ``build`` is exactly ``family_build(family)``: then ``check`` builds the family certify
        proves, and certify may say CERTIFIED. Decided from the build's structure (:func:`assembled_family`),
        never from an attribute a caller can set."""
        return self.family is not None and assembled_family(self.build) is self.family

    def accepts(self) -> frozenset[str]:
        """Every builder option this construction takes: the common ones it declares, and its own."""
        return self.common | self.options


_REGISTRY: dict[str, ConstructionSpec] = {}
# The built-in constructions' ids (set after they register): a user's spec never takes one, nor their names.
BUILTIN_IDS: frozenset[str] = frozenset()


def register(spec: ConstructionSpec, *, replace: bool = False) -> ConstructionSpec:
    """Add a spec. Its id and name must be new (unless ``replace``) and must not collide with another
    spec's; a built-in construction's id or name is never taken over, even with ``replace``.

    Parameters
    ----------
    spec : ConstructionSpec
        The spec.
    replace : bool
        Allow replacing a registered (not built-in) spec of the same id.

    Returns
    -------
    ConstructionSpec
        ``spec``.

    Raises
    ------
    InputError
        Not a spec, an id or name that is not a non-empty string, or a collision.
    """
    if not isinstance(spec, ConstructionSpec):
        raise InputError(f"register() takes a ConstructionSpec, got {type(spec).__name__}")
    for what, value in (("id", spec.id), ("name", spec.name)):
        if not isinstance(value, str) or not value.strip() or ":" in value:
            raise InputError(f"a construction's {what} must be a non-empty string without ':', got {value!r}")
    for other in _REGISTRY.values():
        same = {spec.id.lower(), spec.name.lower()} & {other.id.lower(), other.name.lower()}
        if not same or other is spec:
            continue
        if other.id in BUILTIN_IDS:
            raise InputError(f"construction {spec.label} collides with the built-in {other.label} on "
                             f"{sorted(same)}: a built-in is never shadowed; give yours its own id and name")
        if not (replace and other.id == spec.id):
            raise InputError(
                f"construction {spec.label} collides with registered {other.label} on {sorted(same)}"
            )
    _REGISTRY[spec.id] = spec
    return spec


def unregister(spec_id: str) -> None:
    """Remove a registered spec (tests and notebooks).

    Nothing guards the built-in constructions: ``unregister("G1")`` removes G1 for the rest of the process.

    Parameters
    ----------
    spec_id : str
        The spec's id, exactly as registered (case-sensitive; a command-line name is not looked up).

    Returns
    -------
    None
        An id that is not registered is ignored (no error).
    """
    _REGISTRY.pop(spec_id, None)


def specs(hops: str | None = None) -> list[ConstructionSpec]:
    """Registered specs in registration order, optionally only single- or multi-hop ones.

    Parameters
    ----------
    hops : {"single", "multi"} or None
        Keep only specs whose ``hops`` equals this; None keeps all. Any other value is not refused: it
        matches no spec (an empty list).

    Returns
    -------
    list of ConstructionSpec
        A new list, in registration order (the six built-ins register when this module is imported).
    """
    return [s for s in _REGISTRY.values() if hops is None or s.hops == hops]


def builder_option(name: str, hops: str | None = None) -> BuilderOption | None:
    """The declaration of builder option ``name``: the shared one
    (:data:`~.builder_options.BUILDER_OPTIONS`), else the first registered spec's (of ``hops``, when given)
    that declares it in ``own_options``.

    Parameters
    ----------
    name : str
        The builder's keyword.
    hops : {"single", "multi"} or None
        Look only at specs of these hops for an option of their own (None: every spec).

    Returns
    -------
    BuilderOption or None
        None when nothing declares it (an option a builder takes in Python only, named as it is).
    """
    if name in BUILDER_OPTIONS:
        return BUILDER_OPTIONS[name]
    for spec in specs(hops):
        for option in spec.own_options:
            if option.name == name:
                return option
    return None


def option_text(names, spec: ConstructionSpec | None = None) -> str:
    """Builder options as a message names them, sorted: each declaration's ``what`` (``"code kind
    (--codes)"``), or the bare name of an option nothing declares.

    Parameters
    ----------
    names : iterable of str
        Builder keywords.
    spec : ConstructionSpec, optional
        A spec whose own options are looked up first (it need not be registered).

    Returns
    -------
    str
        Comma-separated.
    """
    own = {option.name: option for option in (spec.own_options if spec is not None else ())}

    def named(name: str) -> str:
        declared = own.get(name) or builder_option(name)
        return name if declared is None else declared.what

    return ", ".join(sorted(named(name) for name in names))


def get(key: str) -> ConstructionSpec:
    """The spec whose id or name is ``key`` (case-insensitive); else ``InputError`` listing the choices.

    Registered specs only: ``MODULE:ATTR`` is :func:`resolve`'s, not this function's.

    Parameters
    ----------
    key : str
        An id ("G1") or command-line name ("geometric"), in any case.

    Returns
    -------
    ConstructionSpec
        The first registered spec (in registration order) whose id or name matches.

    Raises
    ------
    InputError
        No registered spec has that id or name (the message lists the registered ones).
    """
    for spec in _REGISTRY.values():
        if key.lower() in (spec.id.lower(), spec.name.lower()):
            return spec
    choices = ", ".join(s.label for s in _REGISTRY.values())
    raise InputError(f"no construction {key!r}; registered: {choices} (or MODULE:ATTR for your own)")


def _user_error(what: str, exc: BaseException) -> UserCodeError:
    text = usercode.describe(exc)  # under the limits: a __str__ that raises or loops gives a fallback
    error = UserCodeError(f"your construction {what} raised {type(exc).__name__}"
                          + (f": {text}" if text else ""))
    error.__cause__ = exc
    return error


def _sizes(N=None, R=None) -> Task | None:
    """(N, R) as :func:`usercode.require_model_fits` reads them (for the number of queries), if whole."""
    if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 1 for x in (N, R)):
        return types.SimpleNamespace(N=int(N), R=int(R))  # type: ignore[return-value]
    return None


def _guarded(spec: ConstructionSpec) -> ConstructionSpec:
    """A user's spec whose builder and promise are watched: their exceptions become :class:`UserCodeError`
    (``InputError``, and so ``ConditionError``, pass through: a refusal is a refusal), and what they return is
    checked (a :class:`Construction` holding a Model and a Promise; a Promise with whole sizes). The copy
    keeps the user's spec as ``user_spec``."""
    build, nominal = spec.build, spec.nominal_promise
    if not callable(build) or not callable(nominal):
        raise InputError(f"construction {spec.label}: build and nominal_promise must be callables")

    def promise_ok(promise, where: str) -> Promise:
        if not isinstance(promise, Promise):
            raise UserCodeError(f"your construction {spec.label}'s {where} is a {type(promise).__name__}, "
                                "not a Promise")
        for name in ("d", "m", "params"):
            value = getattr(promise, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise UserCodeError(f"your construction {spec.label}'s {where} has {name} = {value!r}, not a "
                                    "whole number >= 0")
        return promise

    @functools.wraps(build)  # the user's function stays reachable: inspect.unwrap(spec.build)
    def guarded_build(*args, **kwargs) -> Construction:
        try:
            with usercode.limited(f"your construction {spec.label}'s builder"):  # time, memory, BaseException
                result = build(*args, **kwargs)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's code: reported as theirs
            raise _user_error(f"{spec.label}'s builder", exc) from exc
        if not isinstance(result, Construction):
            raise UserCodeError(f"your construction {spec.label}'s builder returned a "
                                f"{type(result).__name__}, not a Construction")
        if not isinstance(result.model, Model):
            raise UserCodeError(f"your construction {spec.label}'s builder returned a Construction whose "
                                f"model is a {type(result.model).__name__}, not a Model")
        promise_ok(result.promise, "builder's promise")
        usercode.require_model_fits(result.model, f"your construction {spec.label}'s builder", *args[:2])
        return result

    @functools.wraps(nominal)
    def guarded_nominal(*args, **kwargs) -> Promise:
        try:
            with usercode.limited(f"your construction {spec.label}'s nominal_promise"):
                promise = nominal(*args, **kwargs)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's code
            raise _user_error(f"{spec.label}'s nominal_promise", exc) from exc
        return promise_ok(promise, "nominal_promise")

    family = spec.family
    if family is not None and spec.assembles_family:  # (assembles_family implies a family)

        @functools.wraps(family)
        def guarded_family(*args, **kwargs) -> Family:
            try:  # the same containment as a builder: time, memory, BaseException, streams
                with usercode.limited(f"your construction {spec.label}'s family"):
                    result = family(*args, **kwargs)
            except InputError:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's code
                raise _user_error(f"{spec.label}'s family", exc) from exc
            if not isinstance(result, Family):
                raise UserCodeError(f"your construction {spec.label}'s family returned a "
                                    f"{type(result).__name__}, not a Family")
            if not isinstance(result.model, Model):
                raise UserCodeError(f"your construction {spec.label}'s family returned a Family whose model "
                                    f"is a {type(result.model).__name__}, not a Model")
            promise_ok(result.promise, "family's promise")
            usercode.require_model_fits(result.model, f"your construction {spec.label}'s family",
                                        _sizes(*args[:2]), args[2] if len(args) > 2 else kwargs.get("k", 1))
            return result

        guarded = dataclasses.replace(spec, build=None, family=guarded_family,
                                      nominal_promise=guarded_nominal)
    else:
        guarded = dataclasses.replace(spec, build=guarded_build, nominal_promise=guarded_nominal)
    object.__setattr__(guarded, "user_spec", spec)  # the spec as the user's module defines it
    return guarded


_GUARDED: dict[int, tuple[ConstructionSpec, ConstructionSpec]] = {}  # id(user spec) -> (it, its guarded form)
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _load_file(where: str, key: str):
    if not os.path.isfile(where):
        raise InputError(f"no such file {where!r} for construction {key!r}")
    name = "georecall_user_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(where))[0])
    module_spec = importlib.util.spec_from_file_location(name, where)
    if module_spec is None or module_spec.loader is None:
        raise InputError(f"cannot load {where!r} as a Python module for construction {key!r}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def resolve(key: str) -> ConstructionSpec:
    """A registered id/name, or ``module:ATTR`` / ``path/to/file.py:ATTR`` naming a ConstructionSpec to import
    (the current directory is importable, as with ``python -m``); an imported spec is registered, with its
    builder and promise guarded (:class:`~georecall.errors.UserCodeError` when they raise or return something
    else than a Construction / Promise). A user's spec may not take a built-in id or name.

    Parameters
    ----------
    key : str
        ``NAME``, ``ID``, ``MODULE:ATTR`` or ``FILE.py:ATTR``.

    Returns
    -------
    ConstructionSpec
        The registered spec (for a user's spec: its guarded form).

    Raises
    ------
    InputError
        Unknown name, a malformed or relative module path, a missing file, a syntax error, a missing
        attribute, not a ConstructionSpec, or a collision with another construction.
    UserCodeError
        The user's module raised while being imported.
    """
    if not isinstance(key, str) or not key.strip():
        raise InputError(f"--construction needs a name or MODULE:ATTR, got {key!r}")
    if ":" not in key:
        return get(key)
    where, _, attr = key.rpartition(":")
    if not attr.isidentifier():
        raise InputError(f"construction {key!r}: after ':' give the name of a ConstructionSpec (an "
                         f"identifier), got {attr!r}")
    is_file = where.endswith(".py")
    if not is_file and not _MODULE.match(where):
        raise InputError(f"construction {key!r}: {where!r} is neither a FILE.py nor an absolute module name "
                         "(a.b.c; relative names like .x are not accepted)")
    try:
        with usercode.limited(f"your construction's module {where!r}"):  # time, memory, BaseException
            if is_file:
                module = _load_file(where, key)
            else:
                if os.getcwd() not in sys.path and "" not in sys.path:
                    sys.path.insert(0, os.getcwd())
                module = importlib.import_module(where)
    except SyntaxError as exc:
        raise InputError(f"construction {key!r}: syntax error in {exc.filename or where!r} line "
                         f"{exc.lineno}: {exc.msg}") from None
    except ImportError as exc:
        raise InputError(f"cannot import {where!r} for construction {key!r}: {' '.join(str(exc).split())}") \
            from None
    except InputError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's module ran and raised
        raise _user_error(f"module {where!r}", exc) from exc
    if not hasattr(module, attr):
        raise InputError(f"construction {key!r}: module {where!r} has no attribute {attr!r}")
    spec = getattr(module, attr)
    if not isinstance(spec, ConstructionSpec):
        raise InputError(f"{key!r} is not a ConstructionSpec (got {type(spec).__name__})")
    if any(spec is builtin for builtin in _REGISTRY.values() if builtin.id in BUILTIN_IDS):
        return spec
    known = _GUARDED.get(id(spec))
    if known is not None and known[0] is spec and _REGISTRY.get(known[1].id) is known[1]:
        return known[1]
    guarded = _guarded(spec)
    existing = _REGISTRY.get(spec.id)
    register(guarded, replace=existing is not None and existing.id not in BUILTIN_IDS
             and existing.name == spec.name)
    _GUARDED[id(spec)] = (spec, guarded)
    return guarded


# ------------------------------------------------------------------------------------------ the six built in


def single_hop_build(builder: Callable[..., Construction]) -> Callable[..., Construction]:
    """Adapt a single-hop builder ``builder(task, codes, **options)`` to the one spec signature
    ``build(task, k=1, **options)``, where ``codes`` (default ``"binary"``) is taken out of the keyword
    options and passed to ``builder`` positionally; every other option (``rng``, ``D``, ...) is passed on
    unchanged.

    Parameters
    ----------
    builder : callable
        ``builder(task, codes, **options) -> Construction``.

    Returns
    -------
    callable
        ``build(task, k=1, **options) -> Construction``, carrying ``builder``'s docstring (not its name).

    Raises
    ------
    InputError
        Not raised here; the returned function raises it when called with ``k != 1`` (before calling
        ``builder``), and passes on whatever ``builder`` raises.
    """
    def build(task: Task, k: int = 1, **options) -> Construction:
        if k != 1:
            raise InputError(f"{builder.__name__} answers single-hop queries only (k = 1), got k = {k}")
        codes = options.pop("codes", "binary")
        return builder(task, codes, **options)

    build.__doc__ = builder.__doc__
    return build


def multi_hop_build(builder: Callable[..., Construction]) -> Callable[..., Construction]:
    """Adapt a k-hop builder ``builder(task, k, codes, **options)`` to the one spec signature
    ``build(task, k=1, **options)``, where ``codes`` (default ``"binary"``) is taken out of the keyword
    options and passed to ``builder`` positionally; every other option is passed on unchanged.

    Parameters
    ----------
    builder : callable
        ``builder(task, k, codes, **options) -> Construction``.

    Returns
    -------
    callable
        ``build(task, k=1, **options) -> Construction``, carrying ``builder``'s docstring (not its name).
        It does not check ``k`` itself: whatever ``builder`` raises for a bad ``k`` (or anything else)
        passes through.
    """
    def build(task: Task, k: int = 1, **options) -> Construction:
        codes = options.pop("codes", "binary")
        return builder(task, k, codes, **options)

    build.__doc__ = builder.__doc__
    return build


def family_build(family: Callable[..., Family]) -> Callable[..., Construction]:
    """The one spec signature ``build(task, k=1, **options)`` for a family: ``assemble(family(task.N, task.R,
    k, attributes=task.attributes, **options), task)``, i.e. ``F ⊕ enc(π)`` (``single_hop.assemble``).

    Parameters
    ----------
    family : callable
        ``family(N, R, k, *, attributes, **options) -> Family``.

    Returns
    -------
    callable
        ``build(task, k=1, **options) -> Construction``.
    """
    def build(task: Task, k: int = 1, **options) -> Construction:
        return assemble(family(task.N, task.R, k, attributes=task.attributes, **options), task)

    build.__doc__ = family.__doc__
    build.assembles = family  # type: ignore[attr-defined]  # a mark, read by assembles_family
    return build


_FAMILY_BUILD_CODE = family_build(lambda *args, **kwargs: None).__code__  # type: ignore[arg-type]


def assembled_family(build) -> Callable[..., Family] | None:
    """The family that ``build`` assembles, when ``build`` is one that :func:`family_build` made: a plain
    function with its code, this module's globals, its defaults and one closure cell (the family). Read from
    that structure only (the ``assembles`` attribute is informative and never read: anyone can set it).

    Parameters
    ----------
    build : object
        A spec's build.

    Returns
    -------
    callable or None
        The family in the closure, or None when ``build`` is not such a function.
    """
    if type(build) is not types.FunctionType or build.__code__ is not _FAMILY_BUILD_CODE:
        return None
    if build.__globals__ is not globals() or build.__defaults__ != (1,) or build.__kwdefaults__:
        return None
    cells = build.__closure__
    if cells is None or len(cells) != 1:
        return None
    try:
        return cells[0].cell_contents
    except ValueError:  # an empty cell
        return None


def encoding_contradiction(spec: ConstructionSpec, family: Family) -> str:
    """Whether a family built for ``spec`` declares the spec's own task encoding: ``""`` when it does, else
    the refusal's wording (``check`` and ``certify`` refuse such a spec: the task enters the model as the
    family says, while ``certify`` argues from the spec's declaration).

    Parameters
    ----------
    spec : ConstructionSpec
    family : Family
        What ``spec.family`` returned.

    Returns
    -------
    str
        ``""``, or ``"<label>: its family declares {...}, the spec {...}"``.
    """
    if family.encoding == spec.task_encoding:
        return ""
    declared = None if spec.task_encoding is None else spec.task_encoding.as_dict()
    return f"{spec.label}: its family declares {family.encoding.as_dict()}, the spec {declared}"


def single_hop_family(fn: Callable[..., Family], construction: str | None = None) -> Callable[..., Family]:
    """Adapt ``fn(N, R, codes, **options)`` to the family signature ``family(N, R, k=1, **options)``
    (``codes``, default ``"binary"``, passed positionally; ``k`` must be 1).

    Parameters
    ----------
    fn : callable
        The module's family function.
    construction : str or None
        The id of the spec it serves, passed to ``fn`` as ``construction=`` (its promise, refusals and model
        metadata then name it); None: ``fn``'s own default (a built-in's id).

    Returns
    -------
    callable
    """
    def family(N: int, R: int, k: int = 1, **options) -> Family:
        if k != 1:
            raise InputError(f"{fn.__name__} answers single-hop queries only (k = 1), got k = {k}")
        codes = options.pop("codes", "binary")
        if construction is not None:
            options["construction"] = construction
        return fn(N, R, codes, **options)

    family.__doc__ = fn.__doc__
    return family


def multi_hop_family(fn: Callable[..., Family], construction: str | None = None) -> Callable[..., Family]:
    """Adapt ``fn(N, R, k, codes, **options)`` to the family signature ``family(N, R, k=1, **options)``
    (``codes``, default ``"binary"``, passed positionally).

    Parameters
    ----------
    fn : callable
        The module's family function.
    construction : str or None
        The id of the spec it serves, passed to ``fn`` as ``construction=`` (its promise, refusals and model
        metadata then name it); None: ``fn``'s own default (a built-in's id).

    Returns
    -------
    callable
    """
    def family(N: int, R: int, k: int = 1, **options) -> Family:
        codes = options.pop("codes", "binary")
        if construction is not None:
            options["construction"] = construction
        return fn(N, R, k, codes, **options)

    family.__doc__ = fn.__doc__
    return family


_MULTI = frozenset({"gate", "beta", "attention"})
register(
    ConstructionSpec(
        "G1",
        "geometric",
        "Theorem 4.1: block superposition + ReLU-gated relation selector",
        None,
        g1_nominal_promise,
        options=frozenset({"gate", "gain", "integer"}),
        variants=frozenset({"disjoint", "symmetric"}),
        verify_cases=(
            {"N": 4096, "R": 16, "compare_integer": True},
            {"N": 512, "R": 8, "codes": "sign", "D": 48},
            {"N": 512, "R": 8, "codes": "gaussian", "D": 48},
        ),
        readout="code",
        bits=BitsClaim(1024, 8, needed=2, table=2, per_parameter=1),
        task_encoding=G1_ENCODING,
        family=single_hop_family(g1_family),
    )
)
register(
    ConstructionSpec(
        "A1",
        "associative",
        "associative-memory baseline: one MLP unit per fact",
        None,
        a1_nominal_promise,
        options=frozenset({"gain", "integer"}),
        variants=frozenset({"disjoint", "symmetric"}),
        verify_cases=({"N": 512, "R": 8, "integer": True}, {"N": 256, "R": 4, "codes": "sign"}),
        facts_in="mlp",
        readout="code",
        bits=BitsClaim(256, 4, needed=3),
        task_encoding=A1_ENCODING,
        family=single_hop_family(a1_family),
    )
)
register(
    ConstructionSpec(
        "G2",
        "path-blocks",
        "k hops without CoT in one layer: one block per relation path",
        None,
        g2_nominal_promise,
        hops="multi",
        bound="tradeoff",
        options=_MULTI,
        verify_cases=({"N": 1024, "R": 3, "k": 3}, {"N": 256, "R": 3, "k": 2, "attention": "hard"}),
        readout="code",
        bits=BitsClaim(256, 3, 2, needed=2, table=2, per_parameter=1),
        task_encoding=G2_ENCODING,
        family=multi_hop_family(g2_family),
    )
)
register(
    ConstructionSpec(
        "A2a",
        "associative-width",
        "k hops without CoT in one layer: one MLP unit per k-hop fact",
        None,
        a2_width_nominal_promise,
        hops="multi",
        bound="tradeoff",
        options=_MULTI,
        verify_cases=({"N": 64, "R": 3, "k": 2},),
        facts_in="mlp",
        readout="code",
        bits=BitsClaim(64, 2, 2, needed=4),
        task_encoding=A2A_ENCODING,
        family=multi_hop_family(a2_width_family),
    )
)
register(
    ConstructionSpec(
        "A2b",
        "associative-depth",
        "k hops without CoT in k layers: one associative MLP of width 2·N·R, shared",
        None,
        a2_depth_nominal_promise,
        hops="multi",
        bound="tradeoff",
        options=_MULTI - {"gate"},
        verify_cases=({"N": 256, "R": 3, "k": 3},),
        facts_in="mlp",
        readout="code",
        bits=BitsClaim(64, 2, 2, needed=7),
        task_encoding=A2B_ENCODING,
        family=multi_hop_family(a2_depth_family),
    )
)
register(
    ConstructionSpec(
        "C1",
        "cot",
        "k hops with chain-of-thought in one layer: the G1 selector at every generated token",
        None,
        c1_nominal_promise,
        hops="multi",
        decoding="greedy",
        bound="chain_of_thought",
        options=_MULTI,
        verify_cases=({"N": 1024, "R": 4, "k": 3},),
        readout="code",
        bits=BitsClaim(256, 3, 3, needed=2, table=2, per_parameter=1),
        task_encoding=C1_ENCODING,
        family=multi_hop_family(c1_family),
    )
)
BUILTIN_IDS = frozenset(_REGISTRY)
