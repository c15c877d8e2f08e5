"""Every docstring example in georecall runs: each installed module whose source holds ``>>>`` is imported and
its examples run by :mod:`doctest` (the API's verbs have one each; the count is printed with ``-s``)."""

import doctest
import importlib
import pathlib

import georecall


def modules_with_examples() -> list[str]:
    """The installed georecall modules whose source holds a ``>>>`` example."""
    names = []
    roots = {"georecall": pathlib.Path(georecall.__file__).parent}
    for sub in ("theory", "constructions", "bounds", "verify"):
        roots[f"georecall.{sub}"] = pathlib.Path(importlib.import_module(f"georecall.{sub}").__file__).parent
    for package, folder in roots.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if package == "georecall" and parts[0] in ("theory", "constructions", "bounds", "verify"):
                continue  # an editable install maps these elsewhere: read through their packages above
            if ">>>" in path.read_text(encoding="utf-8"):
                names.append(".".join((package, *parts)).removesuffix(".__init__"))
    return sorted(set(names))


def run_examples(module) -> doctest.TestResults:
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(module):
        runner.run(test, out=lambda _: None)
    return runner.summarize(verbose=False)


def test_every_docstring_example_runs():
    names = modules_with_examples()
    assert "georecall.api_check" in names
    attempted = failed = 0
    for name in names:
        result = run_examples(importlib.import_module(name))
        assert result.failed == 0, name
        attempted += result.attempted
        failed += result.failed
    print(f"{attempted} docstring examples in {len(names)} modules ran")
    assert failed == 0 and attempted >= 40


def test_a_wrong_example_is_caught():
    import types

    planted = types.ModuleType("planted")
    planted.__doc__ = ">>> 1 + 1\n3\n"
    assert run_examples(planted).failed == 1
