"""One reader and one writer: a damaged model file (a flipped byte in a compressed member, a header nested
100,000 deep, ``meta`` an int or a list) is exit 2 with one line naming the file; on a real full file system
(a 64 kB tmpfs, tests/conftest.py; skipped, with the reason, where mounting is not allowed) every
output-writing command is exit 2 with one line naming the path and the disk (a read-only one: "read-only"),
and leaves no partial or temporary file; an
export folder name whose temporary name is too long is refused before the work; non-finite numbers never
reach a JSON file. Each case asserts the exit code, one line on stderr, one strict JSON document with
``--json``, and what is left on disk."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from georecall.cli import main
from georecall.errors import InputError
from georecall.io import append_jsonl, atomic_write, parse_json, strict_json

MODEL_ARGS = ["train", "--N", "8", "--R", "2", "--d", "8", "--steps", "3", "--quiet"]


def _strict(text: str) -> dict:
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))


def _refused(argv, capsys, *needles) -> None:
    """Exit 2, one line naming ``needles``; and with --json one strict document carrying the same line."""
    code = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("georecall: error:"), err
    assert all(n in lines[0] for n in needles), (needles, err)
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    doc = _strict(out)
    assert code == 2 and doc["status"] == 2 and all(n in doc["error"] for n in needles), doc
    assert err.strip().splitlines() == [doc["error"]]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m.npz"
    assert main([*MODEL_ARGS, "--out", str(path)]) == 0
    return path


# ------------------------------------------------------------------------------------------ damaged reads


def _damage(src: Path, kind: str, dst: Path) -> None:
    if kind == "flipped byte":  # inside the largest compressed member's data: the headers stay intact
        data = bytearray(src.read_bytes())
        with zipfile.ZipFile(src) as z:
            info = max(z.infolist(), key=lambda i: i.compress_size)
        offset = (info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
                  + info.compress_size // 2)
        data[offset] ^= 0xFF
        dst.write_bytes(bytes(data))
        return
    with np.load(src, allow_pickle=False) as z:
        arrays = dict(z)
    header = json.loads(str(arrays["__header__"]))
    if kind == "deep header":
        arrays["__header__"] = np.array("[" * 100_000 + "]" * 100_000)
    else:
        header["meta"] = 5 if kind == "meta an int" else [1, 2]
        arrays["__header__"] = np.array(json.dumps(header))
    np.savez_compressed(dst, **arrays)


DAMAGED = {"flipped byte": "CRC", "deep header": "nested too deeply", "meta an int": "meta is a int",
           "meta a list": "meta is a list"}


@pytest.mark.parametrize("kind", list(DAMAGED))
@pytest.mark.parametrize("command", [["eval"], ["probe"], ["transfer"], ["eval", "--arith", "exact"]])
def test_a_damaged_model_file_is_one_line_naming_it(kind, command, model_file, tmp_path, capsys):
    damaged = tmp_path / "damaged.npz"
    _damage(model_file, kind, damaged)
    _refused([*command, str(damaged)], capsys, "damaged.npz", DAMAGED[kind])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.npz"]


def test_the_library_loader_says_the_same(model_file, tmp_path):
    from georecall.constructions.storage import load_model

    for kind, needle in DAMAGED.items():
        damaged = tmp_path / f"{kind.replace(' ', '_')}.npz"
        _damage(model_file, kind, damaged)
        with pytest.raises(InputError, match=needle.replace("(", r"\(")):
            load_model(str(damaged))
    load_model(str(model_file))  # control: the intact file loads


def test_parse_json_names_the_file():
    assert parse_json('{"a": 1}', "x.json") == {"a": 1}
    for text, needle in (("[" * 100_000, "nested too deeply"), ("{", "not JSON"), ("1" * 5000, "JSON")):
        with pytest.raises(InputError, match=needle) as info:
            parse_json(text, "x.json", "the header")
        assert "'x.json'" in str(info.value)


# ------------------------------------------------------------------------------------- full file system


# full_disk and read_only_disk: tests/conftest.py (a real tmpfs, skipped with the reason where it cannot be
# mounted)


def _left(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if p.name != "filler" and not p.name.endswith(".lock"))


WRITERS = {
    "train --out": lambda d, m: [*MODEL_ARGS, "--out", str(d / "m.npz")],
    "check --save": lambda d, m: ["check", "single-hop", "--N", "8", "--R", "2", "--quiet", "--save",
                                  str(d / "c.npz")],
    "sweep --out": lambda d, m: ["sweep", "threshold", "--N", "8", "--R", "1", "--modes", "learned",
                                 "--seeds", "0", "--steps", "3", "--d-max", "8", "--quiet", "--out",
                                 str(d / "s.jsonl")],
    "transfer --append": lambda d, m: ["transfer", str(m), "--append", str(d / "t.jsonl")],
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_full_disk_is_one_line_naming_the_path(writer, full_disk, model_file, capsys):
    argv = WRITERS[writer](full_disk, model_file)
    target = argv[-1]
    _refused(argv, capsys, repr(target), "no space left on the disk")
    # no partial file, no temporary (an appended results file stays empty: created, nothing torn in it)
    left = _left(full_disk)
    assert all(not name.startswith(".") for name in left), left
    for name in left:
        assert (full_disk / name).stat().st_size == 0, (name, left)


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


needs_matplotlib = pytest.mark.skipif(not _have_matplotlib(), reason="figures need the plot extra "
                                      "(matplotlib): pip install '.[plot]'")


def _no_partial_file(where: Path) -> None:
    """Nothing but empty folders (a figure folder the command made) under ``where``: no temporary, no
    partial file."""
    left = [p for p in where.rglob("*") if p.name != "filler" and not p.is_dir()]
    assert left == [], left


@needs_matplotlib
def test_demo_figures_on_a_full_disk_is_one_line_naming_the_path(full_disk, capsys):
    """The demo is text only (no --json): exit 2 and one line naming the figure and the disk; nothing in the
    folder. With --json, the one strict document the parser gives for the option it does not take."""
    figures = full_disk / "figs"
    argv = ["demo", "--N", "4", "--R", "1", "--figures", str(figures)]
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("georecall: error: cannot write"), err
    assert str(figures) in err[0] and "no space left on the disk" in err[0], err
    _no_partial_file(full_disk)
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    doc = _strict(captured.out)
    assert code == 2 and doc["status"] == 2 and "--json" in doc["error"], doc
    assert len(captured.err.strip().splitlines()) == 1
    _no_partial_file(full_disk)


FIGURE_WRITERS = {
    "figures --out": lambda d: ["figures", "--out", str(d), "--format", "png"],
    "study mechanism --figures": lambda d: ["study", "mechanism", "--summary",
                                            str(Path(__file__).resolve().parent.parent / "docs"
                                                / "study_results.jsonl"), "--figures", str(d)],
}


@needs_matplotlib
@pytest.mark.parametrize("writer", list(FIGURE_WRITERS))
def test_figures_on_a_full_disk_is_one_line_naming_the_path(writer, full_disk, capsys):
    """The figure writers with --json: one line, one strict document, no partial file."""
    figures = full_disk / "figs"
    _refused(FIGURE_WRITERS[writer](figures), capsys, str(figures), "no space left on the disk")
    _no_partial_file(full_disk)


def test_a_read_only_disk_is_one_line_naming_the_path(read_only_disk, capsys):
    """EROFS (a tmpfs remounted read-only; root cannot write there either): refused before the work by the
    output check, one line naming the path and "read-only", nothing created."""
    target = read_only_disk / "m.npz"
    _refused([*MODEL_ARGS, "--out", str(target)], capsys, repr(str(target)), "read-only")
    assert list(read_only_disk.iterdir()) == []


def test_a_read_only_disk_under_a_folder_writer_names_the_folder(read_only_disk, capsys):
    """A folder writer (``figures --out``; ``demo --figures`` and ``lecture --out`` share the check) names the
    folder the user gave, not the probe it tried, in the writer's words; nothing is created."""
    folder = read_only_disk / "figs"
    _refused(["figures", "--out", str(folder)], capsys, f"cannot write {str(folder)!r}",
             "the file system is read-only")
    code = main(["demo", "--N", "4", "--R", "1", "--figures", str(folder)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and repr(str(folder)) in err[0] and "read-only" in err[0], err
    assert list(read_only_disk.iterdir()) == []


def test_atomic_write_on_a_read_only_disk_names_it(read_only_disk):
    """The writer itself (reached when the disk turns read-only after the check): one line, nothing left."""
    with pytest.raises(InputError, match="the file system is read-only"):
        atomic_write(str(read_only_disk / "x.bin"), b"\1")
    with pytest.raises(InputError, match="the file system is read-only"):
        append_jsonl(str(read_only_disk / "r.jsonl"), {"a": 1})
    assert list(read_only_disk.iterdir()) == []


def test_atomic_write_and_append_on_a_full_disk_leave_the_file_as_it_was(full_disk):
    target = full_disk / "x.bin"
    with pytest.raises(InputError, match="no space left"):
        atomic_write(str(target), b"\1" * 200_000)
    assert not target.exists() and _left(full_disk) == []
    results = full_disk / "r.jsonl"
    results.write_bytes(b"")
    with pytest.raises(InputError, match="no space left"):
        append_jsonl(str(results), {"payload": "x" * 200_000})
    assert results.read_bytes() == b""  # truncated back: no partial line


def test_an_export_name_whose_temporary_is_too_long_is_refused_before_the_work(tmp_path, capsys, monkeypatch):
    """245 characters: a legal name, but ".<name>.tmp-<pid>-XXXXXXXX" is not. Refused by the parameters'
    check, before any model is built (the builder is replaced by one that fails the test)."""
    from georecall.cli import commands_models

    def no_build(*args, **kwargs):
        raise AssertionError("built before the output name was checked")

    monkeypatch.setattr(commands_models, "_export_construction", no_build)
    out = tmp_path / ("a" * 245)
    _refused(["export", "--to", "onnx", str(out), "--N", "8", "--R", "2"], capsys, "longer than")
    assert list(tmp_path.iterdir()) == []


def test_non_finite_numbers_never_reach_a_json_file():
    text = strict_json({"margin": float("nan"), "top": [float("inf"), np.float32(-np.inf), np.float64(1.5)],
                        "n": np.int64(3)})
    assert _strict(text) == {"margin": None, "top": [None, None, 1.5], "n": 3}
    assert "NaN" not in text and "Infinity" not in text


def test_export_writes_its_record_through_the_strict_writer():
    """The export record (which carries the check report) is written by strict_json, not json.dump."""
    import inspect

    from georecall import exporters  # the export extra's package: imported where this test needs it

    source = inspect.getsource(exporters.export)
    assert "strict_json(" in source and "json.dump(" not in source
    assert os.path.basename(exporters.__file__) == "__init__.py"
