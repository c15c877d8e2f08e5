"""Hostile input to `georecall lecture` (issue 45, georecall.experiments.lecture): unreadable notebooks, cells
that time out, kill their kernel, turn an output into a folder or signal georecall, and Ctrl-C or SIGTERM
during a lecture. Each case: its exit code (2 for bad input, 130 / 143 for an interruption), one line on
stderr, one strict JSON document under ``--json``, and no file or temporary left behind (no output folder
for a notebook refused before any work, no ``.*.tmp-*`` file ever).

The cases that run a kernel start a fresh Python kernel each (a few seconds): they are ``slow``. Every case
skips, with the reason, without the teach extra.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from georecall.cli import main
from georecall.experiments import lecture

needs_teach = pytest.mark.skipif(not lecture.have_teach(), reason="the lecture needs the teach extra: pip "
                                 "install '.[teach]' (jupytext, nbclient, nbconvert, ipykernel, matplotlib)")
pytestmark = needs_teach

HEADER = ("---\njupyter:\n  jupytext:\n    text_representation:\n      extension: .md\n"
          "      format_name: markdown\n---\n\n")

# Nine (and more) kinds of unreadable notebook: each is refused naming the file and what is wrong
UNREADABLE = {
    "not_json.ipynb": (b"{not json", "is not JSON"),
    "empty.ipynb": (b"", "is not JSON"),
    "a_list.ipynb": (b"[1, 2]", "its JSON is a list"),
    "wrong_schema.ipynb": (b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": '
                           b'[{"cell_type": "bogus"}]}', "cannot be read"),
    "cells_not_a_list.ipynb": (b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": 5}',
                               "cannot be read"),
    "nbformat3.ipynb": (b'{"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": []}',
                        "has nbformat 3"),
    "nbformat99.ipynb": (b'{"nbformat": 99, "nbformat_minor": 0, "metadata": {}, "cells": []}',
                         "has nbformat 99"),
    "deep.ipynb": (b"[" * 100_000 + b"]" * 100_000, "is not JSON"),
    "binary.md": (bytes(range(256)) * 4, "is a binary file"),
    "latin1.md": ("# café\n".encode("latin-1"), "is not UTF-8"),
    "bad_yaml.md": (b"---\njupyter: [unclosed\n---\n\n# x\n", "cannot be read"),
}


def _error_lines(stderr: str) -> list[str]:
    """stderr's lines but the lecture's progress (``lecture: ...``; none with --json) and blank ones."""
    return [line for line in stderr.strip().splitlines() if line.strip() and not line.startswith("lecture: ")]


def _leftovers(folder: Path) -> list[str]:
    """Temporaries anywhere under ``folder`` (``.name.tmp-*``, the atomic writers' and export's)."""
    return [str(p) for p in folder.rglob("*") if ".tmp-" in p.name]


@pytest.mark.parametrize("name", sorted(UNREADABLE))
def test_an_unreadable_notebook_is_one_line_naming_it(name, tmp_path, capsys):
    data, what = UNREADABLE[name]
    source = tmp_path / name
    source.write_bytes(data)
    out = tmp_path / "out"
    code = main(["lecture", "--notebook", str(source), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("georecall: error:"), err
    assert str(source) in err[0] and what in err[0], err
    assert not out.exists() and not _leftovers(tmp_path)
    code = main(["lecture", "--notebook", str(source), "--out", str(out), "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == 2 and doc["status"] == 2 and what in doc["error"] and str(source) in doc["error"]
    assert len(captured.err.strip().splitlines()) <= 1
    assert not out.exists()


def test_a_readable_notebook_is_read(tmp_path):
    """The control: the same reader takes a well-formed notebook of each format."""
    (tmp_path / "ok.md").write_text(HEADER + "# title\n\n```python\nx = 1\n```\n")
    assert len(lecture.read_notebook(str(tmp_path / "ok.md")).cells) == 2
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nbformat.write(nb, str(tmp_path / "ok.ipynb"))
    assert len(lecture.read_notebook(str(tmp_path / "ok.ipynb")).cells) == 1


# -------------------------------------------------------------------------------------- cells that run


def _notebook(folder: Path, code: str) -> Path:
    path = folder / "nb.md"
    path.write_text(HEADER + "# a lecture\n\n```python\n" + textwrap.dedent(code).strip() + "\n```\n")
    return path


def _cli(args: list[str], **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "georecall.cli", "lecture", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kwargs)


CELLS = {
    "times_out": ("import time\ntime.sleep(60)", ["--timeout", "10"], 2, "ran past --timeout 10 s"),
    "kills_its_kernel": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", [], 2, "kernel died"),
    "raises": ("raise ValueError('a broken cell')", [], 2, "a broken cell"),
    "turns_the_output_into_a_folder": ("import os\nos.mkdir('nb.ipynb')", [], 2, "nb.ipynb"),
    "terminates_georecall": ("import os, signal, time\nos.kill(os.getppid(), signal.SIGTERM)\ntime.sleep(30)",
                             [], 143, "terminated"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CELLS))
def test_a_hostile_cell_is_one_line_and_leaves_no_temporary(case, tmp_path):
    code, extra, status, needle = CELLS[case]
    source = _notebook(tmp_path, code)
    out = tmp_path / "out"
    process = _cli(["--notebook", str(source), "--out", str(out), "--json", *extra])
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == status, (stdout, stderr)
    doc = json.loads(stdout)
    assert doc["status"] == status and needle in json.dumps(doc), doc
    assert len(stderr.strip().splitlines()) <= 1, stderr
    assert "Traceback" not in stderr
    assert not _leftovers(tmp_path)
    if case == "turns_the_output_into_a_folder":  # nothing but the folder the cell itself made
        assert sorted(p.name for p in out.iterdir()) == ["nb.ipynb"]
    else:  # the output folder the run created is removed again
        assert not out.exists(), sorted(p.name for p in out.iterdir())
    if status == 2 and case != "turns_the_output_into_a_folder":  # the cell is named
        assert "code cell 1 of 1" in doc["error"] and repr(code.splitlines()[0]) in doc["error"], doc
    process = _cli(["--notebook", str(source), "--out", str(tmp_path / "text"), *extra])
    stdout, stderr = process.communicate(timeout=300)
    progress = [line for line in stderr.strip().splitlines() if line.startswith("lecture: ")]
    lines = _error_lines(stderr)
    assert progress and progress[0].startswith("lecture: running the 1 code cells"), stderr  # no --json
    assert process.returncode == status and len(lines) == 1 and needle in lines[0], stderr


@pytest.mark.slow
def test_a_lecture_shows_its_progress_and_json_keeps_stderr_empty(tmp_path):
    """Without --json a line as the kernel starts and one per code cell run ([i/n]); with --json none."""
    source = tmp_path / "nb.md"
    source.write_text(HEADER + "# a lecture\n\n```python\nx = 1\n```\n\ntext\n\n```python\ny = x + 1\n```\n")
    process = _cli(["--notebook", str(source), "--out", str(tmp_path / "text")])
    _, stderr = process.communicate(timeout=300)
    lines = stderr.strip().splitlines()
    assert process.returncode == 0, stderr
    assert lines[0].startswith("lecture: running the 2 code cells of ") and "kernel" in lines[0], lines
    assert [line.split(" cells run")[0] for line in lines[1:]] == ["lecture: [1/2]", "lecture: [2/2]"], lines
    process = _cli(["--notebook", str(source), "--out", str(tmp_path / "json"), "--json"])
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0 and stderr == "" and json.loads(stdout)["cells"] == 2, stderr
    process = _cli(["--notebook", str(source), "--out", str(tmp_path / "quiet"), "--quiet"])
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0 and stderr == "" and "executed 2 cells" in stdout, (stdout, stderr)


@pytest.mark.slow
def test_a_failing_cell_in_a_kernel_is_named_and_leaves_no_folder(tmp_path):
    """The same as test_a_failing_cell_is_named_without_colour_codes with a real kernel (whose traceback is
    coloured): the second of two cells raises."""
    source = tmp_path / "nb.md"
    source.write_text(HEADER + "# a lecture\n\n```python\nx = 1\n```\n\n```python\nx = 2\ny = 1 / 0\n```\n")
    out = tmp_path / "new" / "out"
    process = _cli(["--notebook", str(source), "--out", str(out)])
    _, stderr = process.communicate(timeout=300)
    lines = _error_lines(stderr)
    assert process.returncode == 2 and len(lines) == 1 and "\x1b" not in stderr, stderr
    assert "code cell 2 of 2" in lines[0] and "'x = 2'" in lines[0], lines
    assert lines[0].endswith("failed: ZeroDivisionError: division by zero"), lines
    assert "[2/2]" not in stderr and "[1/2]" in stderr, stderr
    assert not (tmp_path / "new").exists()
    process = _cli(["--notebook", str(source), "--out", str(out), "--json"])
    stdout, stderr = process.communicate(timeout=300)
    doc = json.loads(stdout)
    assert doc["status"] == 2 and "\x1b" not in doc["error"] and "code cell 2 of 2" in doc["error"], doc
    assert not (tmp_path / "new").exists()


def _failing_run(first_cell: int, ename: str, evalue: str, traceback: list[str]):
    """A stand-in for the kernel's run (``lecture._run``): the code cells before number ``first_cell`` run,
    that one raises as nbclient reports it (its hooks called as nbclient calls them)."""
    from nbclient.exceptions import CellExecutionError

    def run(client, interrupt) -> None:
        code = [(i, c) for i, c in enumerate(client.nb.cells) if c.cell_type == "code"]
        for number, (index, cell) in enumerate(code, start=1):
            if client.on_cell_execute:  # a hook not set is not called (nbclient.util.run_hook)
                client.on_cell_execute(cell=cell, cell_index=index)
            failed = number == first_cell
            reply = {"content": {"status": "error" if failed else "ok"}}
            if client.on_cell_executed:
                client.on_cell_executed(cell=cell, cell_index=index, execute_reply=reply)
            if failed:
                raise CellExecutionError.from_cell_and_msg(
                    cell, {"ename": ename, "evalue": evalue, "traceback": traceback})

    return run


def test_a_failing_cell_is_named_without_colour_codes(tmp_path, monkeypatch, capsys):
    """A cell that raises: one line naming the cell (its number among the code cells and its first line) and
    the error without the kernel's ANSI colour codes, in text and in --json's "error"; no "[2/2] cells run"
    for the cell that failed; no output folder left (it is created by the run, with a missing parent). The
    old message was the traceback's last line, colour codes and all, after "[2/2] cells run", and left the
    folder."""
    source = tmp_path / "nb.md"
    source.write_text(HEADER + "# a lecture\n\n```python\nx = 1\n```\n\ntext\n\n```python\nx = 2\n"
                      "y = 1 / 0\n```\n")
    colour = ["\x1b[0;31m---------------------------------------------------------------------------\x1b[0m",
              "\x1b[0;31mZeroDivisionError\x1b[0m: division by zero"]
    monkeypatch.setattr(lecture, "_run", _failing_run(2, "ZeroDivisionError", "division by zero", colour))
    out = tmp_path / "new" / "out"
    code = main(["lecture", "--notebook", str(source), "--out", str(out)])
    err = capsys.readouterr().err
    lines = _error_lines(err)
    assert code == 2 and len(lines) == 1 and "\x1b" not in err, err
    assert "code cell 2 of 2" in lines[0] and "'x = 2'" in lines[0], lines
    assert "ZeroDivisionError: division by zero" in lines[0], lines
    progress = [line for line in err.splitlines() if line.startswith("lecture: [")]
    assert [line.split(" cells run")[0] for line in progress] == ["lecture: [1/2]"], progress
    assert not (tmp_path / "new").exists()
    code = main(["lecture", "--notebook", str(source), "--out", str(out), "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == 2 and "\x1b" not in captured.out and "\\u001b" not in captured.out, doc
    assert "code cell 2 of 2" in doc["error"] and "ZeroDivisionError: division by zero" in doc["error"]
    assert not (tmp_path / "new").exists()


def test_an_output_folder_that_existed_is_kept_when_a_cell_fails(tmp_path, monkeypatch, capsys):
    """The control: only a folder the run created is removed; one that was there before stays."""
    source = _notebook(tmp_path, "raise ValueError('a broken cell')")
    monkeypatch.setattr(lecture, "_run", _failing_run(1, "ValueError", "a broken cell", []))
    out = tmp_path / "out"
    out.mkdir()
    assert main(["lecture", "--notebook", str(source), "--out", str(out)]) == 2
    assert "a broken cell" in capsys.readouterr().err and out.is_dir()


def test_quiet_leaves_stderr_empty(tmp_path, monkeypatch, capsys):
    """--quiet (docs/cli.md: offered where progress goes to stderr): no progress line; without it, the
    progress (the control). The kernel is not started here (the slow test below runs one)."""
    monkeypatch.setattr(lecture, "_run", lambda client, interrupt: None)
    source = _notebook(tmp_path, "x = 1")
    assert main(["lecture", "--notebook", str(source), "--out", str(tmp_path / "quiet"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "the lecture page" in captured.out, captured
    assert main(["lecture", "--notebook", str(source), "--out", str(tmp_path / "loud")]) == 0
    assert capsys.readouterr().err.startswith("lecture: running the 1 code cells")


# ------------------------------------------------------------------------------------------- signals


def _kernel_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not yet reaped by its parent) is not running
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_lecture_exits_130_or_143_with_one_document(sig, status, tmp_path):
    """Ctrl-C or SIGTERM while a cell runs: the kernel is stopped, one JSON document, the exit code of the
    signal, nothing written (no notebook, page, slides or temporary)."""
    marker = tmp_path / "kernel.pid"
    source = _notebook(tmp_path, f"""
        import os, time
        open({str(marker)!r} + ".part", "w").write(str(os.getpid()))
        os.replace({str(marker)!r} + ".part", {str(marker)!r})
        time.sleep(120)
    """)
    out = tmp_path / "out"
    process = _cli(["--notebook", str(source), "--out", str(out), "--json"])
    for _ in range(1200):  # the kernel started and runs the cell (a readiness wait, not a timed assertion)
        if marker.exists() or process.poll() is not None:
            break
        time.sleep(0.1)
    assert marker.exists(), process.communicate(timeout=60)
    kernel = int(marker.read_text())
    process.send_signal(sig)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == status, (stdout, stderr)
    doc = json.loads(stdout)
    assert doc["status"] == status
    assert len(stderr.strip().splitlines()) <= 1 and "Traceback" not in stderr, stderr
    assert not _leftovers(tmp_path)
    assert not out.exists()  # the folder the run created is removed again
    for _ in range(300):
        if not _kernel_alive(kernel):
            break
        time.sleep(0.1)
    assert not _kernel_alive(kernel), "the kernel outlived the lecture"


# ------------------------------------------------------------------------------------------ a full disk


def _no_partial_file(where: Path) -> None:
    left = [str(p) for p in where.rglob("*") if p.name != "filler" and not p.is_dir()]
    assert left == [], left


def test_a_full_disk_is_one_line_naming_the_file(full_disk, tmp_path, capsys, monkeypatch):
    """``lecture --out`` on a full tmpfs (tests/conftest.py; skipped where it cannot be mounted): exit 2, one
    line naming the notebook written and the disk, one strict JSON document with --json, no partial or
    temporary file. The cells are not run here (no kernel: the write is what is tested; the slow test below
    runs one)."""
    monkeypatch.setattr(lecture, "_run", lambda client, interrupt: None)
    source = _notebook(tmp_path, "x = 1")
    out = full_disk / "lecture"
    argv = ["lecture", "--notebook", str(source), "--out", str(out)]
    code = main(argv)
    err = _error_lines(capsys.readouterr().err)
    assert code == 2 and len(err) == 1 and err[0].startswith("georecall: error: cannot write"), err
    assert repr(str(out / "nb.ipynb")) in err[0] and "no space left on the disk" in err[0], err
    _no_partial_file(full_disk)
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    assert code == 2 and doc["status"] == 2 and "no space left on the disk" in doc["error"], doc
    assert captured.err.strip().splitlines() == [doc["error"]]
    _no_partial_file(full_disk)


@pytest.mark.slow
def test_a_full_disk_after_the_cells_ran_is_one_line(full_disk, tmp_path):
    """The same with a real kernel, in a fresh process: the cells run, the first write fails, exit 2."""
    source = _notebook(tmp_path, "x = 1")
    proc = _cli(["--notebook", str(source), "--out", str(full_disk / "lecture")])
    out, err = proc.communicate(timeout=120)
    lines = _error_lines(err)
    assert proc.returncode == 2 and len(lines) == 1 and "no space left on the disk" in lines[0], err
    _no_partial_file(full_disk)
