"""Import direction: theory ← constructions ← verify, bounds beside constructions; the shared
infrastructure (``georecall.errors``, ``georecall.io``, ``georecall.memory``) imports none of the four
packages. Read from the installed package's sources with ``ast`` (module-level and function-level imports)."""

from __future__ import annotations

import ast
import pathlib

import pytest

import georecall

# What each layer may import from georecall (beyond itself). ``georecall.testing`` is a user-facing helper
# above everything and may import anything.
ALLOWED = {
    "infrastructure": {"infrastructure"},
    "theory": {"infrastructure", "theory"},
    "constructions": {"infrastructure", "theory", "constructions"},
    "bounds": {"infrastructure", "theory", "constructions", "bounds"},
    "verify": {"infrastructure", "theory", "constructions", "bounds", "verify"},
    "testing": {"infrastructure", "theory", "constructions", "bounds", "verify", "testing"},
}
INFRASTRUCTURE = {"georecall", "georecall.errors", "georecall.io", "georecall.memory"}


def layer_of(module: str) -> str:
    """The layer of a georecall module name (``georecall.verify.checking.check`` → ``verify``)."""
    if module in INFRASTRUCTURE:
        return "infrastructure"
    part = module.split(".")[1]
    return part if part in ALLOWED else "infrastructure"


def georecall_imports(source: str, module: str) -> list[str]:
    """Every georecall module that ``source`` (the text of ``module``) imports, at any depth."""
    found = []
    package = module if module.endswith("__init__") else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("georecall")]
        elif isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:  # relative import: resolve against the importing package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([name] if name else []))
            if name.startswith("georecall"):
                found.append(name)
    return found


def back_edges(modules: dict[str, str]) -> list[str]:
    """``importer -> imported`` for every import that goes against the layering."""
    bad = []
    for module, source in modules.items():
        mine = layer_of(module)
        for imported in georecall_imports(source, module):
            if layer_of(imported) not in ALLOWED[mine]:
                bad.append(f"{module} -> {imported}")
    return bad


def installed_modules() -> dict[str, str]:
    root = pathlib.Path(georecall.__file__).parent
    modules = {}
    for path in root.rglob("*.py"):
        name = ".".join(("georecall",) + path.relative_to(root).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path.read_text()
    # an editable install maps the four folders from elsewhere: read them through their packages
    for sub in ("theory", "constructions", "bounds", "verify"):
        package = __import__(f"georecall.{sub}", fromlist=["_"])
        folder = pathlib.Path(package.__file__).parent
        for path in folder.rglob("*.py"):
            name = ".".join(("georecall", sub) + path.relative_to(folder).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path.read_text()
    return modules


def test_no_import_goes_against_the_layering():
    modules = installed_modules()
    assert len(modules) > 30 and "georecall.verify.checking.check" in modules
    assert back_edges(modules) == []


@pytest.mark.parametrize("importer, line, imported", [
    ("georecall.constructions.model", "from georecall.verify.checking import check",
     "georecall.verify.checking"),
    ("georecall.theory.tasks", "import georecall.constructions.codes", "georecall.constructions.codes"),
    ("georecall.io", "from georecall.theory.tasks import Task", "georecall.theory.tasks"),
    ("georecall.memory", "def f():\n    from georecall.verify.cli import main\n", "georecall.verify.cli"),
])
def test_a_planted_back_edge_is_caught(importer, line, imported):
    assert back_edges({importer: line}) == [f"{importer} -> {imported}"]


def test_allowed_edges_pass():
    assert back_edges({"georecall.verify.cli.parser": "from georecall.constructions import registry",
                       "georecall.bounds.tables": "from georecall.constructions.codes import make_codes",
                       "georecall.constructions.model": "from georecall.io import atomic_write"}) == []
