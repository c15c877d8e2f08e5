"""Check and certify from Python: ``gr.check`` (every query of one task) and ``gr.certify`` (every task), each
returning a typed report.

Both call the checker the command line calls: :func:`georecall.verify.checking.run.run_check` (what
``georecall check`` runs) and :func:`georecall.verify.checking.certify.certify` (what ``georecall certify``
runs). Their reports, :class:`CheckReport` and :class:`CertifyReport`, keep the library's report, say
``passed``, give the document ``--json`` prints with ``to_dict()``, and show the command line's table as
their ``repr``.
"""

from __future__ import annotations

from typing import Any

from georecall.api_command import python_words

__all__ = ["CertifyReport", "CheckReport", "certify", "check"]


class CheckReport:
    """The report of :func:`check`: sizes promised and achieved, margins, accuracy and the verdict.

    Attributes
    ----------
    report : Report
        The checker's report (:class:`georecall.verify.checking.report.Report`).
    passed : bool
        Every query answered, the promised d and m achieved, the promised margin reached.
    name : str
        What was checked ("G1 binary float (certified)").
    accuracy : float
        Share of queries answered.
    min_margin : float
        Smallest margin over every query (exact in integer mode; a certified lower bound in float mode).

    Examples
    --------
    >>> import georecall as gr
    >>> report = gr.check("geometric", N=16, R=2, integer=True)
    >>> report.passed, report.min_margin, report.to_dict()["achieved"]["d"]
    (True, 4.0, 14)
    """

    def __init__(self, report) -> None:
        self.report = report

    @property
    def passed(self) -> bool:
        """Every query answered, the promised d and m achieved, the promised margin reached (the checker's
        ``Report.passed``)."""
        return self.report.passed

    @property
    def name(self) -> str:
        """What was checked ("G1 binary float (certified)")."""
        return self.report.name

    @property
    def accuracy(self) -> float:
        """Share of queries answered, from 0 to 1."""
        return self.report.result.accuracy

    @property
    def min_margin(self) -> float:
        """Smallest margin over every query (exact in integer mode; a certified lower bound in float mode)."""
        return self.report.result.min_margin

    def to_dict(self) -> dict:
        """The report as a JSON-able dict (one entry of ``georecall check --json``'s ``reports``).

        Returns
        -------
        dict
        """
        return self.report.as_dict()

    def __repr__(self) -> str:
        from georecall.cli import render  # the command line's table, imported when shown

        return render.report_table([self.to_dict()])


class CertifyReport:
    """The outcome of :func:`certify`: CERTIFIED (every task), REFUTED (a witness task) or UNKNOWN (why).

    Attributes
    ----------
    certificate : Certificate
        The certifier's outcome (:class:`georecall.verify.checking.certify.Certificate`).
    verdict : str
        "CERTIFIED", "REFUTED" or "UNKNOWN".
    passed : bool
        ``verdict == "CERTIFIED"``.
    min_margin : float or None
        The smallest margin over every task and query.

    Examples
    --------
    >>> import georecall as gr
    >>> cert = gr.certify("geometric", N=16, R=2, integer=True)
    >>> cert.verdict, cert.to_dict()["min_margin_exact"]
    ('CERTIFIED', '4')
    """

    def __init__(self, certificate) -> None:
        self.certificate = certificate

    @property
    def verdict(self) -> str:
        """The certifier's verdict: "CERTIFIED", "REFUTED" or "UNKNOWN"."""
        return self.certificate.verdict

    @property
    def passed(self) -> bool:
        """Whether the verdict is "CERTIFIED"."""
        return self.certificate.passed

    @property
    def min_margin(self) -> float | None:
        """The smallest margin over every task and query, or None when the certificate has none."""
        return self.certificate.min_margin

    def to_dict(self) -> dict:
        """The certificate as a JSON-able dict (the results of ``georecall certify --json``).

        Returns
        -------
        dict
        """
        return self.certificate.as_dict()

    def __repr__(self) -> str:
        from georecall.cli import render  # as in CheckReport

        doc = self.to_dict()
        return render.to_text({**doc, "command": "certify single-hop",
                               "params": {"k": 1, **doc["params"]}})


def _spec_and_k(name: str, k: int | None):
    from georecall.constructions import registry  # imported when a check runs

    spec = registry.resolve(name)
    return spec, ((1 if spec.hops == "single" else 2) if k is None else k)


def check(name: str = "geometric", N: int = 64, R: int = 3, k: int | None = None, *, seed: int = 0,
          codes: str | None = None, D: int | None = None, integer: bool = False, dtype: str = "float64",
          task=None, save: str | None = None, progress: bool = False, **options: Any) -> CheckReport:
    """Build construction ``name`` on THE task of ``(N, R, seed)`` and check every one of its N·R^k queries
    against the theorem's promise: what ``georecall check`` does.

    In integer mode the margins are exact integers; in float mode each is certified by a forward-error bound
    and any query the bound leaves open is decided exactly. A PASS is a proof for this task. Given the same
    arguments, ``georecall check`` builds and checks the same model with the same defaults (float mode,
    the construction's own codes and constants); only the default sizes differ, small here so that a call
    answers at once.

    Parameters
    ----------
    name : str
        A construction (:func:`georecall.list_constructions`; ``"geometric"`` is Theorem G1).
    N : int
        Entities (default 64; ``georecall check single-hop`` defaults to 1024, ``multi-hop`` to 256).
    R : int
        Relations (default 3; ``georecall check single-hop`` defaults to 8, ``multi-hop`` to 3).
    k : int, optional
        Hops (default 1 for a single-hop construction, 2 for a k-hop one).
    seed : int
        The run seed (task and codes).
    codes : str, optional
        Attribute codes ("binary", "sign", "gaussian", ...; default: the construction's own).
    D : int, optional
        Code length (default ⌈log2 N⌉ for binary codes).
    integer : bool
        Integer mode: the forward pass in exact integers (default False: float mode, as ``georecall
        check``).
    dtype : {"float64", "float32"}
        Working precision in float mode.
    task : Task, optional
        Check on this task (its N and R must be ``N`` and ``R``) instead of the seeded one.
    save : str, optional
        Also write the built model to this ``.npz`` file (:func:`georecall.load` reads it).
    progress : bool
        Progress lines on stderr.
    **options
        The builder's own constants (``gate``, ``beta``, ``lam``, ``attention``, ...).

    Returns
    -------
    CheckReport

    Raises
    ------
    InputError
        An unknown construction, an option it does not take, bad sizes, a task that does not fit, or a check
        too large for the memory budget (refused before anything is built).

    Examples
    --------
    >>> import georecall as gr
    >>> report = gr.check("geometric", N=64, R=3)
    >>> report.passed, report.accuracy
    (True, 1.0)
    >>> gr.check("path-blocks", N=8, R=2, k=2).passed
    True
    """
    from georecall.verify.checking.run import run_check  # the checker: imported when a check runs

    spec, k = _spec_and_k(name, k)
    opts = {**options, **({"integer": True} if integer else {})}
    with python_words():  # the checker's refusals name options as Python does
        report = run_check(construction=spec, N=N, R=R, k=k, seed=seed, codes=codes, D=D, options=opts,
                           dtype=dtype, task=task, save=save, progress=progress)
    return CheckReport(report)


def certify(name: str = "geometric", N: int = 16, R: int = 2, k: int | None = None, *, seed: int = 0,
            codes: str | None = None, D: int | None = None, integer: bool | None = None,
            max_points: int | None = None, progress: bool = False, **options: Any) -> CertifyReport:
    """Certify construction ``name`` for every task of sizes (N, R), or refute it with a witness task: what
    ``georecall certify`` does.

    The certified object is the family georecall assembles (the builder's task-free part plus the declared
    task encoding); the verdict covers all (N!)^R tasks, not one. Given the same arguments, ``georecall
    certify`` certifies the same object (the same fingerprint) with the same defaults, integer mode included;
    only the default sizes differ, small here so that a call answers at once.

    Parameters
    ----------
    name : str
        A construction (:func:`georecall.list_constructions`).
    N : int
        Entities (default 16; ``georecall certify single-hop`` defaults to 4096, ``multi-hop`` to 256).
    R : int
        Relations (default 2; ``georecall certify single-hop`` defaults to 16, ``multi-hop`` to 3).
    k : int, optional
        Hops (default 1 for a single-hop construction, 2 for a k-hop one).
    seed : int
        The run seed (codes stream).
    codes : str, optional
        Attribute codes (default: the construction's own).
    D : int, optional
        Code length.
    integer : bool, optional
        True: certify in exact integers; False: in float64 with an allowance for rounding. None (the
        default), as ``georecall certify``: exact integers where the construction has an integer scale and no
        real constant is asked for (it takes ``integer``, binary or sign codes, no ``lam`` other than 1, no
        ``gate`` or ``gain``: :func:`georecall.constructions.builder_options.integer_by_default`), else
        float64.
    max_points : int, optional
        The most joint slot codes enumerated per query type (``--max-points``; default 2^24): past it, a query
        type is UNKNOWN.
    progress : bool
        Progress lines on stderr.
    **options
        The builder's own constants.

    Returns
    -------
    CertifyReport

    Raises
    ------
    InputError
        Bad sizes or options, or an estimate over the memory budget.
    DeclarationError
        The construction's declaration breaks an assumption of the certificate.

    Examples
    --------
    >>> import georecall as gr
    >>> cert = gr.certify("geometric", N=16, R=2)
    >>> cert.verdict, cert.passed, cert.to_dict()["name"]
    ('CERTIFIED', True, 'G1 binary int')
    """
    from georecall.constructions.builder_options import integer_by_default  # imported when certify runs
    from georecall.verify.checking import certify as certifier  # the certifier: imported when it runs

    spec, k = _spec_and_k(name, k)
    if integer is None:  # the command line's default: one rule
        integer = integer_by_default(spec, codes, options)
    opts = {**options, **({"integer": True} if integer else {})}
    with python_words():  # the certifier's refusals name options as Python does
        cert = certifier.certify(spec=spec, N=N, R=R, k=k, codes=codes, D=D, options=opts, seed=seed,
                                 progress=progress,
                                 max_points=certifier.MAX_POINTS if max_points is None else max_points)
    return CertifyReport(cert)
