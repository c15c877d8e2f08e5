"""The errors a user can cause, and nothing else.

- :class:`InputError`: bad input (a size out of range, a table that is not a bijection, a damaged file,
  options that contradict each other). The command line reports it in one line and exits with code 2.
- :class:`ConditionError`: parameters outside a theorem's conditions (codes too short, a gate too small, a β
  whose leakage breaks the margin); the message names the violated inequality and its values. Exit code 2.
- :class:`UserCodeError`: the user's own code (a construction loaded with ``--construction MODULE:ATTR``)
  raised, or broke the spec's contract. The command line names the exception ("your construction raised
  ValueError: ...") and exits with code 2; its traceback is shown with ``--debug`` (or ``GEORECALL_DEBUG=1``).

All subclass ``ValueError``, so ``except ValueError`` still catches them. Any *other* exception escaping
georecall is a bug: the command line shows its traceback and exits with code 3, never disguised as bad input.
"""

from __future__ import annotations

__all__ = ["ConditionError", "InputError", "UserCodeError"]


class InputError(ValueError):
    """Bad input from the user: reported in one line (exit code 2)."""


class ConditionError(InputError):
    """Parameters outside a result's conditions: the message names the violated inequality (exit code 2)."""


class UserCodeError(InputError):
    """The user's own construction code raised (``__cause__`` holds its exception) or broke the spec's
    contract: exit code 2, the user's traceback only on request (``--debug``)."""
