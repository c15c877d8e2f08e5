"""The capacity-grid figure and table (src/georecall/experiments/threshold_figure.py): rows, ratios, fits and
legibility."""

import json
import math

import pytest

from georecall.experiments import threshold_figure as TF


def _record(R, mode, seed, d_star, N=4096):
    return {"kind": "threshold", "N": N, "R": R, "mode": mode, "seed": seed, "d_star": d_star,
            "monotone": True}


RECORDS = [_record(2, "learned", 0, 8), _record(2, "learned", 1, 8), _record(2, "frozen", 0, 16),
           _record(2, "frozen", 1, 18), _record(4, "learned", 0, 16), _record(4, "frozen", 0, 36),
           _record(8, "learned", 0, 30), _record(8, "frozen", 0, None), _record(2, "learned", 0, 99, N=1024),
           {"kind": "trial", "N": 4096, "R": 8, "mode": "frozen", "seed": 0, "d": 70, "reached": False}]


def test_rows_hold_each_seed_the_means_and_the_ratio_of_the_means():
    rows = TF.grid_rows(RECORDS)
    assert [row["R"] for row in rows] == [2, 4, 8]
    assert rows[0]["learned"] == {0: 8, 1: 8} and rows[0]["frozen"] == {0: 16, 1: 18}
    assert rows[0]["ratio"] == pytest.approx(17 / 8) and rows[0]["x"] == pytest.approx(2 * math.log(4096))
    assert rows[2]["frozen"] == {} and rows[2]["ratio"] is None  # never reached: no d*, no ratio


def test_the_first_record_of_a_configuration_wins():
    rows = TF.grid_rows([_record(2, "learned", 0, 8), _record(2, "learned", 0, 10)])
    assert rows[0]["learned"] == {0: 8}


def test_the_table_states_both_fits_with_their_standard_errors():
    text = TF.grid_table(RECORDS)
    assert "| 8 | 66.5 | 30 | — | — |" in text
    x = [2 * math.log(4096)] * 2 + [4 * math.log(4096), 8 * math.log(4096)]
    c = sum(a * b for a, b in zip(x, (8, 8, 16, 30))) / sum(a * a for a in x)  # least squares by hand
    assert f"learned, every R: c = {c:.3f}" in text and "learned, R ≤ 4:" in text


def test_the_figure_is_legible_and_none_without_records(tmp_path):
    pytest.importorskip("matplotlib", reason="the figures need the optional plot extra")
    from georecall.experiments import plotting as P

    assert TF.capacity_grid_figure([_record(2, "learned", 0, None)]) is None
    fig = TF.capacity_grid_figure(RECORDS)
    assert P.text_overlaps(fig) == [] and P.small_texts(fig) == []
    assert fig.get_size_inches()[0] <= 11
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("N = 1024 (0.1.0, range over 3 seeds)" in t for t in labels)
    assert any("band predicted from R ≤ 4" in t for t in labels)
    P.import_pyplot().close(fig)
    path = tmp_path / "r.jsonl"
    fields = {"steps": 500, "lr": 0.01, "width_factor": 4, "attention": "uniform", "dtype": "float32",
              "version": "0.2.0", "trials": []}
    path.write_text("".join(json.dumps({**r, **fields}) + "\n" for r in RECORDS if r["kind"] == "threshold"))
    assert TF.main(["--from", str(path), "--out", str(tmp_path / "figs")]) == 0
    assert (tmp_path / "figs" / "capacity_grid.png").stat().st_size > 0
    assert TF.main(["--from", str(tmp_path), "--out", str(tmp_path / "figs")]) == 2  # a directory: refused


def _trial(R, mode, seed, d, reached, seconds=100.0):
    return {"kind": "trial", "N": 4096, "R": R, "mode": mode, "seed": seed, "d": d, "reached": reached,
            "seconds": seconds, "steps_run": 500 if not reached else 200}


def test_an_unfinished_search_is_the_bracket_its_trials_leave_and_is_listed_with_its_cost():
    records = [*RECORDS[:7], _trial(16, "learned", 0, 62, False, 3600.0), _trial(16, "learned", 0, 64, True),
               _trial(16, "learned", 0, 80, False),  # above the success: not the bracket's lower end
               _trial(16, "frozen", 0, 140, False), _trial(2, "learned", 0, 8, True)]  # R = 2: finished
    rows = TF.unfinished_searches(records)
    assert [(u["R"], u["mode"], u["lo"], u["hi"]) for u in rows] == [(16, "frozen", 140, None),
                                                                     (16, "learned", 62, 64)]
    text = TF.grid_table(records)
    assert "unfinished: R = 16 learned seed 0: 62 < d* ≤ 64 (d = 62 not reached (3,600 s, 500 steps)" in text
    assert "unfinished: R = 16 frozen seed 0: d* > 140" in text and "R = 2 learned seed 0: " not in text


def test_the_figure_draws_unfinished_searches_legibly(tmp_path):
    pytest.importorskip("matplotlib", reason="the figures need the optional plot extra")
    from georecall.experiments import plotting as P

    records = [*RECORDS[:7], _trial(16, "learned", 0, 62, False), _trial(16, "frozen", 0, 140, False)]
    fig = TF.capacity_grid_figure(records)
    assert P.text_overlaps(fig) == [] and P.small_texts(fig) == []
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert sum("search unfinished" in t for t in labels) == 2
    assert fig.axes[0].get_xlim()[1] >= 16 * math.log(4096)  # the R = 16 bars are inside the axes
    P.import_pyplot().close(fig)


_SETTINGS = {"steps": 500, "lr": 0.01, "width_factor": 4, "attention": "uniform", "dtype": "float32",
             "version": "0.2.0"}


def _search(R, mode, seed, d_star, step_of_d_star, steps=500):
    """A finished search at N = 4096: its threshold record and its deciding trial (reached at the step)."""
    fields = {**_SETTINGS, "steps": steps, "N": 4096, "R": R, "mode": mode, "seed": seed}
    return [{**fields, "kind": "trial", "d": d_star, "reached": True, "steps_run": step_of_d_star},
            {**fields, "kind": "threshold", "d_star": d_star, "last_failure": d_star - 2, "monotone": True,
             "trials": []}]


def _rerun(R, mode, seed, d, reached, steps=1000, steps_run=None):
    return {**_SETTINGS, "kind": "trial", "N": 4096, "R": R, "mode": mode, "seed": seed, "d": d,
            "reached": reached, "steps": steps, "steps_run": steps_run or steps}


def test_the_budget_report_names_the_bound_searches_and_their_reruns_at_twice_the_steps(tmp_path, capsys):
    records = [*_search(16, "frozen", 0, 114, 498), *_search(16, "learned", 0, 70, 405),  # 498 ≥ 450: bound
               *_search(16, "learned", 1, 68, 450)]  # exactly 90 %: bound
    reruns = [_rerun(16, "frozen", 0, 112, False), _rerun(16, "frozen", 0, 114, True, steps_run=498),
              _rerun(16, "frozen", 0, 110, False),  # neither d* nor the width below: not a rerun of it
              _rerun(16, "frozen", 1, 112, True),  # another seed's
              _rerun(16, "learned", 1, 66, True, steps=750, steps_run=700)]  # not twice the steps
    lines = TF.budget_report(records, reruns)
    assert lines[0] == "budget-bound searches (deciding trial at ≥ 90 % of its steps): 2 of 3"
    assert lines[1:] == [
        "  frozen N = 4096 R = 16 seed 0: d* = 114 at step 498 of 500; d = 112: not reached in 1000, "
        "d = 114: reached in 1000 (at step 498)",
        "  learned N = 4096 R = 16 seed 1: d* = 68 at step 450 of 500; no rerun at twice the steps yet"]
    # the command: the reruns from their own files, the table and figure from --from alone
    main, extra = tmp_path / "main.jsonl", tmp_path / "reruns.jsonl"
    main.write_text("".join(json.dumps(r) + "\n" for r in records))
    extra.write_text("".join(json.dumps(r) + "\n" for r in reruns))
    pytest.importorskip("matplotlib", reason="the figure needs the optional plot extra")
    assert TF.main(["--from", str(main), "--reruns", str(extra), "--out", str(tmp_path / "figs")]) == 0
    out = capsys.readouterr().out
    assert lines[1] in out and "| 16 | 133.1 | 70, 68 | 114 |" in out


def test_the_search_table_gives_each_search_its_trials_bound_and_reruns():
    records = [*_search(16, "frozen", 0, 114, 498), *_search(16, "learned", 0, 70, 405),
               {**_SETTINGS, "kind": "trial", "N": 4096, "R": 16, "mode": "frozen", "seed": 0, "d": 112,
                "reached": False, "steps_run": 500},
               {**_SETTINGS, "kind": "trial", "N": 4096, "R": 16, "mode": "frozen", "seed": 2, "d": 116,
                "reached": True, "steps_run": 448},  # an unfinished search: its bracket
               {**_SETTINGS, "kind": "trial", "N": 4096, "R": 16, "mode": "frozen", "seed": 2, "d": 108,
                "reached": False, "steps_run": 500},
               *_search(8, "frozen", 0, 66, 350)]  # another R: not in this table
    reruns = [_rerun(16, "frozen", 0, 112, True, steps_run=900)]
    rows = TF.search_table(records, reruns).splitlines()[2:]
    assert rows == [
        "| learned | 0 | **70** | 0.526 | 405 of 500 | no | 70 ✓405 | — |",
        "| frozen | 0 | **114** | 0.857 | 498 of 500 | yes | 112 ✗, 114 ✓498 | 112 ✓900 |",
        "| frozen | 2 | 108 < d* ≤ 116 (unfinished) | — | — | — | 108 ✗, 116 ✓448 | — |"]
    assert "not run yet" in TF.search_table(records)  # a bound search without its rerun says so
