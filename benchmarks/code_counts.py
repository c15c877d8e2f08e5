"""The shape of the code, counted (issue 42): functions over 80 code lines, modules over 500 lines, and
function-level imports of georecall's own modules, over the package's sources (theory/, constructions/,
bounds/, verify/, src/georecall/; not tests, benchmarks or examples).

A function's code lines are the lines of its body that are neither blank, nor a comment, nor its docstring
(its signature counts). CONTRIBUTING.md, "One concept per module", says why each function still over 80 lines
is left. Private cross-module imports are counted, and forbidden, by ``tests/test_private_names.py``.

Run by hand, from the repository's folder:
    python benchmarks/code_counts.py            # the three counts and the names behind them
    python benchmarks/code_counts.py --json     # one JSON document
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDERS = ("theory", "constructions", "bounds", "verify", "src/georecall")
LONG_FUNCTION = 80
LONG_MODULE = 500


def code_lines(source_lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The lines of ``node`` that are neither blank, nor a comment, nor inside its docstring."""
    first = node.body[0]
    doc = None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value,
                                                                                              str):
        doc = (first.lineno, first.end_lineno)
    count = 0
    for number in range(node.lineno, (node.end_lineno or node.lineno) + 1):
        text = source_lines[number - 1].strip()
        if text and not text.startswith("#") and not (doc and doc[0] <= number <= doc[1]):
            count += 1
    return count


def is_own_import(node: ast.AST) -> bool:
    """An import statement of a georecall module (absolute or relative)."""
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").startswith("georecall")
    return isinstance(node, ast.Import) and any(alias.name.startswith("georecall") for alias in node.names)


def counts(root: pathlib.Path = ROOT) -> dict:
    """The three counts over the package's sources under ``root``, with what is behind each."""
    long_functions, long_modules, function_imports = [], [], set()
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            lines = source.splitlines()
            name = str(path.relative_to(root))
            if len(lines) > LONG_MODULE:
                long_modules.append({"module": name, "lines": len(lines)})
            for node in ast.walk(ast.parse(source)):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                n = code_lines(lines, node)
                if n > LONG_FUNCTION:
                    long_functions.append({"function": f"{name}:{node.lineno} {node.name}", "code_lines": n})
                function_imports |= {f"{name}:{inner.lineno}" for inner in ast.walk(node)
                                     if is_own_import(inner)}
    return {
        "functions_over_80_code_lines": sorted(long_functions, key=lambda f: -f["code_lines"]),
        "modules_over_500_lines": sorted(long_modules, key=lambda m: -m["lines"]),
        "function_level_georecall_imports": sorted(function_imports),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON document")
    args = parser.parse_args()
    found = counts()
    if args.json:
        print(json.dumps(found, indent=1))
        return
    print(f"functions over {LONG_FUNCTION} code lines: {len(found['functions_over_80_code_lines'])}")
    for f in found["functions_over_80_code_lines"]:
        print(f"  {f['code_lines']:4d}  {f['function']}")
    print(f"modules over {LONG_MODULE} lines: {len(found['modules_over_500_lines'])}")
    for m in found["modules_over_500_lines"]:
        print(f"  {m['lines']:4d}  {m['module']}")
    print(f"function-level imports of georecall modules: {len(found['function_level_georecall_imports'])}")
    for where in found["function_level_georecall_imports"]:
        print(f"  {where}")


if __name__ == "__main__":
    main()
