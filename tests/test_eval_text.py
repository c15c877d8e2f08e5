"""What `eval` and `transfer` print for a person (georecall.cli.render): margin intervals with the digits that
tell their ends apart (and still contain the exact value), notes in plain words, and the two transfer numbers
explained."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import numpy as np
import pytest

from georecall.cli import main
from georecall.cli.render import interval_text, plain_note
from georecall.constructions import registry
from georecall.constructions.storage import save_model
from georecall.theory.tasks import task_for_seed


@pytest.mark.parametrize("lo, hi", [(5.109, 5.109 + 9.4e-8), (0.6666667151, 0.6666667151 + 8.2e-12),
                                    (1.0, np.nextafter(1.0, 2.0)), (-3.25, -3.2499), (1e-300, 2e-300),
                                    (12345.678, 98765.4321)])
def test_interval_ends_are_told_apart_and_contain_the_interval(lo, hi):
    low, high = interval_text(lo, hi)
    assert low != high
    assert Decimal(low) <= Decimal(lo) and Decimal(high) >= Decimal(hi)  # rounded outward
    assert len(re.sub(r"[^0-9]", "", low)) >= 4


def test_interval_of_equal_ends_is_the_float_itself():
    assert interval_text(0.1, 0.1) == ("0.1", "0.1")
    assert float(interval_text(2 / 3, 2 / 3)[0]) == 2 / 3


def test_four_digits_would_not_tell_these_ends_apart():
    """The control: the old rendering (4 significant digits) printed both ends alike."""
    lo, hi = 5.109, 5.109 + 9.4e-8
    assert f"{lo:.4g}" == f"{hi:.4g}"
    assert interval_text(lo, hi)[0] != interval_text(lo, hi)[1]


def _g1_file(tmp_path, *, dtype=np.float32, readout_bump: float = 0.0):
    task = task_for_seed(16, 2, 0)
    model = registry.get("geometric").build(task).model
    if readout_bump:
        dense = model.with_dense_readout()
        U = dense.unembedding.copy()
        U[0, dense.readout.columns[0]] += readout_bump  # no longer a ±λ sign table
        model = dense.replace(unembedding=U)
    return save_model(model.astype(dtype), str(tmp_path / "m.npz"), extra_arrays={"task_table": task.table})


def test_eval_prints_the_margin_interval_its_document_holds(tmp_path, capsys):
    path = _g1_file(tmp_path)
    assert main(["eval", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["eval", path]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.strip().startswith("min "))
    low, high = re.search(r"\[([^,]+), ([^\]]+)\]", line).groups()
    lo, hi = doc["min_margin"]["lo"], doc["min_margin"]["hi"]
    assert lo < hi and low != high
    assert Decimal(low) <= Decimal(lo) and Decimal(high) >= Decimal(hi)
    # every quantile the document holds is printed (the 10% one was not), in order
    labels = [x.split()[0] for x in text.splitlines() if x.startswith("  ") and "[" in x]
    assert labels == ["min", "mean", "1%", "10%", "median"] and len(doc["margin_quantiles"]) == 3


def test_eval_notes_say_what_they_mean_for_the_user(tmp_path, capsys):
    path = _g1_file(tmp_path, dtype=np.float64, readout_bump=0.25)
    assert main(["eval", path, "--json"]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    assert "decoder" in doc["note"]  # the document keeps the technical reason
    main(["eval", path])
    notes = [x for x in capsys.readouterr().out.splitlines() if x.startswith("note:")]
    assert notes and all("2^D" not in x and "decoder:" not in x and "forward:" not in x for x in notes)
    assert any("same result, only slower" in x for x in notes)


def test_plain_note_keeps_a_reason_it_does_not_know():
    said = plain_note("decoder: n_out = 512 is not 2^D for the D = 64 coordinates the read-out reads; "
                      "something new")
    assert len(said) == 2 and "512 output logits" in said[0] and "2^D" not in said[0]
    assert said[1] == "something new"


def test_transfer_explains_its_two_numbers(tmp_path, capsys):
    path = _g1_file(tmp_path, dtype=np.float64)
    assert main(["transfer", path, "--steps", "2"]) in (0, 1)
    text = capsys.readouterr().out
    closed = next(x for x in text.splitlines() if "closed form" in x)
    fitted = next(x for x in text.splitlines() if "embeddings fitted" in x)
    assert "no training" in closed and "linear maps fitted on the old subjects" in closed
    assert "every other weight frozen" in fitted
