"""A Sphinx extension: the command reference (``reference/commands.md``) rendered from the ``georecall``
argument parser each time the site is built, so it cannot drift from what ``georecall COMMAND --help`` says.

:func:`render` walks the parser that ``georecall`` itself runs
(:func:`georecall.cli.parser.build_parser`) and writes, for every command, its one-line help and its
full ``--help`` text. The file is generated into the source folder before Sphinx reads it (``builder-inited``)
and is not committed (``.gitignore``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

__all__ = ["commands", "render", "setup"]

OUTPUT = Path("reference") / "commands.md"
WIDTH = "100"  # the help text's line width (argparse reads COLUMNS)


def commands(parser: argparse.ArgumentParser, prefix: str = "georecall") -> list[tuple[str, str, str]]:
    """Every command of ``parser``, depth first: ``(words, one-line help, full help)``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The ``georecall`` parser.
    prefix : str
        The words so far.

    Returns
    -------
    list of tuple of str
    """
    found: list[tuple[str, str, str]] = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for name, sub in action.choices.items():
            words = f"{prefix} {name}"
            nested = commands(sub, words)
            if nested:
                found.extend(nested)
            else:
                summary = (helps.get(name) or "").replace("%%", "%")  # argparse's escape, as --help shows it
                found.append((words, summary, sub.format_help()))
    return found


def render() -> str:
    """The command reference, as Markdown.

    Returns
    -------
    str
    """
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        from georecall.cli.parser import build_parser  # the parser georecall runs

        parser = build_parser()
        found = commands(parser)
        top = parser.format_help()
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    lines = ["# Command reference", "",
             "Generated from the `georecall` argument parser when this site is built "
             "(`docs/_ext/cli_reference.py`): each section is what `georecall COMMAND --help` prints. "
             "Shared options, exit codes, the memory budget and `--json` are explained in "
             "[the command line](../cli.md).", "",
             "| command | what it does |", "|---|---|"]
    lines += [f"| [`{words}`](#{words.replace(' ', '-')}) | {summary.replace('|', '&#124;')} |"
              for words, summary, _ in found]
    lines += ["", "## georecall", "", "```text", top.rstrip(), "```", ""]
    for words, summary, text in found:
        lines += [f"## {words}", "", summary, "", "```text", text.rstrip(),
                  "```", ""]
    return "\n".join(lines)


def _write(app) -> None:
    target = Path(app.srcdir) / OUTPUT
    target.parent.mkdir(exist_ok=True)
    text = render()
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")


def setup(app):
    app.connect("builder-inited", _write)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
