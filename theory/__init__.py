"""The paper's statements as code: tasks and the sizes each theorem promises."""

__version__ = "0.1.0"
