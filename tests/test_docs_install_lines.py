"""Every install line the project shows works from a fresh clone: georecall is not on the package index, so
no document, message or test names ``pip install 'georecall[extra]'`` or ``pip install georecall`` (both
fail: "No matching distribution found"); extras are ``pip install '.[extra]'`` in the clone. And the README's
quick start is what CI runs."""

import pathlib
import re

ROOT = pathlib.Path(__file__).parent.parent
NAME = "geo" + "recall"  # spelled apart so that this file's own patterns are not what it finds
FROM_INDEX = re.compile(r"pip3? install\s+(?:-U\s+|--upgrade\s+)?['\"]?" + NAME
                        + r"(?:\[|['\"]?(?=[\s`)]|$))", flags=re.M)


def shown_texts() -> list[pathlib.Path]:
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / ".ci" / "run"]
    files += [p for p in (ROOT / "docs").rglob("*.md")
              if not {"_build", "generated", "reference"} & set(p.relative_to(ROOT / "docs").parts)]
    for folder in ("src", "theory", "constructions", "bounds", "verify", "tests", "examples", "benchmarks"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return [f for f in files if f.exists() and f != pathlib.Path(__file__)]  # this file names them on purpose


def install_lines_from_the_index(text: str) -> list[str]:
    return [m.group(0) for m in FROM_INDEX.finditer(text)]


def test_no_install_line_asks_the_package_index_for_georecall():
    bad = {str(p.relative_to(ROOT)): found for p in shown_texts()
           if (found := install_lines_from_the_index(p.read_text(encoding="utf-8")))}
    assert bad == {}
    assert len(shown_texts()) > 100


def test_the_check_sees_each_form_that_fails_and_passes_those_that_work():
    failing = [f"pip install '{NAME}[export]'", f'pip install "{NAME}[lm]"', f"pip install {NAME}[plot]",
               f"pip install {NAME}", f"`pip install -U {NAME}`", f"pip3 install {NAME}\n"]
    for line in failing:
        assert install_lines_from_the_index(line), line
    working = ["pip install '.[export]'", "pip install .", "pip install -e '.[test]'",
               f"pip install {NAME}-extras-of-someone-else", f"cd {NAME} && pip install ."]
    for line in working:
        assert not install_lines_from_the_index(line), line


def test_the_readme_quick_start_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme[readme.index("## Quick start"):]
    block = re.search(r"```bash\n(.*?)```", start, flags=re.S).group(1).splitlines()
    assert block == [f"pip install . && {NAME} verify", "pip install '.[test]' && python -m pytest"]
    assert readme[:readme.index("## Quick start")].count("\n") < 40
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install --quiet '.[test]'" in ci and '"default suite" python -m pytest\n' in ci


def test_the_readme_stays_short():
    assert (ROOT / "README.md").read_text(encoding="utf-8").count("\n") <= 200
