"""The ``georecall`` command line, in layers: :mod:`.parser` (argparse declarations and ``main``) →
:mod:`.params` (each command's typed parameters, built once from the parsed arguments) → :mod:`.commands`
(each returns a result document) → :mod:`.render` (text or strict JSON)."""

from georecall.verify.cli.parser import UsageError, build_parser, main

__all__ = ["UsageError", "build_parser", "main"]
