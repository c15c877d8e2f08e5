"""The paper's statements as code: tasks, the token format, seeds and the sizes each theorem promises."""

from georecall import __version__

__all__ = ["__version__"]
