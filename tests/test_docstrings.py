"""Every public name of georecall has a docstring, and every public function that takes parameters describes
them in a NumPy-style ``Parameters`` section (the standard CONTRIBUTING.md sets).

Public means: a module-level function or class whose name has no leading underscore and, when its module
has a literal ``__all__``, is listed there (a computed one, as ``georecall/__init__.py``'s, counts as none:
every name without an underscore is checked). Parameters are the function's arguments other than ``self``
and ``cls`` (positional, keyword-only, ``*args`` and ``**kwargs``); a ``@typing.overload`` signature needs
neither. A decorated function without a docstring in its source is looked up once imported: a decorator
may write it (``constructions/docstring_templates.py`` does, for the six ``build_*`` and
``*_nominal_promise``), and the runtime text is what users and the docs site read. The sources are read with
``ast`` from the installed package, as ``tests/test_private_names.py``
reads them (an editable install's folders included); a source that does not parse fails the test (nothing
is skipped).

Inside a public class, every method and property whose name has no leading underscore is held to the same
rule: a docstring, and a ``Parameters`` section when it takes parameters other than ``self``/``cls``. Exempt,
and only these:

- a property's setter or deleter (``@x.setter``, ``@x.deleter``): the property's one docstring is the
  getter's, and ``help`` and the docs site show only that one;
- a ``@typing.overload`` signature, as for functions;
- a method without a docstring in its source that overrides a documented method of a base class *outside*
  georecall (``Parser.error`` of ``georecall.cli.options``, an ``argparse.ArgumentParser``): looked up
  once imported, as :func:`inspect.getdoc` does (a module that does not import, an extra's without the
  extra, gets no exemption); that library's docstring states the contract the override
  keeps, it is what ``help`` and the docs site show, and its wording (Parameters or not) is not ours to
  write. An override of a georecall base method is not exempt: it does something of its own (a training
  callback's ``on_step`` stops, prints or records) and says what;
- dunder methods and what ``dataclass``, ``NamedTuple`` or ``Enum`` generate: their names begin with an
  underscore, or they are not in the source at all."""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
import sys
import types

from test_private_names import installed_sources  # a sibling test module (pytest imports by rootdir)

MODULES = installed_sources()

# A NumPy section heading: the word on its own line, underlined with dashes on the next.
_PARAMETERS = re.compile(r"^\s*Parameters\s*\n\s*-{3,}\s*$", re.MULTILINE)


def _declared_all(tree: ast.Module) -> set[str] | None:
    """The names a module's literal ``__all__`` lists, or None when it has none (or not a literal one)."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            try:
                return set(ast.literal_eval(value))
            except ValueError:
                return None
    return None


def _is_overload(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any((isinstance(d, ast.Name) and d.id == "overload")
               or (isinstance(d, ast.Attribute) and d.attr == "overload") for d in node.decorator_list)


def _runtime_docstring(module: str, name: str) -> str | None:
    """``module.name``'s docstring once imported (what a decorator made of it), or None when the module
    does not import (a planted source) or has no such name."""
    try:
        return inspect.getdoc(getattr(importlib.import_module(module), name))
    except (ImportError, AttributeError):
        return None


def _is_setter(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter") for d in node.decorator_list)


def _documented_outside(module: str, class_name: str, name: str) -> bool:
    """Whether ``module.class_name.name``, once imported, overrides a documented method of a base class
    outside georecall (the nearest base defining ``name``, as :func:`inspect.getdoc` searches); False when
    the module does not import (a planted source) or the nearest definition is georecall's."""
    try:
        cls = getattr(importlib.import_module(module), class_name)
    except (ImportError, AttributeError):
        return False
    for base in inspect.getmro(cls)[1:]:
        if name in vars(base):
            return base.__module__.partition(".")[0] != "georecall" and bool(inspect.getdoc(vars(base)[name]))
    return False


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    arguments = node.args
    names = [a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
    names += [a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return [name for name in names if name not in ("self", "cls")]


def _method_problems(cls: ast.ClassDef, module: str) -> list[str]:
    """``module:line Class.method: problem`` for each method and property of the public class ``cls`` held
    to the rule (the module docstring says which are exempt)."""
    found = []
    for node in cls.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("_"):
            continue
        if _is_overload(node) or _is_setter(node):
            continue
        docstring = ast.get_docstring(node)
        where = f"{module}:{node.lineno} {cls.name}.{node.name}"
        if not docstring:
            if not _documented_outside(module, cls.name, node.name):
                found.append(f"{where}: no docstring")
        elif _parameters(node) and not _PARAMETERS.search(docstring):
            found.append(f"{where}: no Parameters section")
    return found


def docstring_problems(source: str, module: str) -> list[str]:
    """``module:line name: problem`` for every public function or class of ``source`` (the text of
    ``module``) without a docstring, every public function with parameters whose docstring has no
    ``Parameters`` section, and the same for the methods and properties of the public classes
    (``module:line Class.method: problem``).

    Parameters
    ----------
    source : str
        The module's text.
    module : str
        Its dotted name (``georecall.cli.common``), used in the messages.

    Returns
    -------
    list of str
        The problems, in the order of the source; empty when there are none.

    Raises
    ------
    SyntaxError
        When ``source`` does not parse.
    """
    tree = ast.parse(source)
    listed = _declared_all(tree)
    found = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if node.name.startswith("_") or (listed is not None and node.name not in listed):
            continue
        if not isinstance(node, ast.ClassDef) and _is_overload(node):
            continue
        docstring = ast.get_docstring(node)
        if not docstring and node.decorator_list:
            docstring = _runtime_docstring(module, node.name)
        where = f"{module}:{node.lineno} {node.name}"
        if not docstring:
            found.append(f"{where}: no docstring")
        elif not isinstance(node, ast.ClassDef) and _parameters(node) and not _PARAMETERS.search(docstring):
            found.append(f"{where}: no Parameters section")
        if isinstance(node, ast.ClassDef):
            found += _method_problems(node, module)
    return found


def all_docstring_problems(modules: dict[str, str]) -> list[str]:
    return [problem for module, source in sorted(modules.items())
            for problem in docstring_problems(source, module)]


def test_every_public_name_has_a_docstring_and_its_parameters():
    assert len(MODULES) > 100 and "georecall.constructions.g1" in MODULES
    assert all_docstring_problems(MODULES) == []


_PLANTED_BAD = '''
__all__ = ["Bare", "bare", "prose", "underlined_wrong", "Methods"]


class Bare:
    pass


def bare(x):
    return x


def prose(x, *, y=1):
    """Returns ``x`` plus ``y``; ``x`` is an int and ``y`` another."""
    return x + y


def underlined_wrong(x):
    """Adds one.

    Parameters: x, an int.
    """
    return x + 1


class Methods:
    """Documented itself; its methods are not."""

    @property
    def size(self):
        return 1

    def bare(self, x):
        return x

    def prose(self, x):
        """Returns ``x`` as is."""
        return x

    @classmethod
    def make(cls, x):
        """A new one from ``x``."""
        return cls()

    @staticmethod
    def helper(self_like):
        """Says nothing about ``self_like``."""
'''

_PLANTED_GOOD = '''
from typing import overload

__all__ = ["Good", "nothing_to_say", "described", "typed"]


class Good:
    """A class needs a docstring, not a Parameters section."""

    def method(self, x):
        """Itself.

        Parameters
        ----------
        x : object
            Returned as is.
        """
        return x

    @property
    def size(self):
        """Its size: one."""
        return 1

    @size.setter
    def size(self, value):
        pass

    @classmethod
    def empty(cls):
        """A new one; ``cls`` is not a parameter to describe."""
        return cls()

    @overload
    def typed(self, x: int) -> int: ...
    def typed(self, x):
        """Itself.

        Parameters
        ----------
        x : object
            Returned as is.
        """
        return x

    def _private(self, x):
        return x

    def __len__(self):
        return 1


def nothing_to_say():
    """No parameters: a summary is enough."""


def described(self, x, *rest, key=0, **more):
    """Adds.

    Parameters
    ----------
    x : int
        The first term.
    *rest : int
        More terms.
    key : int
        Ignored.
    **more
        Ignored.
    """


@overload
def typed(x: int) -> int: ...
def typed(x):
    """Itself.

    Parameters
    ----------
    x : object
        Returned as is.
    """
    return x


def unlisted(x):
    return x


def _private(x):
    return x
'''


def test_a_planted_module_without_docstrings_is_caught_in_the_real_tree():
    planted = {**MODULES, "georecall.cli.planted": _PLANTED_BAD}
    assert all_docstring_problems(planted) == [
        "georecall.cli.planted:5 Bare: no docstring",
        "georecall.cli.planted:9 bare: no docstring",
        "georecall.cli.planted:13 prose: no Parameters section",
        "georecall.cli.planted:18 underlined_wrong: no Parameters section",
        "georecall.cli.planted:30 Methods.size: no docstring",
        "georecall.cli.planted:33 Methods.bare: no docstring",
        "georecall.cli.planted:36 Methods.prose: no Parameters section",
        "georecall.cli.planted:41 Methods.make: no Parameters section",
        "georecall.cli.planted:46 Methods.helper: no Parameters section",
    ]


def test_a_planted_module_with_its_docstrings_passes():
    assert docstring_problems(_PLANTED_GOOD, "georecall.cli.planted") == []


def test_without_all_every_underscore_free_name_is_public():
    source = "def shown(x):\n    return x\n\n\ndef _hidden(x):\n    return x\n"
    assert docstring_problems(source, "georecall.x") == ["georecall.x:1 shown: no docstring"]


def test_a_docstring_written_by_a_decorator_counts_and_a_bare_decorated_function_does_not():
    from georecall.constructions import g1
    from georecall.constructions.g1 import g1_nominal_promise

    source = inspect.getsource(g1)
    assert '@nominal_promise_docstring("G1", g1_promise)' in source  # documented only at run time
    assert "Parameters\n----------" in g1_nominal_promise.__doc__
    assert docstring_problems(source, "georecall.constructions.g1") == []
    planted = "@decorated\ndef bare(x):\n    return x\n"
    assert docstring_problems(planted, "georecall.cli.planted") == [
        "georecall.cli.planted:2 bare: no docstring"]


def test_an_override_is_exempt_only_when_a_base_outside_georecall_documents_it(monkeypatch):
    """An importable module (the exemption is looked up at run time): the override of argparse's documented
    ``error`` passes without a docstring; the override of georecall's documented ``Callback.on_step`` does
    not, nor does a method no base defines."""
    source = (
        "import argparse\n"
        "from georecall.training.train import Callback\n"
        "__all__ = ['Quiet', 'Stop']\n"
        "class Quiet(argparse.ArgumentParser):\n"
        "    \"\"\"A parser.\"\"\"\n"
        "    def error(self, message):\n"
        "        raise SystemExit(2)\n"
        "    def extra(self):\n"
        "        return 0\n"
        "class Stop(Callback):\n"
        "    \"\"\"A callback.\"\"\"\n"
        "    def on_step(self, step, state):\n"
        "        return True\n"
    )
    module = types.ModuleType("georecall.cli.planted_overrides")
    exec(compile(source, module.__name__, "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert inspect.getdoc(module.Quiet.error) == inspect.getdoc(argparse.ArgumentParser.error)
    assert docstring_problems(source, module.__name__) == [
        "georecall.cli.planted_overrides:8 Quiet.extra: no docstring",
        "georecall.cli.planted_overrides:12 Stop.on_step: no docstring",
    ]

