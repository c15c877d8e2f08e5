"""Private means private: no georecall module uses an underscored name of another georecall module.

A name with a leading underscore (not a dunder) belongs to the module that defines it. Another module may
neither import it (``from georecall.x import _name``, relative or absolute, at any depth) nor reach it through
a module it imported (``x._name``, ``getattr(x, "_name")`` with a literal name). A helper that several modules
need is public in the module that owns it: no underscore, a docstring, a place in ``__all__``.

Read with ``ast`` from the installed package's sources, as ``tests/test_layering.py`` reads them; a source
that does not parse fails the test (nothing is skipped)."""

from __future__ import annotations

import ast
import pathlib

import georecall


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute module name of a (possibly relative) ``from ... import``."""
    name = node.module or ""
    if not node.level:
        return name
    package = module if module.endswith("__init__") else module.rsplit(".", 1)[0]
    parts = package.removesuffix(".__init__").split(".")
    parts = parts[: len(parts) - node.level + 1]
    return ".".join(parts + ([name] if name else []))


def private_uses(source: str, module: str, known: set[str]) -> list[str]:
    """``module:line name`` for every underscored name of another georecall module that ``source`` (the text
    of ``module``) imports or reaches through an imported module.

    Parameters
    ----------
    source : str
        The module's text.
    module : str
        Its dotted name (``georecall.cli.parser``).
    known : set of str
        The dotted names of every georecall module (to tell ``from package import module`` from a name).
    """
    tree = ast.parse(source)  # a SyntaxError fails the test: no file is skipped
    found: list[str] = []
    modules_bound: dict[str, str] = {}  # a local name bound to a georecall module -> that module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            origin = _resolve(module, node)
            if not origin.startswith("georecall"):
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{module}:{node.lineno} {origin}.{alias.name}")
                elif f"{origin}.{alias.name}" in known:
                    modules_bound[alias.asname or alias.name] = f"{origin}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("georecall"):
                    if any(_private(part) for part in alias.name.split(".")):
                        found.append(f"{module}:{node.lineno} {alias.name}")
                    if alias.asname:
                        modules_bound[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            target = _dotted(node.value)
            owner = modules_bound.get(target or "") or (target if target in known else None)
            if owner is not None and owner != module:
                found.append(f"{module}:{node.lineno} {owner}.{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _private(node.args[1].value)):
            target = _dotted(node.args[0])
            owner = modules_bound.get(target or "") or (target if target in known else None)
            if owner is not None and owner != module:
                found.append(f"{module}:{node.lineno} {owner}.{node.args[1].value}")
    return sorted(set(found))


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def installed_sources() -> dict[str, str]:
    """Every module of the installed package, by dotted name (an editable install's folders included)."""
    modules = {}
    folders = [("georecall", pathlib.Path(georecall.__file__).parent)]
    for sub in ("theory", "constructions", "bounds", "verify"):
        package = __import__(f"georecall.{sub}", fromlist=["_"])
        folders.append((f"georecall.{sub}", pathlib.Path(package.__file__).parent))
    for prefix, folder in folders:
        for path in folder.rglob("*.py"):
            name = ".".join((prefix, *path.relative_to(folder).with_suffix("").parts))
            modules[name.removesuffix(".__init__")] = path.read_text()
    return modules


MODULES = installed_sources()


def all_private_uses(modules: dict[str, str]) -> list[str]:
    known = set(modules)
    return [use for module, source in sorted(modules.items()) for use in private_uses(source, module, known)]


def test_no_module_uses_another_modules_private_names():
    assert len(MODULES) > 100 and "georecall.cli.options" in MODULES
    assert all_private_uses(MODULES) == []


def test_planted_private_imports_in_the_real_tree_are_caught():
    """The real sources plus a temporary module using private names in each way the test knows."""
    planted = {**MODULES, "georecall.cli.planted": (
        "from georecall.cli.options import Parser, _Formatter\n"
        "from . import options\n"
        "import georecall.constructions.arithmetic as arithmetic\n"
        "def f():\n"
        "    from ..verify.checking.run import _not_there  # relative, at function level\n"
        "    getattr(arithmetic, '_Rounding')\n"
        "    return options._shown(1), georecall.theory.tasks._hidden\n")}
    assert all_private_uses(planted) == [
        "georecall.cli.planted:1 georecall.cli.options._Formatter",
        "georecall.cli.planted:5 georecall.verify.checking.run._not_there",
        "georecall.cli.planted:6 georecall.constructions.arithmetic._Rounding",
        "georecall.cli.planted:7 georecall.cli.options._shown",
        "georecall.cli.planted:7 georecall.theory.tasks._hidden",
    ]


def test_public_names_dunders_and_a_modules_own_privates_pass():
    source = ("from georecall.theory.tasks import as_rng, __all__\n"
              "import georecall.theory.tasks as tasks\n"
              "_mine = 1\n"
              "def f(self):\n"
              "    return tasks.__name__, self._own, _mine\n")
    assert private_uses(source, "georecall.x", {"georecall.theory.tasks"}) == []
