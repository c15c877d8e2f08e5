"""Sphinx configuration of the georecall documentation site.

Build it (from a clone): ``pip install '.[docs]'`` then
``sphinx-build -W --keep-going -b html docs docs/_build/html``. Why Sphinx: index.md, "About this site".
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_ext"))

import georecall  # noqa: E402

project = "georecall"
author = "the georecall authors"
copyright = "2026, the georecall authors"
release = version = georecall.__version__

extensions = [
    "myst_parser",  # the Markdown pages docs/ already has
    "sphinx.ext.autodoc",  # the API pages, from the docstrings
    "sphinx.ext.napoleon",  # NumPy-style docstrings
    "sphinx.ext.autosummary",  # one page per public name
    "sphinx.ext.mathjax",
    "cli_reference",  # the command reference, rendered from the parser at build time
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "**/*.jsonl", "**/*.json", "**/*.log", "**/*.txt"]

myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links are checked like any reference

autosummary_generate = True
autodoc_default_options = {"members": True, "undoc-members": False}
autodoc_typehints = "description"
autodoc_member_order = "bysource"
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_ivar = True  # a class's Attributes as fields (its properties are documented as members)

html_theme = "furo"
html_title = f"georecall {release}"
html_static_path: list[str] = []
