"""A command's result in Python: run a ``georecall`` command from keyword arguments and keep its document.

The verbs of :mod:`georecall` that have a command of their own (``counts``, ``bounds``, ``train``,
``probe``, ``evaluate``, ``export``) are that command, called from Python: :func:`run_command` turns the
keyword arguments into the command's options, lets the command line's own parser check and complete them
(its defaults, ranges and choices: one place, so Python and the terminal cannot disagree), builds the
command's typed parameters and runs the command function the terminal runs. What comes back is a
:class:`Result`: the command's document (``to_dict()``, the same as ``--json``), its outcome (``passed``)
and its terminal rendering (``repr``).
"""

from __future__ import annotations

import argparse
import contextlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from georecall.errors import InputError

__all__ = ["Result", "python_words", "run_command"]


class Result(Mapping):
    """The outcome of a command run from Python: its result document, read like a dict.

    Attributes
    ----------
    command : str
        The command ("train", "eval", "bounds", ...).
    passed : bool
        The command's outcome: True when it checks nothing or its check passed.

    Examples
    --------
    >>> import georecall as gr
    >>> result = gr.counts(N=3, R=1, k=1)
    >>> result.command, result["params"]["N"], "rows" in result
    ('count', 3, True)
    """

    def __init__(self, document: dict) -> None:
        self._doc = document

    @property
    def command(self) -> str:
        """The command that produced the document ("train", "eval", "bounds", ...)."""
        return self._doc["command"]

    @property
    def passed(self) -> bool:
        """The command's outcome: its document's ``status`` is 0 (it checks nothing, or its check passed)."""
        return self._doc["status"] == 0

    def to_dict(self) -> dict:
        """The result document (what ``georecall COMMAND --json`` prints, before JSON encoding).

        Returns
        -------
        dict
        """
        return self._doc

    def __getitem__(self, key: str) -> Any:
        return self._doc[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._doc)

    def __len__(self) -> int:
        return len(self._doc)

    def __repr__(self) -> str:
        from georecall.cli import render  # the command line's renderer, imported when shown

        return render.to_text(self._doc)


def _argv(options: Mapping[str, Any], flags: Mapping[str, Any]) -> list[str]:
    """The command-line words of ``options`` (by dest), with ``flags`` the parser's actions by dest."""
    words: list[str] = []
    for dest, value in options.items():
        action = flags[dest]
        if value is None:
            continue
        flag = action.option_strings[0] if action.option_strings else None
        if action.nargs == 0:  # store_true
            if not isinstance(value, bool):
                raise InputError(f"{dest} is True or False, got {value!r}")
            if value:
                words.append(action.option_strings[0])
            continue
        values = [value] if isinstance(value, (str, int, float)) or not isinstance(value, Sequence) else value
        if action.nargs is None and len(values) != 1:  # the terminal's "unrecognized arguments" otherwise
            raise InputError(f"{dest} takes one value, got {value!r}")
        texts = [str(v) for v in values]
        if flag is None:
            words.extend(texts)
        else:
            words.append(flag)
            words.extend(texts)
    return words


def _python_words(message: str, actions: Iterable[argparse.Action]) -> str:
    """A refusal of the command line's parser in Python's words: each option named by its keyword (its
    dest: ``batch_size``, not ``--batch-size``), ``N must be a whole number >= 1, got 0`` instead of
    ``georecall bounds: argument --N: expected a whole number >= 1, got 0``, a flag with one of its choices or
    a file's placeholder as Python passes it (``attention="softmax"``, ``task="TABLE.npy"``, not ``--attention
    softmax``); the terminal's own message is unchanged."""
    names: dict[str, str] = {}
    values: dict[str, dict[str, str]] = {}  # a flag's literal choices, each as Python writes it
    for action in actions:
        for flag in action.option_strings:
            names[flag] = action.dest
            if action.choices is not None and action.nargs != 0:
                values[flag] = {str(c): f'"{c}"' if isinstance(c, str) else str(c) for c in action.choices}
        if not action.option_strings:  # argparse names a positional by its metavar, else its dest
            names[str(action.metavar or action.dest)] = action.dest

    def name(text: str) -> str:
        return names.get(text.split("/")[0], text.lstrip("-").replace("-", "_"))

    def keyword(m: re.Match) -> str:
        """``--attention softmax`` (a flag and one of its choices) as ``attention="softmax"``; ``--task
        TABLE.npy`` (a flag and a file's placeholder) as ``task="TABLE.npy"``."""
        flag, value = m[1], m[2]
        if value in values.get(flag, {}):
            return f"{name(flag)}={values[flag][value]}"
        if flag in names and re.fullmatch(r"[A-Z][A-Z_]*\.[a-z]+", value):
            return f'{name(flag)}="{value}"'
        return m[0]

    text = re.sub(r"^georecall(?: [\w-]+)*: ", "", message)
    text = re.sub(r"^argument ([^:]+): expected ", lambda m: f"{name(m[1])} must be ", text)
    text = re.sub(r"^argument ([^:]+): invalid choice: (.*) \(choose from (.*)\)$",
                  lambda m: f"{name(m[1])} must be one of {m[3]}, got {m[2]}", text)
    text = re.sub(r"^argument ([^:]+): ", lambda m: f"{name(m[1])}: ", text)
    text = re.sub(r"(?<![\w-])(--[A-Za-z][\w-]*) (\w[\w-]*(?:\.\w+)?)(?=[\s,;)]|\.(?:\s|$)|$)", keyword, text)
    return re.sub(r"(?<![\w-])--[A-Za-z][\w-]*", lambda m: name(m[0]), text)


@contextlib.contextmanager
def python_words(actions: Iterable[argparse.Action] = ()) -> Iterator[None]:
    """Re-word an :class:`~georecall.errors.InputError` raised inside: each option its message names by a
    command-line flag (``code kind (--codes)``, ``--batch-size``) named by its Python keyword instead
    (``code kind (codes)``, ``batch_size``). The exception keeps its class (``ConditionError``,
    ``UserCodeError``) and its traceback; only its message changes.

    Parameters
    ----------
    actions : iterable of argparse.Action
        A parser's actions, for flags whose keyword is not the flag's own name (default: none; a flag
        ``--x-y`` is then the keyword ``x_y``).

    Examples
    --------
    >>> from georecall.errors import InputError
    >>> try:
    ...     with python_words():
    ...         raise InputError("G1 does not take β (--beta); it takes: code kind (--codes)")
    ... except InputError as exc:
    ...     print(exc)
    G1 does not take β (beta); it takes: code kind (codes)
    """
    try:
        yield
    except InputError as exc:
        if exc.args and isinstance(exc.args[0], str):
            exc.args = (_python_words(exc.args[0], actions), *exc.args[1:])
        raise


def run_command(command: str, **options: Any) -> Result:
    """Run the ``georecall`` command ``command`` with ``options`` (keyword names are the options' dests:
    ``--batch-size`` is ``batch_size``) and return its result.

    Parameters
    ----------
    command : str
        The command, as typed ("train", "eval", "check single-hop").
    **options
        Its options. ``None`` leaves an option at the parser's default (but ``quiet`` at True: a command
        run from Python shows progress only with ``quiet=False``); ``True``/``False`` set or leave a switch;
        a list gives a multi-valued option.

    Returns
    -------
    Result

    Raises
    ------
    TypeError
        An option the command does not have.
    InputError
        A value the command's parser or the command itself refuses, or two options the command line refuses
        together (each option named by its keyword, as Python calls it: ``codes``, not ``--codes``); its
        subclasses (:class:`~georecall.errors.ConditionError`, :class:`~georecall.errors.UserCodeError`) keep
        their class and traceback.

    Examples
    --------
    >>> from georecall.api_command import run_command
    >>> run_command("count", N=3, R=1, k=1).passed
    True
    """
    from georecall.cli import commands, params, parser  # the command line: imported when run
    from georecall.cli.options import UsageError

    words = command.split()
    top = parser.build_parser()
    sub = top
    for word in words:  # down the sub-command parsers: "check single-hop" is two levels
        level = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction))
        if word not in level.choices:
            raise InputError(f"georecall has no command {command!r}")
        sub = level.choices[word]
    flags = {a.dest: a for a in sub._actions if a.dest != "help"}
    unknown = sorted(set(options) - set(flags))
    if unknown:
        known = sorted(d for d in flags if d not in params.STRUCTURE and d != "command")
        raise TypeError(f"{command} takes no option {', '.join(unknown)}; it takes {', '.join(known)}")
    positional = {d: v for d, v in options.items() if not flags[d].option_strings}
    named = {d: v for d, v in options.items() if flags[d].option_strings}
    argv = [*words, *_argv(positional, flags), "--quiet" if "quiet" in flags and options.get("quiet") is None
            else "", *_argv(named, flags)]
    try:
        namespace = top.parse_args([w for w in argv if w != ""])
        # what the terminal refuses as contradictory, given here (a value other than None or False)
        given = {dest for dest, value in options.items() if value is not None and value is not False}
        parser.refuse_conflicts(namespace, given)
        p = params.build(namespace)
    except UsageError as exc:
        raise InputError(_python_words(str(exc), [*top._actions, *sub._actions])) from None
    with python_words([*top._actions, *sub._actions]):  # the command's own refusals, in Python's words
        return Result(commands.COMMANDS[p.command](p))
