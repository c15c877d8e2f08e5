"""The threshold search rule of a capacity sweep (:mod:`.sweep`): which width d to train next, given the
outcomes so far.

- :class:`ThresholdSearch` (``search="doubling"``, the default) doubles d from ``d_min`` until a trial
  succeeds, then bisects between the last failure and the first success until they are ``resolution`` apart;
- :class:`PredictedSearch` (``search="predicted"``) starts at a predicted width (:func:`.sweep_fit.
  predict_threshold`), takes every recorded trial of the configuration into its bracket, gallops outward from
  the prediction and bisects.

Monotonicity. Bisection assumes that success is monotone in d. Every trial the search visits is kept, and the
threshold record says ``monotone: false`` if some failing d lies above some successful d (the threshold is
then the smallest successful d found, and the record is flagged rather than trusted).

Censoring. A search can end without bracketing the threshold from both sides. At the ceiling: no trial up to
``d_max`` reached 100 % (``d_star`` is ``None``; ``last_failure`` is the largest width tried). At the floor:
the smallest width tried reached 100 % with no failure below it while a smaller width could have been tried
(``d_star > SMALLEST_WIDTH``, typically ``d_star == d_min``): d* is then only an upper bound, and the record
says ``"censored": "floor"`` (:func:`floor_censored`). A search whose smallest success is ``SMALLEST_WIDTH``
itself measured its threshold (nothing below could be tried) and is not censored. Records without the key
(every record written before it existed, and every search that is not floor-censored) read as before.

:func:`find_threshold` runs one search in this process; :func:`.sweep.sweep` runs many at once on executors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict

from georecall.errors import InputError
from georecall.experiments.sweep_trial import SEED_CONTRACT, TrialSettings, check_mode, run_trial
from georecall.theory import __version__
from georecall.theory.tasks import check_positive_int

__all__ = ["FLOOR", "SEARCHES", "SMALLEST_WIDTH", "PredictedSearch", "ThresholdSearch", "check_search_range",
           "find_threshold", "floor_censored", "make_search", "threshold_record"]

SEARCHES = ("doubling", "predicted")
SMALLEST_WIDTH = 1  # the smallest width d a search may try (check_search_range: d_min >= 1)
FLOOR = "floor"  # the value of a threshold record's "censored" key when d* is only an upper bound


class ThresholdSearch:
    """The doubling-then-bisection search over d as a state machine, so a driver can run many at once.

    ``next_d`` is the width to try next (``None`` once the search is over); :meth:`feed` gives the outcome of
    that trial. ``visited`` maps every d tried to its outcome.

    Parameters
    ----------
    d_min, d_max : int
        Doubling starts at ``d_min`` and gives up above ``d_max``.
    resolution : int
        Bisection stops when the last failure and the first success are at most this far apart.
    """

    def __init__(self, d_min: int, d_max: int, resolution: int):
        self.d_min, self.d_max, self.resolution = d_min, d_max, resolution
        self.visited: dict[int, bool] = {}
        self.lo: int | None = None  # largest failure below the first success
        self.hi: int | None = None  # smallest success
        self.next_d: int | None = d_min if d_min <= d_max else None
        self._doubling = True

    def feed(self, reached: bool) -> None:
        """Record the outcome of the trial at ``next_d`` and move to the next width (or finish).

        Parameters
        ----------
        reached : bool
            Whether the trial at ``next_d`` reached 100%.

        Raises
        ------
        RuntimeError
            The search is over.
        """
        d = self.next_d
        if d is None:
            raise RuntimeError("the search is over")
        self.visited[d] = bool(reached)
        if self._doubling:
            if reached:
                self.hi, self._doubling = d, False
            else:
                self.lo = d
                self.next_d = d * 2 if d * 2 <= self.d_max else None
                return
        elif reached:
            self.hi = d
        else:
            self.lo = d
        if self.lo is not None and self.hi is not None and self.hi - self.lo > self.resolution:
            self.next_d = (self.lo + self.hi) // 2
        else:
            self.next_d = None

    @property
    def done(self) -> bool:
        """Whether the search has finished."""
        return self.next_d is None


class PredictedSearch:
    """A threshold search that starts at a predicted width and brackets outward from it, then bisects.

    Every outcome known for the configuration (recorded trials, whatever search ran them) counts: under the
    monotone rule the threshold lies above every failure and at or below every success, so the search only
    tries widths strictly between the largest failure below the smallest success (``lo``) and the smallest
    success (``hi``). The next width is a function of (``lo``, ``hi``, the prediction) alone, never of the
    order in which outcomes arrived, so a search resumed from its recorded trials takes the path an
    uninterrupted one takes. With ``p`` the prediction rounded to a multiple of ``resolution`` and ``r`` the
    resolution:

    - nothing on one side of ``p`` yet: try ``p`` itself (moved inside the open bracket);
    - successes only, ``hi <= p``: gallop down to ``p − (2·(p − hi) + r)`` (offsets r, 3r, 7r, ...: steps
      that double); failures only, ``lo >= p``: gallop up to ``p + 2·(lo − p) + r``;
    - both: try ``p`` when it lies strictly inside, else bisect, until ``hi − lo <= resolution``.

    From a prediction within e of the threshold this takes at most ``2 + 2·⌈log2(1 + e/r)⌉`` trials (the
    doubling search of :class:`ThresholdSearch` takes about ``log2(d*/d_min)`` doublings and ``log2(d*/2r)``
    bisections, whatever the prediction).

    The interface is :class:`ThresholdSearch`'s: ``next_d`` (``None`` when done), :meth:`feed`, ``visited``
    (every outcome used, the known ones included), ``lo`` and ``hi``.

    Parameters
    ----------
    prediction : float
        The predicted threshold (e.g. ``c·R·ln N`` fitted from earlier records,
        :func:`.sweep_fit.predict_threshold`).
    d_min, d_max : int
        The widths the search may try.
    resolution : int
        Stop when ``hi − lo`` is at most this.
    known : dict, optional
        Outcomes already recorded, ``{d: reached}``.

    Raises
    ------
    InputError
        A prediction that is not a finite number.
    """

    def __init__(self, prediction: float, d_min: int, d_max: int, resolution: int,
                 known: dict[int, bool] | None = None):
        if isinstance(prediction, bool) or not (isinstance(prediction, (int, float))
                                                and math.isfinite(prediction)):
            raise InputError(f"the prediction must be a finite number, got {prediction!r}")
        self.prediction = float(prediction)
        self.d_min, self.d_max, self.resolution = d_min, d_max, resolution
        self.start = resolution * round(self.prediction / resolution)
        self.visited: dict[int, bool] = {int(d): bool(ok) for d, ok in (known or {}).items()}
        self.next_d: int | None = None
        self._advance()

    @property
    def hi(self) -> int | None:
        """The smallest success (``None`` before one)."""
        wins = [d for d, ok in self.visited.items() if ok]
        return min(wins) if wins else None

    @property
    def lo(self) -> int | None:
        """The largest failure below the smallest success (``None`` before one)."""
        hi = self.hi
        losses = [d for d, ok in self.visited.items() if not ok and (hi is None or d < hi)]
        return max(losses) if losses else None

    def _advance(self) -> None:
        lo, hi, res, p = self.lo, self.hi, self.resolution, self.start
        low = self.d_min if lo is None else lo + 1  # the widths still worth a trial: [low, high]
        high = self.d_max if hi is None else hi - 1
        if lo is not None and hi is not None and hi - lo <= res or low > high:
            self.next_d = None
            return
        if lo is None and hi is None or low <= p <= high and p not in self.visited:
            d = p  # (moved into [low, high] below)
        elif lo is not None and hi is not None:
            d = (lo + hi) // 2
        elif hi is not None:  # successes only, at or below the prediction: gallop down
            d = p - (2 * (p - hi) + res)
        else:  # failures only, at or above the prediction: gallop up
            assert lo is not None  # not both None (the first branch)
            d = p + 2 * (lo - p) + res
        self.next_d = min(max(d, low), high)

    def feed(self, reached: bool) -> None:
        """Record the outcome of the trial at ``next_d`` and move to the next width (or finish).

        Parameters
        ----------
        reached : bool
            Whether the trial at ``next_d`` reached 100%.

        Raises
        ------
        RuntimeError
            The search is over.
        """
        if self.next_d is None:
            raise RuntimeError("the search is over")
        self.visited[self.next_d] = bool(reached)
        self._advance()

    @property
    def done(self) -> bool:
        """Whether the search has finished."""
        return self.next_d is None


def make_search(search: str, prediction: dict | None, known: dict[int, bool], range_: dict):
    """The search rule of one threshold search: doubling, or starting from a prediction.

    Parameters
    ----------
    search : str
        ``"doubling"`` or ``"predicted"`` (:data:`SEARCHES`).
    prediction : dict or None
        The prediction (``"d"``), needed for a predicted search.
    known : dict of int to bool
        Widths already tried and whether they reached 100 %.
    range_ : dict
        ``d_min``, ``d_max`` and ``resolution``.
    """
    if search == "doubling":
        return ThresholdSearch(range_["d_min"], range_["d_max"], range_["resolution"])
    assert prediction is not None  # sweep refuses a predicted search without a prediction
    return PredictedSearch(prediction["d"], range_["d_min"], range_["d_max"], range_["resolution"], known)


def floor_censored(outcomes: dict[int, bool]) -> bool:
    """Whether outcomes leave d* censored at the floor: the smallest success has no failure below it, and a
    smaller width (down to :data:`SMALLEST_WIDTH`) could have been tried.

    Parameters
    ----------
    outcomes : dict of int to bool
        Each width tried and whether it reached 100 %.

    Returns
    -------
    bool
        ``False`` when nothing reached 100 % (censored at the ceiling instead: ``d_star`` is ``None``).
    """
    successes = [d for d, ok in outcomes.items() if ok]
    if not successes:
        return False
    d_star = min(successes)
    return d_star > SMALLEST_WIDTH and not any(d < d_star for d, ok in outcomes.items() if not ok)


def threshold_record(N: int, R: int, mode: str, seed: int, settings: TrialSettings,
                      outcomes: dict[int, bool], last_failure: int | None, d_min: int, d_max: int,
                      resolution: int, search: str = "doubling",
                      extra: dict | None = None) -> dict:
    """The record of one finished threshold search: d* (the smallest width that reached 100 %), the last
    failure, whether the outcomes were monotone in d, the range and the settings; ``"censored": "floor"``
    when d* is only an upper bound (:func:`floor_censored`), the key absent otherwise.

    Parameters
    ----------
    N, R : int
        Sizes.
    mode : str
        ``"learned"`` or ``"frozen"``.
    seed : int
        The run seed.
    settings : TrialSettings
    outcomes : dict of int to bool
        Each width tried and whether it reached 100 %.
    last_failure : int or None
        The largest width that failed.
    d_min, d_max, resolution : int
        The search range.
    search : str
        The search rule.
    extra : dict or None
        Fields added to the record.
    """
    successes = [d for d, ok in outcomes.items() if ok]
    failures = [d for d, ok in outcomes.items() if not ok]
    monotone = not successes or not failures or max(failures) < min(successes)
    censored = {"censored": FLOOR} if floor_censored(outcomes) else {}
    return {"kind": "threshold", "N": N, "R": R, "mode": mode, "seed": seed,
            "d_star": min(successes) if successes else None, "last_failure": last_failure,
            "trials": sorted(outcomes), "monotone": monotone, "d_min": d_min, "d_max": d_max,
            "resolution": resolution, "search": search, **censored, **(extra or {}), **asdict(settings),
            "seed_contract": SEED_CONTRACT, "version": __version__}


def check_search_range(d_min: int, d_max: int, resolution: int) -> None:
    """Refuse a search range that is not ``1 <= d_min <= d_max`` with a positive resolution.

    Parameters
    ----------
    d_min, d_max, resolution : int

    Raises
    ------
    InputError
        A value not a positive integer, or ``d_min > d_max``.
    """
    for name, value in (("d_min", d_min), ("d_max", d_max), ("resolution", resolution)):
        check_positive_int(name, value)
    if d_min > d_max:
        raise InputError(f"d_min must be <= d_max, got d_min = {d_min} > d_max = {d_max}")


def find_threshold(N: int, R: int, mode: str, seed: int, settings: TrialSettings, *, d_min: int = 4,
                   d_max: int = 1024, resolution: int = 2, known: dict[int, dict] | None = None,
                   on_trial: Callable[[dict], None] | None = None) -> dict:
    """Run one threshold search in this process; ``known`` trials (by d) are reused instead of re-run.

    Parameters
    ----------
    N, R, mode, seed, settings
        The configuration (see :func:`.sweep_trial.run_trial`).
    d_min, d_max, resolution : int
        The search range and resolution (see :class:`ThresholdSearch`).
    known : dict, optional
        Trial records by d. Every one of them counts for ``d_star`` and the ``monotone`` flag, visited or not
        (:func:`.sweep.sweep` passes none and builds its records from visited trials only).
    on_trial : callable, optional
        Called with each new trial record.

    Returns
    -------
    dict
        The ``"threshold"`` record.
    """
    check_mode(mode)
    check_search_range(d_min, d_max, resolution)
    known = dict(known or {})
    search = ThresholdSearch(d_min, d_max, resolution)
    while not search.done:
        d = search.next_d
        assert d is not None  # a search that is not done has a next d
        if d not in known:
            known[d] = run_trial(N, R, mode, seed, d, settings)
            if on_trial is not None:
                on_trial(known[d])
        search.feed(known[d]["reached"])
    outcomes = {d: bool(t["reached"]) for d, t in known.items()}
    blas = sorted({t.get("blas") or "not recorded" for t in known.values()})
    return threshold_record(N, R, mode, seed, settings, outcomes, search.lo, d_min, d_max, resolution,
                             extra={"blas": blas})
