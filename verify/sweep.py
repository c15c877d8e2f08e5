"""Capacity-threshold sweeps (THEORY.md §5): the smallest d at which gradient descent reaches 100% accuracy.

For each configuration (N, R, mode, seed), ``mode`` = ``learned`` (every parameter trained) or ``frozen``
(entity and relation embeddings frozen at their random initialization, so the facts must go into the MLP):

- the task is ``random_task(N, R)`` seeded by ``(seed, N, R)``: the same facts for both modes and every d;
- a *trial* trains a fresh model of width d with MLP width ``m = width_factor·d`` (default 4d), full batch,
  Adam, for at most ``steps`` steps, seeded by ``(seed, N, R, mode, d)``, and records whether it reached 100%
  (confirmed by the exhaustive checker). With ``k > 1`` the facts are all N·R^k k-hop queries; with ``cot`` the
  model is trained and judged on every step of the chain under teacher forcing (exact at every step under
  teacher forcing is the same as exact greedy decoding, by induction over the steps);
- the threshold search doubles d from ``d_min`` until a trial succeeds, then bisects between the last failure
  and the first success until they are ``resolution`` apart.

Monotonicity. Bisection assumes that success is monotone in d. Every trial is kept, and the record says
``monotone: false`` if some failing d lies above some successful d (the threshold is then the smallest
successful d found, and the record is flagged rather than trusted).

Resumability. Every trial is appended to the JSONL file as soon as it finishes (``{"kind": "trial", ...}``) and
every finished search as ``{"kind": "threshold", ...}``. A rerun reads the file, skips finished
configurations and reuses finished trials: an interrupted sweep loses nothing but the trial in progress, and
because each trial is seeded by its own parameters the rerun writes the same records. ``workers > 1`` runs
configurations in parallel processes; only the parent process writes the file.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import queue
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np

from georecall.theory import __version__
from georecall.theory.tasks import check_positive_int, random_task
from georecall.verify.train import init_model, train, training_data

MODES = ("learned", "frozen")
_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
FROZEN_GROUPS = {"learned": (), "frozen": ("entity_embedding", "relation_embedding")}


@dataclass(frozen=True)
class TrialSettings:
    """Everything besides (N, R, mode, seed, d) that a trial's result depends on."""

    steps: int = 500
    lr: float = 1e-2
    width_factor: int = 4
    attention: str = "uniform"
    dtype: str = "float32"
    k: int = 1  # hops of every query
    cot: bool = False  # train and judge chain-of-thought under teacher forcing
    heads: int = 1

    def key(self) -> tuple:
        return (self.steps, self.lr, self.width_factor, self.attention, self.dtype, self.k, self.cot, self.heads)


def _mode_id(mode: str) -> int:
    return MODES.index(mode)


def run_trial(N: int, R: int, mode: str, seed: int, d: int, settings: TrialSettings) -> dict:
    """Train one model and report whether it reached 100% on all N·R facts."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    task = random_task(N, R, np.random.default_rng(np.random.SeedSequence([seed, N, R])))
    tokens, answers, positions, T = training_data(task, settings.k, settings.cot)
    rng = np.random.default_rng(np.random.SeedSequence([seed, N, R, _mode_id(mode), d]))
    model = init_model(N, R, d, settings.width_factor * d, attention=settings.attention, heads=settings.heads,
                       positions=T if settings.k > 1 or settings.cot else None, rng=rng,
                       dtype=np.dtype(settings.dtype))
    result = train(model, tokens, answers, steps=settings.steps, lr=settings.lr, frozen=FROZEN_GROUPS[mode],
                   positions=positions, rng=rng, dtype=np.dtype(settings.dtype))
    return {"kind": "trial", "N": N, "R": R, "mode": mode, "seed": seed, "d": d,
            "m": settings.width_factor * d, "reached": result.reached, "steps_run": result.steps,
            "final_loss": round(result.losses[-1], 6), "final_batch_accuracy": result.accuracies[-1],
            "seconds": round(result.seconds, 3), **asdict(settings), "version": __version__}


def find_threshold(N: int, R: int, mode: str, seed: int, settings: TrialSettings, *, d_min: int = 4,
                   d_max: int = 1024, resolution: int = 2, known: dict[int, dict] | None = None,
                   on_trial=None) -> dict:
    """Doubling then bisection over d; ``known`` trials (by d) are reused instead of re-run."""
    known = dict(known or {})

    def outcome(d: int) -> bool:
        if d not in known:
            known[d] = run_trial(N, R, mode, seed, d, settings)
            if on_trial is not None:
                on_trial(known[d])
        return known[d]["reached"]

    lo, hi, d = None, None, d_min
    while d <= d_max:  # doubling: lo = largest failure, hi = first success
        if outcome(d):
            hi = d
            break
        lo, d = d, d * 2
    if hi is not None and lo is not None:
        while hi - lo > resolution:
            mid = (lo + hi) // 2
            if outcome(mid):
                hi = mid
            else:
                lo = mid
    successes = [t["d"] for t in known.values() if t["reached"]]
    failures = [t["d"] for t in known.values() if not t["reached"]]
    monotone = not successes or not failures or max(failures) < min(successes)
    return {"kind": "threshold", "N": N, "R": R, "mode": mode, "seed": seed,
            "d_star": min(successes) if successes else None, "last_failure": lo,
            "trials": sorted(known), "monotone": monotone, "d_min": d_min, "d_max": d_max,
            "resolution": resolution, **asdict(settings), "version": __version__}


def _config_key(record: dict) -> tuple:
    return (record["N"], record["R"], record["mode"], record["seed"], record["steps"], record["lr"],
            record["width_factor"], record["attention"], record["dtype"], record.get("k", 1),
            record.get("cot", False), record.get("heads", 1))


def read_records(path: str) -> list[dict]:
    """Every complete JSON line of a sweep file (a line cut short by an interruption is skipped)."""
    if not os.path.exists(path):
        return []
    records = []
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def _append(path: str, record: dict) -> None:
    """Append one JSON line; a line left unfinished by an interruption is closed first, not continued."""
    with open(path, "a+b") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() > 0:
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                handle.write(b"\n")
        handle.write((json.dumps(record, sort_keys=True) + "\n").encode())
        handle.flush()
        os.fsync(handle.fileno())


def _worker(args):
    N, R, mode, seed, settings, kwargs, known, trial_queue = args
    return find_threshold(N, R, mode, seed, settings, known=known, on_trial=trial_queue.put, **kwargs)


def sweep(path: str, Ns, Rs, modes=MODES, seeds=(0, 1, 2), *, settings: TrialSettings = TrialSettings(),
          d_min: int = 4, d_max: int = 1024, resolution: int = 2, workers: int = 1, progress: bool = True,
          max_trials: int | None = None) -> list[dict]:
    """Run (or resume) the threshold search for every configuration; returns all threshold records.

    ``max_trials`` stops after that many new trials (for tests of resumption; the file stays consistent).
    """
    workers = check_positive_int("workers", workers)
    for name, value in (("d_min", d_min), ("d_max", d_max), ("resolution", resolution)):
        check_positive_int(name, value)
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    configs = [(N, R, mode, seed) for N in Ns for R in Rs for mode in modes for seed in seeds]
    records = read_records(path)
    done = {_config_key(r) for r in records if r["kind"] == "threshold"}
    trials: dict[tuple, dict[int, dict]] = {}
    for r in records:
        if r["kind"] == "trial":
            trials.setdefault(_config_key(r), {})[r["d"]] = r
    todo = [c for c in configs if (*c, *settings.key()) not in done]
    kwargs = {"d_min": d_min, "d_max": d_max, "resolution": resolution}
    start, new_trials = time.perf_counter(), 0
    finished = len(configs) - len(todo)

    def report(message: str) -> None:
        if progress:
            elapsed = time.perf_counter() - start
            rate = elapsed / max(finished - (len(configs) - len(todo)), 1)
            remaining = rate * (len(configs) - finished) if finished > len(configs) - len(todo) else float("nan")
            eta = "?" if math.isnan(remaining) else f"{remaining / 60:.1f} min"
            bar = "#" * int(30 * finished / max(len(configs), 1))
            print(f"\r[{bar:<30}] {finished}/{len(configs)} configs, ETA {eta} | {message}"[:160].ljust(160),
                  end="", file=sys.stderr, flush=True)

    class _Stop(Exception):
        pass

    def on_trial(record: dict) -> None:
        nonlocal new_trials
        _append(path, record)
        new_trials += 1
        report(f"N={record['N']} R={record['R']} {record['mode']} seed {record['seed']}: d={record['d']} "
               f"{'reached' if record['reached'] else 'failed'}")
        if max_trials is not None and new_trials >= max_trials:
            raise _Stop

    try:
        if workers == 1:
            for N, R, mode, seed in todo:
                key = (N, R, mode, seed, *settings.key())
                result = find_threshold(N, R, mode, seed, settings, known=trials.get(key), on_trial=on_trial,
                                        **kwargs)
                _append(path, result)
                finished += 1
                report(f"N={N} R={R} {mode} seed {seed}: d* = {result['d_star']}")
        else:
            # Fresh (spawned) workers with one BLAS thread each: W processes on W cores, no oversubscription.
            saved = {name: os.environ.get(name) for name in _THREAD_VARIABLES}
            os.environ.update({name: "1" for name in _THREAD_VARIABLES})
            context = multiprocessing.get_context("spawn")
            try:
                manager = context.Manager()
                pool = ProcessPoolExecutor(workers, mp_context=context)
                trial_queue = manager.Queue()
                futures = {pool.submit(_worker, (N, R, mode, seed, settings, kwargs,
                                                 trials.get((N, R, mode, seed, *settings.key())), trial_queue)): 1
                           for N, R, mode, seed in todo}
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
            with manager, pool:
                pending = set(futures)
                while pending:
                    try:
                        on_trial(trial_queue.get(timeout=0.2))
                    except queue.Empty:
                        pass
                    for future in [f for f in pending if f.done()]:
                        pending.discard(future)
                        while True:  # drain the trials this configuration sent before its result
                            try:
                                on_trial(trial_queue.get_nowait())
                            except queue.Empty:
                                break
                        result = future.result()
                        _append(path, result)
                        finished += 1
                        report(f"N={result['N']} R={result['R']} {result['mode']} seed {result['seed']}: "
                               f"d* = {result['d_star']}")
    except _Stop:
        pass
    if progress:
        print(file=sys.stderr)
    keys = {(*c, *settings.key()) for c in configs}
    return [r for r in read_records(path) if r["kind"] == "threshold" and _config_key(r) in keys]


def fit_thresholds(records: list[dict]) -> dict[str, dict]:
    """Per mode: least-squares fit of ``d* = c·R·ln N`` (scipy), c per seed and its spread over seeds; and a
    power law ``d* = a·N^p·R^q`` (exponents fitted where the records vary N, resp. R)."""
    from scipy.optimize import curve_fit

    out = {}
    for mode in MODES:
        rows = [r for r in records if r["mode"] == mode and r["d_star"] is not None]
        if not rows:
            continue
        x = np.array([r["R"] * math.log(r["N"]) for r in rows], dtype=float)
        y = np.array([r["d_star"] for r in rows], dtype=float)
        with warnings.catch_warnings():  # a perfect fit (too few points) has no covariance estimate
            warnings.simplefilter("ignore")
            (c,), cov = curve_fit(lambda t, c: c * t, x, y, p0=[1.0])
        per_seed = {}
        for seed in sorted({r["seed"] for r in rows}):
            mask = np.array([r["seed"] == seed for r in rows])
            per_seed[seed] = float(np.sum(x[mask] * y[mask]) / np.sum(x[mask] ** 2))
        values = np.array(list(per_seed.values()))
        # A second form that can tell logarithmic from polynomial growth: log d* = log a + p·log N + q·log R
        # (p, q fitted only when the records hold at least two N, resp. two R).
        Ns = np.array([r["N"] for r in rows], dtype=float)
        Rs = np.array([r["R"] for r in rows], dtype=float)
        columns = [np.ones_like(y)] + [np.log(v) for v in (Ns, Rs) if np.unique(v).size > 1]
        coef = np.linalg.lstsq(np.stack(columns, axis=1), np.log(y), rcond=None)[0]
        names = ["log_a"] + [n for n, v in (("p_N", Ns), ("q_R", Rs)) if np.unique(v).size > 1]
        power_law = {name: float(value) for name, value in zip(names, coef)}
        out[mode] = {"power_law": power_law, "c": float(c), "c_stderr": float(math.sqrt(cov[0, 0])) if np.isfinite(cov[0, 0]) else None,
                     "c_per_seed": per_seed, "c_seed_mean": float(values.mean()),
                     "c_seed_std": float(values.std(ddof=1)) if values.size > 1 else 0.0,
                     "points": len(rows), "non_monotone": sum(not r["monotone"] for r in rows),
                     "unreached": sum(1 for r in records if r["mode"] == mode and r["d_star"] is None)}
    return out


def summary_table(records: list[dict]) -> str:
    """d* per (N, R, mode) over seeds: mean, min, max."""
    groups: dict[tuple, list] = {}
    for r in records:
        groups.setdefault((r["N"], r["R"], r["mode"]), []).append(r["d_star"])
    lines = [f"{'N':>6} {'R':>3} {'mode':>8}  {'d* per seed':<20} {'mean':>7} {'R·lnN':>7}"]
    for (N, R, mode), values in sorted(groups.items()):
        reached = [v for v in values if v is not None]
        mean = f"{np.mean(reached):7.1f}" if reached else "      —"
        lines.append(f"{N:>6} {R:>3} {mode:>8}  {str(values):<20} {mean} {R * math.log(N):7.1f}")
    return "\n".join(lines)
