"""The ``georecall`` command line, in three layers: :mod:`.parser` (argparse declarations and ``main``) →
:mod:`.commands` (each returns a result document) → :mod:`.render` (text or strict JSON)."""

from georecall.verify.cli.parser import UsageError, build_parser, main

__all__ = ["UsageError", "build_parser", "main"]
