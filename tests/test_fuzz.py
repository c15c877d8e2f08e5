"""Fuzz the command line in-process: random arguments from each option's domain and beyond it, and damaged
files. Property: exit code 0, 1 or 2; no traceback; an exit-2 message is one line; ``--json`` output is one
strict JSON document with nothing on stderr; no half-written file is left; the traced peak stays under the
budget given with ``--max-gib``.

Profiles: the default (``GEORECALL_FUZZ`` unset) runs a modest, derandomized number of examples; set
``GEORECALL_FUZZ=long`` for a longer hunt (random, many examples).
"""

import contextlib
import io
import json
import os
import tracemalloc
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from georecall.verify.cli import main

LONG = os.environ.get("GEORECALL_FUZZ") == "long"
FUZZ = settings(
    max_examples=400 if LONG else 12,
    derandomize=not LONG,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)

small = st.integers(1, 12).map(str)
beyond = st.sampled_from(
    ["0", "-1", "nan", "inf", "1e400", "abc", "", "99999999999999999999", "2.5", "1e-320"]
)
num = st.one_of(small, beyond)
real = st.one_of(st.floats(0.001, 2.0).map(repr), beyond)
common = st.lists(st.sampled_from(["--json", "--quiet", "--seed", "--max-gib"]), max_size=3, unique=True)


def _common(draw) -> list[str]:
    out = []
    for flag in draw(common):
        out.append(flag)
        if flag == "--seed":
            out.append(draw(st.one_of(small, beyond)))
        elif flag == "--max-gib":
            out.append(draw(st.one_of(st.sampled_from(["0.05", "0.25", "1"]), beyond)))
    return out


SMALL = {
    "check single-hop": ["--N", "16", "--R", "2"],
    "check multi-hop": ["--N", "16", "--R", "2"],
    "tradeoff": ["--N", "64", "--R", "2"],
    "bounds": ["--N", "64", "--R", "2", "--k", "1"],
    "count": ["--N", "3", "--R", "2"],
    "precision": ["--N", "16", "--R", "2", "--max-bits", "4"],
    "train": ["--N", "8", "--R", "2", "--d", "8", "--steps", "2"],
    "sweep threshold": [
        "--N",
        "8",
        "--R",
        "2",
        "--seeds",
        "0",
        "--modes",
        "learned",
        "--steps",
        "2",
        "--d-max",
        "8",
        "--out",
        "{tmp}/s.jsonl",
    ],
}


@st.composite
def argvs(draw, tmp: str):
    command = draw(
        st.sampled_from(
            [
                "check single-hop",
                "check multi-hop",
                "tradeoff",
                "bounds",
                "count",
                "precision",
                "train",
                "sweep threshold",
                "demo",
                "nothing",
            ]
        )
    )
    # small defaults first (argparse keeps the last value, so drawn options override them)
    argv = command.split() + [a.replace("{tmp}", tmp) for a in SMALL.get(command, [])]
    options = {
        "check single-hop": {
            "--N": num,
            "--R": num,
            "--D": num,
            "--bits": num,
            "--lam": real,
            "--gate": real,
            "--codes": st.sampled_from(["binary", "sign", "gaussian", "bogus"]),
            "--construction": st.sampled_from(["geometric", "associative", "cot", "x:Y"]),
            "--integer": None,
            "--symmetric": None,
            "--save": st.just(f"{tmp}/m"),
        },
        "check multi-hop": {
            "--N": num,
            "--R": st.sampled_from(["1", "2", "3", "0"]),
            "--k": num,
            "--beta": real,
            "--attention": st.sampled_from(["softmax", "hard", "no"]),
            "--construction": st.sampled_from(["path-blocks", "cot", "associative-depth"]),
        },
        "tradeoff": {"--N": num, "--R": num, "--k-max": num},
        "bounds": {
            "--N": num,
            "--R": num,
            "--k": num,
            "--bits": real,
            "--format": st.sampled_from(["md", "csv", "json", "latex", "x"]),
        },
        "count": {
            "--N": st.sampled_from(["1", "2", "3", "4", "12", "0"]),
            "--R": st.sampled_from(["1", "2"]),
            "--k": num,
        },
        "precision": {"--N": num, "--R": num, "--k": st.sampled_from(["1", "2"]), "--max-bits": num},
        "train": {
            "--N": num,
            "--R": st.sampled_from(["1", "2"]),
            "--d": num,
            "--steps": st.sampled_from(["1", "3"]),
            "--lr": real,
            "--k": st.sampled_from(["1", "2"]),
            "--cot": None,
            "--attention": st.sampled_from(["uniform", "softmax"]),
            "--batch-size": num,
            "--out": st.sampled_from([f"{tmp}/t.npz", f"{tmp}", "/nonexistent/x.npz"]),
        },
        "sweep threshold": {
            "--N": st.sampled_from(["1", "8", "0"]),
            "--R": st.sampled_from(["1", "2"]),
            "--seeds": st.sampled_from(["0", "-1"]),
            "--steps": st.sampled_from(["1", "2"]),
            "--d-min": num,
            "--d-max": num,
            "--modes": st.sampled_from(["learned", "x"]),
            "--scheduler": st.sampled_from(["local:0", "tcp://h:0", "zzz"]),
            "--out": st.sampled_from([f"{tmp}/s.jsonl", f"{tmp}", "/nonexistent/s.jsonl"]),
        },
        "demo": {},
        "nothing": {},
    }[command]
    for flag in draw(st.lists(st.sampled_from(sorted(options) or ["--x"]), max_size=4, unique=True)):
        argv.append(flag)
        value = options.get(flag)
        if value is not None:
            argv.append(draw(value))
    return argv + _common(draw)


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    tracemalloc.start()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return code, out.getvalue(), err.getvalue(), peak


def _strict(name):
    raise AssertionError(f"non-strict JSON constant {name}")


def _check(argv, code, out, err, peak, tmp):
    assert code in (0, 1, 2), (argv, code, err[-2000:])
    assert "Traceback" not in err, (argv, err[-2000:])
    if code == 2:
        assert len(err.strip().splitlines()) == 1, (argv, err)
    if "--json" in argv and code in (0, 1):
        json.loads(out, parse_constant=_strict)
        assert err == "", (argv, err)
    assert not [n for n in os.listdir(tmp) if ".tmp-" in n], os.listdir(tmp)
    if "--max-gib" in argv and code in (0, 1):
        budget = float(argv[argv.index("--max-gib") + 1]) * 2**30
        assert peak <= budget, (argv, peak, budget)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("fuzz"))


@FUZZ
@given(data=st.data())
def test_random_arguments(fuzz_dir, data):
    argv = data.draw(argvs(fuzz_dir))
    code, out, err, peak = _run(argv)
    _check(argv, code, out, err, peak, fuzz_dir)


@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m.npz"
    assert (
        main(["train", "--N", "8", "--R", "2", "--d", "8", "--steps", "3", "--out", str(path), "--quiet"])
        == 0
    )
    return path.read_bytes()


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, payload in members.items():
            archive.writestr(name, payload)
    return buffer.getvalue()


def _npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@st.composite
def damaged(draw, model: bytes):
    kind = draw(
        st.sampled_from(
            ["empty", "truncated", "text", "random", "header", "wrongtype", "bigheader", "states"]
        )
    )
    if kind == "empty":
        return b""
    if kind == "truncated":
        return model[: draw(st.integers(1, len(model) - 1))]
    if kind == "text":
        return b'{"kind": "threshold"}\n'
    if kind == "random":
        return draw(st.binary(min_size=1, max_size=200))
    if kind == "header":
        header = draw(
            st.sampled_from(
                [
                    "[]",
                    "null",
                    "{",
                    '{"format": "georecall-model-1"}',
                    '"x"',
                    "1e999",
                    '{"format": "georecall-model-1", "structure": 3}',
                ]
            )
        )
        return _zip(
            {"__header__.npy": _npy(np.array(header)), "entity_embedding.npy": _npy(np.zeros((8, 8)))}
        )
    if kind == "wrongtype":
        return _zip({"states.npy": _npy(np.array(["a", "b"])), "attributes.npy": _npy(np.zeros(2, np.int64))})
    if kind == "bigheader":
        buffer = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            buffer, {"descr": "<f8", "fortran_order": False, "shape": (2**24, 2**10)}
        )
        return _zip({"states.npy": buffer.getvalue(), "attributes.npy": _npy(np.zeros((4, 1), np.int64))})
    n = draw(st.integers(1, 6))
    return _zip(
        {
            "states.npy": _npy(np.zeros((n, 3))),
            "attributes.npy": _npy(np.full((n, 1), draw(st.integers(-1, 3)), np.int64)),
        }
    )


@FUZZ
@given(data=st.data())
def test_damaged_files(fuzz_dir, model_bytes, data):
    payload = data.draw(damaged(model_bytes))
    path = os.path.join(fuzz_dir, "input.npz")
    with open(path, "wb") as f:
        f.write(payload)
    command = data.draw(
        st.sampled_from(
            [
                ["probe", path],
                ["transfer", path, "--steps", "1"],
                ["probe-hidden", path],
                ["probe", fuzz_dir],
                ["figures", "--from", path, "--out", fuzz_dir + "/figs"],
            ]
        )
    )
    argv = command + data.draw(st.sampled_from([[], ["--json"], ["--max-gib", "0.25"]]))
    code, out, err, peak = _run(argv)
    _check(argv, code, out, err, peak, fuzz_dir)


# ------------------------------------------------------------------------------------------- soundness
# Random small models against an exact rational forward pass (tests/test_soundness.py's reference): no PASS
# that exact arithmetic refutes, on every forward x decoder path, in float mode (float32 and float64 storage)
# and in integer mode. GEORECALL_FUZZ=long: many random models; the counts are printed at the end (-s).

SOUND_COUNTS = {"models": 0, "runs": 0, "certified": 0, "undecided": 0, "refuted": 0}


@pytest.fixture(scope="module")
def sound_counts():
    yield SOUND_COUNTS
    if LONG:
        print(f"\nsoundness fuzz: {SOUND_COUNTS}")


@st.composite
def fuzz_models(draw):
    from georecall.constructions.model import MLP, Attention, Layer, Model

    d, n_out, layers = draw(st.integers(1, 4)), draw(st.integers(2, 4)), draw(st.integers(1, 2))
    integer = draw(st.booleans())
    if integer:
        values = st.integers(-(2**13), 2**13).map(float) | st.sampled_from([0.0, 1.0, -1.0, 4097.0])
    else:
        values = st.floats(-4, 4, width=32) | st.sampled_from(
            [0.0, 1.0, -1.0, 2.0**53, -(2.0**53), 2.0**24 + 1, 3.0, 1e-30, 0.1, 1 / 3])

    def arr(*shape):
        n = int(np.prod(shape))
        return np.array(draw(st.lists(values, min_size=n, max_size=n)), dtype=np.float64).reshape(shape)

    stack = []
    for _ in range(layers):
        kind = draw(st.sampled_from(["none", "uniform"] + ([] if integer else ["hard"])))
        att = None
        if kind == "uniform":
            att = Attention("uniform", W_V=arr(1, d, d), W_O=arr(1, d, d))
        elif kind == "hard":
            att = Attention("hard", W_V=arr(1, d, d), W_O=arr(1, d, d), W_Q=arr(1, d, 1), W_K=arr(1, d, 1))
        m = draw(st.integers(0, 3))
        stack.append(Layer(att, MLP(arr(d, m), arr(m), arr(m, d), arr(d)) if m else None))
    U = arr(n_out, d)
    if draw(st.booleans()):
        U[1] = U[0]  # a constructed tie
    P = arr(3, d) if draw(st.booleans()) else None
    model = Model(arr(3, d), arr(2, d), U, tuple(stack), position_embedding=P)
    return model.astype(draw(st.sampled_from([np.float32, np.float64]))), integer


@FUZZ
@given(data=st.data())
def test_no_pass_that_exact_arithmetic_refutes(sound_counts, data):
    from fractions import Fraction

    from test_soundness import exact_margins

    from georecall.constructions.model import IntegerModeError
    from georecall.errors import InputError
    from georecall.verify.checking.check import check_queries

    model, integer = data.draw(fuzz_models())
    T = data.draw(st.integers(1, 3))
    tokens = np.array(data.draw(st.lists(st.lists(st.integers(0, 4), min_size=T, max_size=T), min_size=1,
                                         max_size=4)))
    answers = np.array(data.draw(st.lists(st.integers(0, model.n_out - 1), min_size=len(tokens),
                                          max_size=len(tokens))))
    exact = exact_margins(model, tokens, answers)
    sound_counts["models"] += 1
    for forward_ in ("auto", "dense", "tables"):
        for decoder in ("auto", "dense"):
            try:
                result = check_queries(model, tokens, answers, integer=integer, forward=forward_,
                                       decoder=decoder, keep=True)
            except (InputError, IntegerModeError):
                continue  # the path or the mode refused, with its reason
            sound_counts["runs"] += 1
            sound_counts["certified"] += result.n_correct
            sound_counts["undecided"] += result.n_undecided
            lo = result.margins
            refuted = [q for q, m in enumerate(exact) if (lo[q] > 0 and m <= 0)
                       or (np.isfinite(lo[q]) and Fraction(float(lo[q])) > m)]
            wrong_claims = result.n_queries - result.n_correct - result.n_undecided
            if refuted or wrong_claims > sum(m <= 0 for m in exact):
                sound_counts["refuted"] += 1
            assert not refuted, (forward_, decoder, integer, refuted, lo.tolist(), [str(m) for m in exact])
            assert wrong_claims <= sum(m <= 0 for m in exact)
            if integer:
                assert [Fraction(float(v)) for v in lo] == exact
