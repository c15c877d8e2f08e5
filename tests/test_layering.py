"""Import direction between georecall's packages, read from the installed package's sources with ``ast``
(module-level and function-level imports, relative ones, and ``importlib.import_module("...")`` /
``__import__("...")`` with a literal name). CONTRIBUTING.md, "Where things go", draws the same stack.

theory ← constructions ← verify.checking ← training ← experiments ← verify.sections, with bounds beside
constructions; the shared infrastructure (``georecall.errors``, ``georecall.io``, ``georecall.memory`` with
``georecall.estimates`` and ``georecall.npy_headers``) imports none of them. ``verify.sections`` (the rows of
``georecall verify``) and ``cli`` (the command line) sit side by side and neither imports the other: the
command line finds the rows through their entry point (``georecall.verify_rows`` in pyproject.toml). ``lm``
(the ``lm`` extra: a real model's probes) builds on ``experiments`` (its ridge fits and power controls) and
only the command line imports it; ``exporters`` (the ``export`` extra's targets) builds on ``verify.checking``
and only the command line imports it. The public API (``georecall.api_*``) is the top.

Inside ``lm/``, the parts of the ``probe-lm`` study: run_design (what is declared before a run) and
run_verdict (the rules applied to a document) import none of the others; run_measure (the forward passes)
builds on run_design, run_analysis on those three, run_report (the text) on run_design and run_verdict, and
run (the driver) on any of them.

Inside ``constructions/``, the modules of the one Model: model ← arithmetic ← forward ← decoding (the data,
the error-bound arithmetic, THE forward pass, decoding), and storage (saving and loading) on model alone; each
construction is one module (g1, a1, g2, a2_width, a2_depth, c1) that imports neither the registry nor the
modules gathering their names nor another construction.

A function-level import of a georecall module is kept only for an optional dependency or for startup cost, and
says which in a comment on its line or just above its block of imports."""

from __future__ import annotations

import ast
import importlib.metadata
import pathlib

import pytest

import georecall

# What each layer may import from georecall (beyond itself). ``georecall.verify`` itself (a docstring) may be
# imported by any layer above the infrastructure.
_BELOW_CHECKING = {"infrastructure", "theory", "constructions", "bounds", "verify"}
_BELOW_SECTIONS = _BELOW_CHECKING | {"checking", "training", "experiments"}
ALLOWED = {
    "infrastructure": {"infrastructure"},
    "theory": {"infrastructure", "theory"},
    "constructions": {"infrastructure", "theory", "constructions"},
    "bounds": {"infrastructure", "theory", "constructions", "bounds"},
    "verify": _BELOW_CHECKING,
    "checking": _BELOW_CHECKING | {"checking"},
    "training": _BELOW_CHECKING | {"checking", "training"},
    "experiments": _BELOW_SECTIONS,
    "sections": _BELOW_SECTIONS | {"sections"},
    "lm": _BELOW_SECTIONS | {"lm"},
    "exporters": _BELOW_CHECKING | {"checking", "exporters"},
    "cli": _BELOW_SECTIONS | {"lm", "exporters", "cli"},
    # ``georecall.testing`` is a user-facing helper above the library and may import any of it
    "testing": _BELOW_SECTIONS | {"sections", "lm", "exporters", "cli", "testing"},
    # the public API (``georecall.api_*``, the verbs ``import georecall as gr`` gives) sits on top of all
    "api": _BELOW_SECTIONS | {"sections", "lm", "exporters", "cli", "testing", "api"},
}
INFRASTRUCTURE = {"georecall", "georecall.errors", "georecall.io", "georecall.results_files",
                  "georecall.memory", "georecall.estimates", "georecall.npy_headers"}
ROWS_ENTRY_POINT = "georecall.verify_rows"


def layer_of(module: str) -> str:
    """The layer of a georecall module name (``georecall.verify.checking.check`` → ``checking``,
    ``georecall.experiments.sweep`` → ``experiments``, ``georecall.verify`` → ``verify``)."""
    if module in INFRASTRUCTURE:
        return "infrastructure"
    parts = module.split(".")
    if parts[1].startswith("api_"):
        return "api"
    if parts[1] == "verify" and len(parts) > 2:
        return parts[2]
    return parts[1] if parts[1] in ALLOWED else "infrastructure"


def _literal_import(node: ast.Call) -> str | None:
    """The module named by ``importlib.import_module("...")`` or ``__import__("...")``, if a literal."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
        value = node.args[0].value
        return value if isinstance(value, str) else None
    return None


def georecall_imports(source: str, module: str, known: set[str] = frozenset()
                      ) -> list[tuple[str, int, bool]]:
    """Every georecall module that ``source`` (the text of ``module``) imports, at any depth: ``(imported,
    line, inside a function)``. ``from package import name`` counts as importing ``package.name`` when that
    is one of the ``known`` modules."""
    found: list[tuple[str, int, bool]] = []
    package = module if module.endswith("__init__") else module.rsplit(".", 1)[0]

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno, in_function) for alias in child.names
                             if alias.name.startswith("georecall"))
            elif isinstance(child, ast.ImportFrom):
                name = child.module or ""
                if child.level:  # relative import: resolve against the importing package
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    name = ".".join(base + ([name] if name else []))
                if name.startswith("georecall"):
                    for alias in child.names:
                        sub = f"{name}.{alias.name}"
                        found.append((sub if sub in known else name, child.lineno, in_function))
            elif isinstance(child, ast.Call):
                named = _literal_import(child)
                if named is not None and named.startswith("georecall"):
                    found.append((named, child.lineno, in_function))
            visit(child, inner)

    visit(ast.parse(source), False)
    return found


def back_edges(modules: dict[str, str]) -> list[str]:
    """``importer -> imported`` for every import that goes against the layering."""
    bad = []
    known = set(modules)
    for module, source in modules.items():
        mine = layer_of(module)
        for imported, _, _ in georecall_imports(source, module, known):
            if layer_of(imported) not in ALLOWED[mine]:
                bad.append(f"{module} -> {imported}")
    return bad


def unexplained_function_imports(modules: dict[str, str]) -> list[str]:
    """``module:line`` of every function-level import of a georecall module without a reason: a comment on
    its line, or on the line just above the block of import statements it belongs to."""
    missing = []
    for module, source in modules.items():
        lines = source.splitlines()
        statements = sorted({line for _, line, inside in georecall_imports(source, module, set(modules))
                             if inside})
        for line in statements:
            first = line
            while first > 1 and lines[first - 2].lstrip().startswith(("import ", "from ")):
                first -= 1  # the top of this block of imports
            block = lines[first - 1:line]
            if not any("#" in text for text in block) and not (
                    first > 1 and lines[first - 2].lstrip().startswith("#")):
                missing.append(f"{module}:{line}")
    return missing


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


MODULES = installed_modules()


def test_no_import_goes_against_the_layering():
    assert len(MODULES) > 30 and "georecall.verify.checking.run" in MODULES
    assert back_edges(MODULES) == []


def test_a_back_edge_planted_in_the_real_tree_is_caught():
    """The real sources plus one temporary checking module that reaches up into the rows of verify."""
    planted = {**MODULES, "georecall.verify.checking.planted_edge": "def f():\n"
               "    from georecall.verify.sections import suite  # a startup reason does not excuse it\n"}
    assert back_edges(planted) == [
        "georecall.verify.checking.planted_edge -> georecall.verify.sections.suite"]


@pytest.mark.parametrize("importer, line, imported", [
    ("georecall.constructions.model", "from georecall.verify.checking import check",
     "georecall.verify.checking"),
    ("georecall.theory.tasks", "import georecall.constructions.codes", "georecall.constructions.codes"),
    ("georecall.io", "from georecall.theory.tasks import Task", "georecall.theory.tasks"),
    ("georecall.memory", "def f():\n    from georecall.cli import main\n", "georecall.cli"),
    ("georecall.estimates", "from georecall.constructions.registry import get",
     "georecall.constructions.registry"),
    # the public API is the top: nothing below it imports a verb
    ("georecall.verify.checking.run", "from georecall.api_check import check", "georecall.api_check"),
    ("georecall.io", "def f():\n    import georecall.api_models\n", "georecall.api_models"),
    # along the stack: module level, function level, relative, by name, and the two tops of the stack
    ("georecall.verify.checking.certify", "from georecall.verify.sections.suite import run_check",
     "georecall.verify.sections.suite"),
    ("georecall.verify.checking.check", "def f():\n    from ...training.train import train\n",
     "georecall.training.train"),
    ("georecall.training.train", "class A:\n    def f(self):\n"
     "        from georecall.experiments.probes import probe_all\n",
     "georecall.experiments.probes"),
    ("georecall.experiments.figures", "import georecall.verify.sections.suite",
     "georecall.verify.sections.suite"),
    ("georecall.cli.commands",
     "import importlib\nimportlib.import_module('georecall.verify.sections')", "georecall.verify.sections"),
    ("georecall.verify.sections.suite", "from georecall.cli.commands import COMMANDS",
     "georecall.cli.commands"),
    ("georecall.experiments.sweep", "from georecall.lm.probes import decode_relation",
     "georecall.lm.probes"),
    ("georecall.lm.run", "from georecall.verify.sections.suite import verify_reports",
     "georecall.verify.sections.suite"),
    ("georecall.exporters.check", "from georecall.experiments.probes import superposition_readout",
     "georecall.experiments.probes"),
    ("georecall.training.train", "from ..cli import main", "georecall.cli"),
    ("georecall.verify.checking.run", "from georecall.training import train", "georecall.training"),
])
def test_a_planted_back_edge_is_caught(importer, line, imported):
    assert back_edges({importer: line}) == [f"{importer} -> {imported}"]


def test_allowed_edges_pass():
    assert back_edges({"georecall.cli.parser": "from georecall.constructions import registry",
                       "georecall.bounds.tables": "from georecall.constructions.codes import make_codes",
                       "georecall.constructions.model": "from georecall.io import atomic_write",
                       "georecall.verify.sections.suite":
                           "from georecall.verify.checking.run import run_check",
                       "georecall.cli.commands": "def f():\n    from georecall.lm import run\n",
                       "georecall.experiments.figures": "from ..verify.checking import run",
                       "georecall.training.train": "from georecall.verify.checking import check",
                       "georecall.cli.commands_models": "from ..exporters import check",
                       "georecall.verify.checking.run": "from georecall.verify import checking"}) == []


# Inside constructions/: what each module of the one Model may import of the others (beyond itself).
MODEL_MODULES_ALLOWED = {
    "model": set(),
    "arithmetic": {"model"},
    "forward": {"model", "arithmetic"},
    "decoding": {"model", "arithmetic", "forward"},
    "storage": {"model"},
}


def sibling_back_edges(modules: dict[str, str], prefix: str, allowed: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for every import between the sibling modules ``prefix + name`` named in
    ``allowed`` (each name: the siblings it may import) that goes against their order."""
    bad = []
    for module, source in modules.items():
        mine = module.removeprefix(prefix)
        if not module.startswith(prefix) or mine not in allowed:
            continue
        for imported, _, _ in georecall_imports(source, module, set(modules)):
            theirs = imported.removeprefix(prefix)
            if (imported.startswith(prefix) and theirs in allowed and theirs != mine
                    and theirs not in allowed[mine]):
                bad.append(f"{module} -> {imported}")
    return bad


def model_module_back_edges(modules: dict[str, str]) -> list[str]:
    """``importer -> imported`` for every import between the modules of the one Model
    (:data:`MODEL_MODULES_ALLOWED`) that goes against their order."""
    return sibling_back_edges(modules, "georecall.constructions.", MODEL_MODULES_ALLOWED)


def test_the_model_modules_import_in_their_order():
    assert all(f"georecall.constructions.{name}" in MODULES for name in MODEL_MODULES_ALLOWED)
    assert model_module_back_edges(MODULES) == []


@pytest.mark.parametrize("importer, line, imported", [
    ("model", "from georecall.constructions.forward import forward", "forward"),
    ("model", "def f():\n    from georecall.constructions.storage import save_model\n", "storage"),
    ("arithmetic", "from .forward import Trace", "forward"),
    ("forward", "from georecall.constructions import decoding", "decoding"),
    ("decoding", "import georecall.constructions.storage", "storage"),
    ("storage", "from georecall.constructions.forward import forward", "forward"),
])
def test_a_planted_back_edge_between_the_model_modules_is_caught(importer, line, imported):
    modules = {**MODULES, f"georecall.constructions.{importer}": line}
    assert model_module_back_edges(modules) == [
        f"georecall.constructions.{importer} -> georecall.constructions.{imported}"]


def test_the_model_modules_allowed_edges_pass():
    assert model_module_back_edges({
        "georecall.constructions.decoding": "from georecall.constructions.forward import forward\n"
                                            "from georecall.constructions.model import Model",
        "georecall.constructions.forward": "from .arithmetic import matmul_rows",
        "georecall.constructions.storage": "from georecall.constructions.model import unflatten",
        "georecall.constructions.arithmetic": "from georecall.constructions.rounding import up"}) == []


# Inside lm/: the parts of the probe-lm study (run.py, the driver, and its run_* siblings) import in their
# order (what each may import of the others, beyond itself).
RUN_MODULES_ALLOWED = {
    "run_design": set(),
    "run_verdict": set(),
    "run_measure": {"run_design"},
    "run_analysis": {"run_design", "run_measure", "run_verdict"},
    "run_report": {"run_design", "run_verdict"},
    "run": {"run_design", "run_measure", "run_analysis", "run_verdict", "run_report"},
}
RUN_PREFIX = "georecall.lm."


def test_the_probe_lm_study_modules_import_in_their_order():
    assert all(RUN_PREFIX + name in MODULES for name in RUN_MODULES_ALLOWED)
    assert sibling_back_edges(MODULES, RUN_PREFIX, RUN_MODULES_ALLOWED) == []


@pytest.mark.parametrize("importer, line, imported", [
    ("run_design", "from georecall.lm.run_measure import measure", "run_measure"),
    ("run_verdict", "def f():\n    from georecall.lm import run_analysis\n", "run_analysis"),
    ("run_measure", "from .run_analysis import analyse", "run_analysis"),
    ("run_analysis", "from georecall.lm.run import probe_lm", "run"),
    ("run_report", "from georecall.lm.run_measure import Prepared", "run_measure"),
])
def test_a_planted_back_edge_between_the_probe_lm_study_modules_is_caught(importer, line, imported):
    modules = {**MODULES, RUN_PREFIX + importer: line}
    assert sibling_back_edges(modules, RUN_PREFIX, RUN_MODULES_ALLOWED) == [
        f"{RUN_PREFIX}{importer} -> {RUN_PREFIX}{imported}"]


def test_the_probe_lm_study_modules_allowed_edges_pass():
    assert sibling_back_edges({
        RUN_PREFIX + "run": "from georecall.lm.run_analysis import analyse",
        RUN_PREFIX + "run_analysis": "from .run_measure import Prepared\nfrom .run_verdict import verdict",
        RUN_PREFIX + "run_report": "from georecall.lm import run_design, run_verdict",
        RUN_PREFIX + "run_measure": "from georecall.lm import controls, extract"},
        RUN_PREFIX, RUN_MODULES_ALLOWED) == []


# Inside constructions/: a construction is one module (CONTRIBUTING.md, "Adding a construction"). Each builds
# on the shared parts and never on the registry (which imports it), on the modules that gather the names
# (single_hop, multi_hop), or on another construction.
CONSTRUCTION_MODULES = ("g1", "a1", "g2", "a2_width", "a2_depth", "c1")
ABOVE_A_CONSTRUCTION = ("registry", "single_hop", "multi_hop") + CONSTRUCTION_MODULES


def construction_module_edges(modules: dict[str, str]) -> list[str]:
    """``importer -> imported`` for every import of a construction module (or of what it shares:
    ``building``, ``hops``) that reaches the registry, a gathering module or another construction."""
    prefix = "georecall.constructions."
    bad = []
    for name in (*CONSTRUCTION_MODULES, "building", "hops"):
        module = prefix + name
        for imported, _, _ in georecall_imports(modules.get(module, ""), module, set(modules)):
            theirs = imported.removeprefix(prefix)
            if imported.startswith(prefix) and theirs in ABOVE_A_CONSTRUCTION and theirs != name:
                bad.append(f"{module} -> {imported}")
    return bad


def test_each_construction_is_its_own_module():
    assert all(f"georecall.constructions.{name}" in MODULES for name in CONSTRUCTION_MODULES)
    assert construction_module_edges(MODULES) == []


@pytest.mark.parametrize("importer, line, imported", [
    ("g1", "from georecall.constructions.registry import BitsClaim", "registry"),
    ("c1", "from georecall.constructions.g1 import g1_family", "g1"),
    ("hops", "def f():\n    from georecall.constructions import multi_hop\n", "multi_hop"),
])
def test_a_construction_reaching_up_or_sideways_is_caught(importer, line, imported):
    modules = {**MODULES, f"georecall.constructions.{importer}": line}
    assert construction_module_edges(modules) == [
        f"georecall.constructions.{importer} -> georecall.constructions.{imported}"]


def test_from_a_package_import_a_module_names_the_module():
    known = {"georecall.verify.checking.run"}
    source = "from georecall.verify.checking import run, Report"
    assert [name for name, _, _ in georecall_imports(source, "georecall.cli.commands", known)] == [
        "georecall.verify.checking.run", "georecall.verify.checking"]


def test_the_command_line_reaches_the_verify_rows_only_through_their_entry_point():
    (entry,) = importlib.metadata.entry_points(group=ROWS_ENTRY_POINT)
    assert entry.value.startswith("georecall.verify.sections.")
    cli = {name: source for name, source in MODULES.items() if name.startswith("georecall.cli")}
    assert cli and not [name for source_name, source in cli.items()
                        for name, _, _ in georecall_imports(source, source_name, set(MODULES))
                        if name.startswith("georecall.verify.sections")]
    from georecall.cli.commands import verify_rows  # the test's own subject, imported where used
    from georecall.verify.sections.suite import verify_reports
    assert verify_rows() is verify_reports


def test_every_function_level_import_of_georecall_says_why():
    assert unexplained_function_imports(MODULES) == []


def test_a_function_level_import_without_a_reason_is_caught():
    source = ("def f():\n    x = 1\n    from georecall.theory import seeds\n    return seeds\n\n"
              "def g():\n    # startup: scipy\n    from georecall.training import train\n"
              "    from georecall.theory import tasks\n    return train, tasks\n\n"
              "def h():\n    from georecall.lm import extract  # torch\n")
    assert unexplained_function_imports({"georecall.cli.commands": source}) == [
        "georecall.cli.commands:3"]
