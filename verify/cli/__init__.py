"""The ``georecall`` command line, in layers: :mod:`.parser` (``main``; each command's options declared in
:mod:`.declarations` from the building blocks of :mod:`.options`) → :mod:`.params` (each command's typed
parameters, built once from the parsed arguments) → :mod:`.commands` (the table of commands, each in the
``commands_*`` module of its concern, returning a result document) → :mod:`.render` (text or strict JSON)."""

from georecall.verify.cli.parser import UsageError, build_parser, main

__all__ = ["UsageError", "build_parser", "main"]
