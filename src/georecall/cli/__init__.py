"""The ``georecall`` command line, in layers: :mod:`.parser` (``main``; each command's options declared in
:mod:`.declarations` from the building blocks of :mod:`.options`) → :mod:`.params` (each command's typed
parameters, built once from the parsed arguments) → :mod:`.commands` (the table of commands, each in the
``commands_*`` module of its concern, returning a result document) → :mod:`.render` (text or strict JSON).

This module is the console entry point (``georecall = "georecall.cli:main"``) and stays light: its
:func:`main` installs the Ctrl-C / SIGTERM answers *before* the heavy imports (NumPy, SciPy, the checker), so
a signal from the first instruction gives exit 130 / 143 with one line and, under ``--json``, one document;
``build_parser`` and ``UsageError`` are loaded from :mod:`.parser` on first use."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading

from georecall import __version__

__all__ = ["UsageError", "build_parser", "main"]

_CODES = {signal.SIGINT: (130, "georecall: interrupted"), signal.SIGTERM: (143, "georecall: terminated")}


def _early_answer(argv: list[str]):
    """The handler of a signal that lands while the command line is still being imported: nothing is
    written yet (no temporary exists), so it answers at once (``os._exit``) with one line and, under
    ``--json``, one document built from ``argv`` alone."""
    as_json = "--json" in argv or "--format=json" in argv or any(
        a == "--format" and b == "json" for a, b in zip(argv, argv[1:]))
    words = [a for a in argv if not a.startswith("-")]
    command = None if not words else (f"{words[0]} {words[1]}" if words[0] in ("check", "sweep", "study")
                                      and len(words) > 1 else words[0])

    def answer(signum, frame) -> None:
        code, line = _CODES.get(signum, (128 + signum, "georecall: stopped by a signal"))
        if answer.done:  # type: ignore[attr-defined]  # the command's own document is out: stop without a second one
            os._exit(code)
        try:
            if as_json:
                doc = {"command": command, "version": __version__, "seed": None, "params": None,
                       "status": code, "error": line}
                os.write(1, (json.dumps(doc, indent=2) + "\n").encode())
            os.write(2, ("\n" + line + "\n").encode())
        finally:
            os._exit(code)

    answer.early = True  # type: ignore[attr-defined]  # parser.main hands Ctrl-C back to Python by this mark
    answer.done = False  # type: ignore[attr-defined]
    return answer


def main(argv: list[str] | None = None) -> int:
    """Run one command (:func:`georecall.cli.parser.main`), answering Ctrl-C and SIGTERM from the
    first instruction.

    Parameters
    ----------
    argv : list of str, optional
        Arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit code (see :func:`georecall.cli.parser.main`): 130 interrupted, 143 terminated.
    """
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    answer, previous = None, {}
    if threading.current_thread() is threading.main_thread():
        answer = _early_answer(args)
        with contextlib.suppress(ValueError, OSError):
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, answer)  # until parser.main takes it over
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):  # until the command's own handler
                previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, answer)
    try:
        from georecall.cli import parser  # heavy (startup cost): the handlers above answer meanwhile

        return parser.main(args)
    finally:
        if answer is not None:
            answer.done = True
            with contextlib.suppress(ValueError, OSError):  # a caller in-process gets its handlers back
                for signum, handler in previous.items():
                    if signal.getsignal(signum) is answer or signum == signal.SIGINT:
                        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def __getattr__(name: str):
    if name in ("UsageError", "build_parser"):
        from georecall.cli import parser  # startup cost: the parser loads the whole command line

        return getattr(parser, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
