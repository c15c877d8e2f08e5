"""The ``georecall`` command line: parser → command (:mod:`~georecall.cli.commands`) → renderer
(:mod:`~georecall.cli.render`).

Exit codes: 0 every check passed; 1 a check failed (or training diverged); 2 bad input, parameters outside a
theorem's conditions, a job over the memory budget, or an exception raised by your own construction (one plain
line on stderr; ``--debug`` or ``GEORECALL_DEBUG=1`` adds your code's traceback); 3 an internal error (a bug:
its traceback is shown); 130 interrupted (Ctrl-C); 143 terminated (SIGTERM). ``--json`` prints exactly one
strict JSON document on stdout, failures included (then with ``status`` and ``error``), and nothing on stderr
unless there is an error; ``demo`` is narrated text and has no ``--json``. Each command is offered only the
shared options it uses (:data:`SHARED`), and contradictory options are refused in one place
(:data:`CONFLICTS`)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import sys
import threading
import traceback
import warnings
from typing import Any

from georecall import __version__, usercode
from georecall.cli import commands, render
from georecall.cli import params as cli_params
from georecall.cli.common import constructions_loaded_once, resolve_spec
from georecall.cli.declarations import DECLARATIONS
from georecall.cli.options import (
    BUILDER_OPTION_DEST,
    DEBUG_VARIABLE,
    RUN_CONTROLS,
    SHARED,
    Parser,
    UsageError,
    shared_parents,
)
from georecall.constructions import registry
from georecall.errors import InputError, UserCodeError
from georecall.io import WRITE_ERRORS, write_error
from georecall.memory import Budget

__all__ = ["CONFLICTS", "DEBUG_VARIABLE", "SHARED", "UsageError", "build_parser", "given_options", "main",
           "refuse_conflicts"]

_WARNINGS_SHOWN = 5  # text mode: at most this many distinct warnings on stderr after a run


# Options that contradict each other, refused in one place (exit 2, one line) before any command runs. Each
# entry: two options (their dests) that must not both be given on the command line, and a test on the parsed
# arguments saying when they disagree (None: always). "Given" means typed by the user, whatever the defaults
# (:func:`given_options`), so a command may keep any default.
CONFLICTS: tuple[tuple[str, str, Any], ...] = (
    ("json", "format", lambda a: a.format != "json"),  # --json prints the document: --format json or none
    ("workers", "scheduler", None),  # the scheduler's workers run the jobs
    ("bits", "integer", None),  # quantized weights are not integers
    ("model", "construction", None),  # export: a model file or a construction built for a task
    ("model", "N", None),  # export: a model file has its own sizes (and task)
    ("model", "R", None),
    ("model", "seed", lambda a: a.command == "export"),  # export: the seed draws a construction's task
    ("full", "construction", None),  # verify: --full lengthens rows that --construction does not run
)


def given_options(argv: list[str]) -> set[str]:
    """The dests of the options typed on the command line ``argv`` (not those left at their defaults).

    Parses ``argv`` a second time with every option's default suppressed, so that only given options appear.

    Parameters
    ----------
    argv : list of str
        The command line (already parsed once without error).

    Returns
    -------
    set of str
    """
    shadow = _build_parser()
    stack: list[argparse.ArgumentParser] = [shadow]
    while stack:
        parser = stack.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(dict.fromkeys(action.choices.values()))
            elif action.option_strings:
                action.default = argparse.SUPPRESS
    return set(vars(shadow.parse_args(argv))) - {"group", "target", "command"}


def refuse_conflicts(args: argparse.Namespace, given: set[str]) -> None:
    """Refuse contradictory options (:data:`CONFLICTS`).

    Parameters
    ----------
    args : argparse.Namespace
        The parsed arguments.
    given : set of str
        The dests given on the command line (:func:`given_options`).

    Raises
    ------
    UsageError
        When two conflicting options were both given (and disagree).
    """
    for first, second, disagree in CONFLICTS:
        if first in given and second in given and (disagree is None or disagree(args)):
            def flag(dest: str) -> str:
                value = getattr(args, dest)
                shown = "" if isinstance(value, bool) else " " + " ".join(map(str, value)) \
                    if isinstance(value, list) else f" {value}"
                return f"--{dest.replace('_', '-')}{shown}"
            raise UsageError(f"georecall {args.command}: {flag(first)} and {flag(second)} do not combine: "
                             "give one of them")


def _build_parser() -> argparse.ArgumentParser:
    """The ``georecall`` argument parser (construction choices from the registry).

    Returns
    -------
    argparse.ArgumentParser
        The parser; each sub-command sets ``command`` (a key of ``commands.COMMANDS``).
    """
    parser = Parser(prog="georecall", description="Executable, exactly checked statements of 'Geometric "
                     "Factual Recall in Transformers' (arXiv 2605.12426). Exit codes: 0 pass, 1 a check "
                     "failed, 2 bad input or over the memory budget, 3 internal error, 130 interrupted, 143 "
                     "terminated (SIGTERM).")
    parser.add_argument("--version", action="version", version=f"georecall {__version__}")
    sub = parser.add_subparsers(dest="group", required=True, parser_class=Parser, metavar="COMMAND")
    for declare in DECLARATIONS:
        declare(sub)
    return parser


build_parser = _build_parser  # the public name (main looks it up at call time; tests may replace it)


def _command_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser | None:
    """The parser of the command that ``argv`` names (``check single-hop``: the ``single-hop`` parser of
    ``check``), or None when ``argv`` names none."""
    words = iter(arg for arg in argv if not arg.startswith("-"))
    while True:
        kinds = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if kinds is None:
            return parser
        word = next(words, None)
        if word not in kinds.choices:
            return None
        parser = kinds.choices[word]


def _load_named_construction(argv: list[str]) -> InputError | None:
    """Load the user's construction that ``argv`` names (``--construction MODULE:ATTR`` / ``FILE.py:ATTR``)
    before ``argv`` is parsed, so that the parser offers its spec's own options: a loaded spec is registered,
    and ``options.add_own_options`` declares the options of the registered specs. Only for a command that
    offers them (check, certify, export); the module runs under the limits of the line's
    ``--build-timeout``, ``--max-gib`` and ``--json``, as it would when the command loads it.

    The spec, or what loading it raised, is kept for the command (``common.resolve_spec`` within
    ``common.constructions_loaded_once``): the module runs once, and a refusal is raised where it is raised
    without this look ahead. Returns that refusal (None: nothing refused)."""
    if not any(arg == "--construction" or arg.startswith("--construction=") for arg in argv) or \
            not any(":" in arg for arg in argv):  # the common line: no parser built twice
        return None
    command = _command_parser(build_parser(), argv)
    if command is None or BUILDER_OPTION_DEST not in command._defaults:  # offers no spec's own options
        return None
    ahead = Parser(add_help=False, parents=shared_parents(command.get_default("command")))
    for action in command._actions:  # --construction as the command declares it (one value or several)
        if action.dest == "construction":
            ahead._add_action(action)  # shared, as argparse's parents= shares it
    try:
        named, _ = ahead.parse_known_args(argv)
    except UsageError:  # a bad value of these options: the parser says so, in its own words
        return None
    given = named.construction if isinstance(named.construction, list) else [named.construction]
    keys = [key for key in dict.fromkeys(given) if isinstance(key, str) and ":" in key]
    if not keys:
        return None
    before, refused = usercode.current_limits(), None
    usercode.set_limits(timeout=named.build_timeout, budget=Budget.from_gib(getattr(named, "max_gib", None)),
                        json=getattr(named, "json", False), command=command.get_default("command"))
    try:
        for key in keys:
            try:
                resolve_spec(key, None)
            except InputError as exc:  # UserCodeError too: kept, raised again when the command names it
                refused = refused or exc
    finally:
        usercode.set_limits(timeout=before.timeout, budget=before.budget, json=before.json,
                            command=before.command)
    return refused


def _say(message: str) -> None:
    print(f"georecall: error: {_first_line(message) or 'bad input'}", file=sys.stderr, flush=True)


def _first_line(message: str) -> str:
    lines = str(message).strip().splitlines()
    return lines[0] if lines else ""


class _Terminated(KeyboardInterrupt):
    """SIGTERM, delivered as an interruption so every cleanup that Ctrl-C runs (temporary files, workers)
    runs too."""


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """While the command runs in the main thread: SIGTERM raises :class:`_Terminated`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise _Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # pragma: no cover - not the main thread of the main interpreter
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _take_over_interrupts() -> None:
    """Ctrl-C back to Python's ``KeyboardInterrupt`` once :func:`main`'s handlers are in place (the console
    entry, :func:`georecall.cli.main`, answered it itself while the modules were imported)."""
    if threading.current_thread() is not threading.main_thread():
        return
    with contextlib.suppress(ValueError, OSError):
        if getattr(signal.getsignal(signal.SIGINT), "early", False):
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _debugging(argv: list[str]) -> bool:
    return "--debug" in argv or os.environ.get(DEBUG_VARIABLE, "").strip() not in ("", "0")


def _command_of(argv: list[str]) -> str | None:
    """The command named in ``argv`` ("check single-hop"), for a failure document when parsing failed."""
    words = [a for a in argv if not a.startswith("-")]
    if not words:
        return None
    if words[0] in ("check", "sweep", "study") and len(words) > 1:
        return f"{words[0]} {words[1]}"
    return words[0]


def main(argv: list[str] | None = None) -> int:
    """Run one command.

    Parameters
    ----------
    argv : list of str, optional
        Arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0 pass, 1 a check failed (also: training diverged), 2 bad input / parameters outside a theorem /
        over the memory budget / an exception raised by your own construction (one line on stderr; its
        traceback with ``--debug`` or ``GEORECALL_DEBUG=1``), 3 an internal error (a bug: its traceback is
        shown), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM; temporary files removed as for Ctrl-C).

    Notes
    -----
    With ``--json`` exactly one strict JSON document is printed on stdout, whatever happens: on a failure it
    carries ``status`` (the exit code) and ``error`` (the one line also printed on stderr). Warnings raised
    during the run become the document's ``warnings`` (text mode: at most five distinct ones on stderr after
    the output, none before a refusal); what the command's code (yours included) prints on stdout is kept
    off stdout (``--json``: the document's ``printed``; text mode: stderr).
    """
    session = _Session(list(sys.argv[1:] if argv is None else argv))
    try:
        _take_over_interrupts()
        return session.run()
    except UsageError as exc:
        return session.fail(2, _first_line(str(exc)))
    except UserCodeError as exc:  # before InputError: it is one
        if session.debug and exc.__cause__ is not None:
            traceback.print_exception(type(exc.__cause__), exc.__cause__, exc.__cause__.__traceback__)
        hint = "" if session.debug else f" (traceback: --debug or {DEBUG_VARIABLE}=1)"
        return session.fail(2, f"georecall: error: {_first_line(str(exc))}{hint}")
    except InputError as exc:  # includes ConditionError and the memory estimate's refusals
        return session.fail(2, f"georecall: error: {_first_line(str(exc)) or 'bad input'}")
    except FloatingPointError as exc:
        return session.fail(1, f"georecall: training diverged: {_first_line(str(exc))}")
    except MemoryError as exc:
        return _out_of_memory(exc, session.debug, session.fail, (session.params or {}).get("construction"))
    except _Terminated:
        return session.fail(143, "\ngeorecall: terminated (temporary files removed)")
    except KeyboardInterrupt as exc:  # a sweep's or study's carries its resume hint, maybe already said
        hint = exc.args[0] if exc.args and isinstance(exc.args[0], str) else "interrupted"
        return session.fail(130, f"\ngeorecall: {hint}", echo=not getattr(exc, "said", False))
    except OSError as exc:  # a full or read-only disk met by a writer outside georecall.io (a figure, ...)
        if exc.errno not in WRITE_ERRORS:
            traceback.print_exc()
            return session.fail(3, f"georecall {__version__}: internal error (a bug; please report it with "
                                   "the traceback above)")
        refusal = write_error(exc, exc.filename if exc.filename is not None else "the output")
        return session.fail(2, f"georecall: error: {refusal}")
    except Exception:  # a bug, never disguised as bad input
        traceback.print_exc()
        return session.fail(3, f"georecall {__version__}: internal error (a bug; please report it with the "
                               "traceback above)")


class _Session:
    """One run of :func:`main`: what it knows so far (the command, ``--json``, the parsed parameters, the
    warnings caught, what the command printed), for the output and for the failure document."""

    def __init__(self, argv: list[str]):
        self.argv = argv
        self.debug = _debugging(argv)
        self.command = _command_of(argv)
        self.json = "--json" in argv or "--format=json" in argv or any(  # --format json is --json
            a == "--format" and b == "json" for a, b in zip(argv, argv[1:]))
        self.params: dict[str, Any] | None = None  # the parsed arguments, as the failure document shows them
        self.caught: list = []
        self.printed = io.StringIO()

    def run(self) -> int:
        """Parse, refuse conflicts, build the typed parameters, run the command, print its document. No
        command at all (``georecall`` alone): the command list on stdout, exit 2."""
        if not [a for a in self.argv if a != "--debug"]:
            print(build_parser().format_help(), end="", flush=True)
            print("georecall: error: give a command (listed above); georecall COMMAND --help shows its "
                  "options", file=sys.stderr, flush=True)
            return 2
        with _sigterm_as_interrupt(), warnings.catch_warnings(record=True) as caught, \
                constructions_loaded_once():
            warnings.simplefilter("default")
            self.caught = caught
            # a user's construction named on the line is loaded before parsing (its spec's own options); what
            # its module prints or warns is held back until the command runs, where it would load it
            loading = io.StringIO()
            with contextlib.redirect_stdout(loading), warnings.catch_warnings(record=True) as early:
                warnings.simplefilter("default")
                refused = _load_named_construction(self.argv)
            try:
                args = build_parser().parse_args(self.argv)
            except UsageError:
                if refused is None:
                    raise
                self.printed.write(loading.getvalue())
                caught.extend(early)
                raise refused  # noqa: B904 - the construction that did not load is the cause: its line
            except SystemExit:  # --help printed: say why a construction's own options are missing from it
                if refused is not None:
                    print(f"georecall: note: the help above lacks the options of a construction that did "
                          f"not load: {_first_line(str(refused))}", file=sys.stderr)
                raise
            self.command = args.command
            self.params = {key: value for key, value in vars(args).items()
                           if key not in cli_params.STRUCTURE and key not in RUN_CONTROLS}
            refuse_conflicts(args, given_options(self.argv))
            params = cli_params.build(args)  # typed, once; the budget is created here
            # a failure records what applies: a default the typed parameters dropped (export --model's sizes
            # and seed) is recorded as None
            self.params = {key: None if getattr(params, key, value) is None else value
                           for key, value in self.params.items()}
            self.json = isinstance(params, cli_params.Json) and params.json
            self.printed.write(loading.getvalue())
            caught.extend(early)
            with contextlib.redirect_stdout(self.printed):
                doc = commands.COMMANDS[args.command](params)
            lines = _warning_lines(caught)
        printed = self.printed.getvalue()
        if self.json:
            if lines:  # after the command's own warnings (probe's, transfer's), which are part of its result
                own = list(doc.get("warnings") or [])
                doc["warnings"] = own + [line for line in lines if line not in own]
            if printed:
                doc["printed"] = printed[-10_000:]
        elif printed:
            sys.stderr.write(printed)
        as_json = self.json or (isinstance(params, cli_params.Table) and params.format == "json")
        _emit(render.to_json(doc) if as_json else render.to_text(doc))
        if not self.json:
            for line in lines[:_WARNINGS_SHOWN]:
                print(f"georecall: warning: {line}", file=sys.stderr)
        if doc["command"] == "bounds" and params.progress and args.format in ("md", "latex"):
            rows = len(doc["rows"])
            print(f"{rows} row{'' if rows == 1 else 's'} in {doc['seconds']:.2f} s; gap = d / d_min; a bound "
                  "with d_min = 0 is vacuous for that construction (its facts sit in P0, the MLP).",
                  file=sys.stderr)
        if doc["command"] == "bounds" and params.progress and not as_json:
            for note in doc.get("notes") or []:  # why a gap row is empty (stderr: the table stays a table)
                print(f"georecall: note: {note}", file=sys.stderr)
        return int(doc["status"])

    def fail(self, code: int, line: str, *, echo: bool = True) -> int:
        """Report a failure: ``line`` on stderr (unless ``echo`` is false: the command said it already), and
        with ``--json`` the failure document; return ``code``."""
        if self.debug and self.printed.getvalue() and not self.json:
            sys.stderr.write(self.printed.getvalue())
        if echo:
            print(line, file=sys.stderr, flush=True)
        if self.json:
            params = self.params
            doc = {"command": self.command, "version": __version__,
                   "seed": params.get("seed") if params else None, "params": params, "status": code,
                   "error": _first_line(line)}
            if self.caught:
                doc["warnings"] = _warning_lines(self.caught)
            printed = self.printed.getvalue()
            if printed:  # what the command's code (a user's construction included) printed before failing
                doc["printed"] = printed[-10_000:]
            _emit(render.to_json(doc))
        return code


def _silence_stdout() -> None:
    """Point stdout at the null device, so that the interpreter's final flush stays quiet."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _emit(text: str) -> None:
    """Print the document; a reader that closed stdout (``| head``) ends the output quietly; a stdout that
    cannot be written (a full disk, say) is bad input, one line (exit 2), not a bug."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _silence_stdout()
    except OSError as exc:
        _silence_stdout()
        raise InputError(f"cannot write the output: {exc.strerror or exc}") from None


def _warning_lines(caught) -> list[str]:
    """Distinct warnings, one line each (``category: message``), in the order first raised."""
    lines = []
    for w in caught:
        line = f"{w.category.__name__}: {_first_line(str(w.message))}"
        if line not in lines:
            lines.append(line)
    return lines


def _out_of_memory(exc: MemoryError, debug: bool, fail, construction: str | None) -> int:
    """Out of memory under the estimate: the user's construction's promise sized it when the command named
    one (exit 2); otherwise the estimate is wrong (a bug, exit 3)."""
    spec = None
    if isinstance(construction, str):
        with contextlib.suppress(InputError):
            spec = registry.resolve(construction)
    if spec is not None and spec.id not in registry.BUILTIN_IDS:
        if debug:
            traceback.print_exception(type(exc), exc, exc.__traceback__)
        return fail(2, "georecall: error: out of memory although the estimate fit the budget: your "
                       f"construction {spec.label} builds more than its promise states (d, m, params); fix "
                       "its promise, or lower N or R")
    traceback.print_exception(type(exc), exc, exc.__traceback__)
    return fail(3, f"georecall {__version__}: internal error: out of memory although the estimate fit the "
                   "budget (a bug in the estimate; please report it with the traceback above)")
