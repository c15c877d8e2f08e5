"""``georecall lecture``: execute the lecture notebook (docs/notebooks/lecture.md) and render it as HTML.

The notebook is a jupytext Markdown file, so it diffs as text; this module reads it (jupytext), runs every
cell in a fresh Python kernel (nbclient, ipykernel), and writes the executed notebook and one self-contained
HTML page (nbconvert; every figure embedded as a PNG data URI). The packages come with the optional ``teach``
extra (``pip install '.[teach]'``); nothing else in georecall imports them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import time

from georecall.errors import InputError
from georecall.io import atomic_write, validate_output_path

__all__ = ["TEACH_HINT", "TEACH_PACKAGES", "build_lecture", "default_notebook", "have_teach", "require_teach"]

TEACH_PACKAGES = ("jupytext", "nbclient", "nbconvert", "ipykernel", "matplotlib")
TEACH_HINT = ("the lecture needs the teach extra: pip install '.[teach]' (jupytext, nbclient, nbconvert, "
              "ipykernel, matplotlib)")
NOTEBOOK = os.path.join("docs", "notebooks", "lecture.md")
# nbconvert's lab page without the scripts it would fetch from the network (require.js, MathJax, Mermaid): the
# lecture has no widgets, no LaTeX and no diagrams, so the page is complete offline (its CSS is inline)
_SELF_CONTAINED = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
"""


def _missing() -> list[str]:
    return [name for name in TEACH_PACKAGES if importlib.util.find_spec(name) is None]


def have_teach() -> bool:
    """Whether every package of the teach extra can be imported (:data:`TEACH_PACKAGES`)."""
    return not _missing()


def require_teach() -> None:
    """Refuse without the teach extra.

    Raises
    ------
    InputError
        A package of :data:`TEACH_PACKAGES` is missing (the message names them and how to install them).
    """
    missing = _missing()
    if missing:
        raise InputError(f"{TEACH_HINT}; missing: {', '.join(missing)}")


def default_notebook() -> str | None:
    """Where the lecture's source is: ``docs/notebooks/lecture.md`` of the source tree georecall was installed
    from in editable mode, else of the current folder (a checkout); ``None`` when neither has it.

    Returns
    -------
    str or None
    """
    here = os.path.dirname(os.path.abspath(__file__))  # verify/experiments/ in a source tree
    for root in (os.path.dirname(os.path.dirname(here)), os.getcwd()):
        path = os.path.join(root, NOTEBOOK)
        if os.path.isfile(path):
            return path
    return None


def build_lecture(notebook: str, out_dir: str, *, timeout: int = 600, kernel: str = "python3") -> dict:
    """Execute ``notebook`` (jupytext Markdown) end to end and write ``out_dir/<name>.ipynb`` and
    ``out_dir/<name>.html``.

    Every cell runs in a fresh kernel whose working folder is ``out_dir``; a cell that raises stops the build
    (nbclient's ``CellExecutionError``, re-raised as :class:`InputError` naming the cell). The HTML is
    nbconvert's ``lab`` template with the figures embedded (``embed_images``).

    Parameters
    ----------
    notebook : str
        The source (``.md`` in jupytext's Markdown format, or ``.ipynb``).
    out_dir : str
        An existing folder.
    timeout : int
        The longest one cell may run, in seconds.
    kernel : str
        The Jupyter kernel's name.

    Returns
    -------
    dict
        ``notebook`` and ``html`` (the paths written), ``cells`` (code cells run), ``seconds`` (execution
        time), ``images`` (PNG outputs embedded).

    Raises
    ------
    InputError
        Without the teach extra, a missing notebook, or a cell that fails.
    """
    require_teach()
    if not os.path.isfile(notebook):
        raise InputError(f"no lecture notebook at {notebook!r}")
    import jinja2
    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from nbconvert import HTMLExporter

    name = os.path.splitext(os.path.basename(notebook))[0]
    ipynb_path = validate_output_path(os.path.join(out_dir, f"{name}.ipynb"), what="executed notebook")
    html_path = validate_output_path(os.path.join(out_dir, f"{name}.html"), what="lecture page")
    nb = jupytext.read(notebook)
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": "Python 3", "language": "python"}
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel,
                            resources={"metadata": {"path": os.path.abspath(out_dir)}})
    start = time.perf_counter()
    try:
        client.execute(stderr=subprocess.DEVNULL)  # the kernel's own log; a cell's errors come as messages
    except CellExecutionError as error:
        raise InputError(f"a lecture cell failed: {str(error).strip().splitlines()[-1]}") from error
    seconds = time.perf_counter() - start
    atomic_write(ipynb_path, nbformat.writes(nb))
    exporter = HTMLExporter(template_name="lab", embed_images=True, extra_loaders=[
        jinja2.DictLoader({"lecture.html.j2": _SELF_CONTAINED})], template_file="lecture.html.j2")
    html, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": name}})
    atomic_write(html_path, html)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    images = sum(1 for cell in code for output in cell.get("outputs", [])
                 if "image/png" in output.get("data", {}))
    return {"notebook": ipynb_path, "html": html_path, "cells": len(code), "seconds": seconds,
            "images": images}
