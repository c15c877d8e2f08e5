"""The names that moved when a module was split (``georecall.moved``): importable from the old module, the
new module's own object, with a DeprecationWarning naming it; and the project's own code never uses the old
path."""

from __future__ import annotations

import ast
import importlib
import pathlib
import warnings

import pytest

from georecall.moved import moved_names

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Every module that keeps a table of names that moved out of it.
SPLIT_MODULES = (
    "georecall.constructions.model",
    "georecall.memory",
    "georecall.verify.checking.additive",
    "georecall.verify.checking.check",
    "georecall.verify.experiments.probes",
    "georecall.verify.experiments.study",
    "georecall.verify.experiments.sweep",
    "georecall.verify.lm.run",
    "georecall.verify.training.train",
)


def _moved(module_name: str) -> dict[str, str]:
    module = importlib.import_module(module_name)
    return {name: home for home, names in module._MOVED.items() for name in names}


def _source_files() -> list[pathlib.Path]:
    skip = {".venv", "build", ".git", "node_modules"}
    return [p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts)]


def test_every_module_with_a_moved_table_is_listed():
    def keeps_a_table(node: ast.stmt) -> bool:  # module level: __getattr__ = moved_names(...)
        return (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and [getattr(t, "id", None) for t in node.targets] == ["__getattr__"]
                and getattr(node.value.func, "id", None) == "moved_names")

    found = {path for path in _source_files()
             if any(keeps_a_table(node) for node in ast.parse(path.read_text(encoding="utf-8")).body)}
    # by (package, file): the sources scanned are the repository's, the modules imported may be an installed
    # wheel's (CI)
    listed = {tuple(m.split(".")[-2:]) for m in SPLIT_MODULES}
    assert {(p.parent.name, p.stem) for p in found} == listed


@pytest.mark.parametrize("module_name", SPLIT_MODULES)
def test_each_moved_name_is_its_new_modules_object_with_a_warning(module_name):
    module = importlib.import_module(module_name)
    moved = _moved(module_name)
    assert moved, f"{module_name} has an empty table"
    for name, home in moved.items():
        new = importlib.import_module(home)
        assert name in new.__all__, f"{name} is not public in {home}"
        assert name not in module.__all__, f"{name} is still public in {module_name}"
        assert name not in vars(module), f"{name} is defined in {module_name}, so the table is never read"
        with pytest.warns(DeprecationWarning, match=rf"{module_name}\.{name} moved to {home}\.{name}"):
            assert getattr(module, name) is getattr(new, name)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        module.no_such_name
    assert not hasattr(module, "no_such_name")


def test_the_import_statement_users_wrote_still_works():
    from georecall.verify.experiments.sweep_search import find_threshold

    with pytest.warns(DeprecationWarning, match="import it from georecall.verify.experiments.sweep_search"):
        from georecall.verify.experiments.sweep import find_threshold as old
    assert old is find_threshold


def test_a_broken_table_is_refused_or_fails():
    with pytest.raises(ValueError, match="listed under"):
        moved_names("old", {"json": ("dumps",), "pickle": ("dumps",)})
    getattr_ = moved_names("old", {"json": ("not_in_json",)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(AttributeError, match="not_in_json"):
            getattr_("not_in_json")
    import json

    with pytest.warns(DeprecationWarning, match="old.dumps moved to json.dumps"):
        assert moved_names("old", {"json": ("dumps",)})("dumps") is json.dumps


def _old_paths_used(tree: ast.AST, moved: dict[str, dict[str, str]]) -> list[str]:
    """``from OLD import NAME`` and ``alias.NAME`` (alias bound to OLD) for a moved NAME."""
    used = []
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in moved and a.asname:
                    aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                if node.module in moved and a.name in moved[node.module]:
                    used.append(f"from {node.module} import {a.name} (line {node.lineno})")
                full = f"{node.module}.{a.name}"
                if full in moved:
                    aliases[a.asname or a.name] = full
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and node.attr in moved[aliases[node.value.id]]):
            used.append(f"{node.value.id}.{node.attr} (line {node.lineno})")
    return used


def test_the_projects_own_code_imports_each_name_from_its_new_module():
    moved = {m: _moved(m) for m in SPLIT_MODULES}
    allowed = {pathlib.Path(__file__).resolve(), (ROOT / "tests" / "test_model.py").resolve()}
    offenders = {}
    for path in _source_files():
        if path.resolve() in allowed:
            continue
        used = _old_paths_used(ast.parse(path.read_text(encoding="utf-8")), moved)
        if used:
            offenders[str(path.relative_to(ROOT))] = used
    assert not offenders


def test_the_scan_sees_an_old_import_and_an_old_attribute():
    moved = {"georecall.verify.experiments.sweep": {"find_threshold": "x"}}
    planted = ast.parse("from georecall.verify.experiments.sweep import find_threshold\n"
                        "from georecall.verify.experiments import sweep\nsweep.find_threshold\n"
                        "import georecall.verify.experiments.sweep as sw\nsw.find_threshold\nsweep.sweep\n")
    assert len(_old_paths_used(planted, moved)) == 3
