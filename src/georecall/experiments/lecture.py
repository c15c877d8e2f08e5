"""``georecall lecture``: execute the lecture notebook (docs/notebooks/lecture.md) and render it as a handout
page and as slides.

The notebook is a jupytext Markdown file, so it diffs as text; this module reads it (jupytext; any reading
failure is one :class:`InputError` naming the file), runs every cell in a fresh Python kernel (nbclient,
ipykernel), and writes the executed notebook, one self-contained HTML handout and one self-contained slide
deck (nbconvert; every figure embedded as a PNG data URI; the slides run reveal.js 5.2.1, taken from the npm
registry and bundled in ``reveal/`` beside this module with its licence, inlined into the page: they work with
no network). The packages come with the optional ``teach`` extra (``pip install '.[teach]'``); nothing else in
georecall imports them.

**Slides**: one idea per slide. Each Markdown cell opens a slide; a code cell that draws a figure opens its
own slide; a code cell whose output is text stays on the slide before it; code is hidden (the handout shows
it). Cells tagged ``remove-input`` (the setup cell) show no code in the handout either. Interactive widgets
(ipywidgets sliders, live only in a running notebook) are left out of both pages: the cell that offers them
also draws the same figure statically.

**Interruptions**: the kernel runs in its own session, driven from a worker thread, so that Ctrl-C and SIGTERM
reach georecall's own handlers (nbclient would otherwise take both signals over for its event loop and then
restore SIGTERM's default, which kills the process mid-write): the kernel is stopped, no file is written, and
the interruption goes on to the command line (130 / 143).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import warnings

from georecall.errors import InputError
from georecall.io import atomic_write, validate_output_path

__all__ = ["TEACH_HINT", "TEACH_PACKAGES", "build_lecture", "default_notebook", "have_teach", "read_notebook",
           "render_slides", "require_teach", "slide_types"]

TEACH_PACKAGES = ("jupytext", "nbclient", "nbconvert", "ipykernel", "matplotlib")
TEACH_HINT = ("the lecture needs the teach extra: pip install '.[teach]' (jupytext, nbclient, nbconvert, "
              "ipykernel, matplotlib)")
NOTEBOOK = os.path.join("docs", "notebooks", "lecture.md")
HERE = os.path.dirname(os.path.abspath(__file__))
# docs/notebooks/lecture.md as a non-editable install ships it: pyproject.toml maps the package
# georecall.experiments.notebooks onto docs/notebooks/ and installs lecture.md as its package data
PACKAGED = os.path.join(HERE, "notebooks", "lecture.md")
REVEAL = os.path.join(HERE, "reveal")
WIDGET = "application/vnd.jupyter.widget-view+json"
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")  # a terminal's escape sequences (colours), as in tracebacks
_INLINE = "georecall-inline-reveal"  # the reveal.js prefix the template writes, replaced by the files inlined
# nbconvert's lab page without the scripts it would fetch from the network (require.js, MathJax, Mermaid): the
# lecture has no LaTeX and no diagrams, and its widgets are left out, so the page is complete offline (its CSS
# is inline)
_SELF_CONTAINED = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
"""
# nbconvert's reveal page without anything fetched (jQuery, require.js, Mermaid, MathJax, widgets), reveal.js
# started by a plain script: the bundled reveal.js is inlined in its place (_inline_reveal)
_SLIDES = """{%- extends 'reveal/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_css -%}
<style type="text/css">
.reveal .slides > section { height: 100%; overflow-y: auto; text-align: left; }
.reveal pre, .jp-OutputArea-output pre { font-size: 15px; line-height: 1.25; }
.reveal img { max-height: 560px; }
</style>
{%- endblock html_head_css -%}
{% block footer_js %}
<script src="georecall-inline-reveal/dist/reveal.js"></script>
<script>
Reveal.initialize({controls: true, progress: true, history: true, hash: true, transition: "none",
                   slideNumber: "c/t", width: 1280, height: 800, margin: 0.04});
</script>
{% endblock footer_js %}
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
    """Where the lecture's source is: ``docs/notebooks/lecture.md`` of the checkout georecall was installed
    from in editable mode, else the copy installed with the package (:data:`PACKAGED`, package data of a
    non-editable install), else ``docs/notebooks/lecture.md`` of the current folder (a checkout); ``None``
    when none has it. The answer does not depend on the current folder when georecall was installed from a
    checkout, editable or not.

    Returns
    -------
    str or None
    """
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # HERE is src/georecall/experiments/
    for path in (os.path.join(checkout, NOTEBOOK), PACKAGED, os.path.join(os.getcwd(), NOTEBOOK)):
        if os.path.isfile(path):
            return path
    return None


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return (lines[0] if lines else type(error).__name__)[:300]


def read_notebook(path: str):
    """The notebook at ``path`` (jupytext Markdown, or any format jupytext reads: ``.ipynb``, ``.py``), read
    and validated as nbformat 4, or one :class:`InputError` naming the file and what is wrong.

    Parameters
    ----------
    path : str

    Returns
    -------
    nbformat.NotebookNode

    Raises
    ------
    InputError
        No such file, not readable, binary, not UTF-8, not JSON (``.ipynb``), an nbformat other than 4, front
        matter that is not YAML, or a notebook nbformat's schema refuses.
    """
    import jupytext
    import nbformat

    if not os.path.isfile(path):
        raise InputError(f"no such notebook: {path!r}")
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise InputError(f"notebook {path!r} cannot be read: {exc.strerror or exc}") from None
    if b"\x00" in raw:
        raise InputError(f"notebook {path!r} is a binary file, not a notebook")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"notebook {path!r} is not UTF-8 text (byte {exc.start})") from None
    extension = os.path.splitext(path)[1].lower()
    try:
        if extension == ".ipynb":
            try:
                data = json.loads(text)
            except (ValueError, RecursionError) as exc:
                raise InputError(f"notebook {path!r} is not JSON: {_first_line(exc)}") from None
            if not isinstance(data, dict):
                raise InputError(f"notebook {path!r} is not a notebook: its JSON is a {type(data).__name__}")
            if data.get("nbformat") != 4:
                raise InputError(f"notebook {path!r} has nbformat {data.get('nbformat')!r}: georecall runs "
                                 "nbformat 4 notebooks")
            nb = nbformat.from_dict(data)
        else:
            nb = jupytext.reads(text, fmt=extension.lstrip(".") or "md")
        with warnings.catch_warnings():  # nbformat's warnings about a notebook it still accepts: not ours
            warnings.simplefilter("ignore")
            nbformat.validate(nb)
    except InputError:
        raise
    except Exception as exc:  # jupytext, YAML, nbformat's schema: whatever they raise on a damaged file
        raise InputError(f"notebook {path!r} cannot be read: {_first_line(exc)}") from None
    if nb.get("nbformat") != 4:
        raise InputError(f"notebook {path!r} has nbformat {nb.get('nbformat')!r}: georecall runs nbformat 4 "
                         "notebooks")
    return nb


def slide_types(nb) -> None:
    """Mark each cell's ``slideshow.slide_type`` (module docstring, "Slides"), in place.

    Parameters
    ----------
    nb : nbformat.NotebookNode
        An executed notebook.
    """
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            kind = "slide"
        elif cell.cell_type != "code":
            kind = "skip"
        else:
            outputs = cell.get("outputs", [])
            if any("image/png" in output.get("data", {}) for output in outputs):
                kind = "slide"
            elif outputs:
                kind = "-"
            else:
                kind = "skip"
        cell.metadata.setdefault("slideshow", {})["slide_type"] = kind


def _drop_widgets(nb) -> None:
    """Leave out the outputs that show a live widget (they need a running kernel); in place."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.get("outputs", []) if WIDGET not in o.get("data", {})]
    nb.metadata.pop("widgets", None)


def _inline_reveal(page: str) -> str:
    """The slide page with the bundled reveal.js (script, core and theme style sheets) inlined."""
    def read(*parts: str) -> str:
        with open(os.path.join(REVEAL, *parts), encoding="utf-8") as handle:
            return handle.read()

    script = read("reveal.js").replace("</script", "<\\/script")
    replacements = (
        (r'<script[^>]*src="' + _INLINE + r'/dist/reveal\.js"[^>]*></script>', f"<script>{script}</script>"),
        (r'<link[^>]*href="' + _INLINE + r'/dist/reveal\.css"[^>]*>', f"<style>{read('reveal.css')}</style>"),
        (r'<link[^>]*href="' + _INLINE + r'/dist/theme/white\.css"[^>]*>',
         f"<style>{read('white.css')}</style>"),
    )
    for pattern, new in replacements:
        def literal(_match: re.Match, text: str = new) -> str:  # the replacement as it is (no escapes)
            return text

        page, found = re.subn(pattern, literal, page)
        if found != 1:  # nbconvert's template changed: a deck without reveal.js must not be written
            raise RuntimeError(f"the slide template no longer has one {pattern!r}")
    return page


def render_slides(nb, name: str = "lecture") -> str:
    """The slide deck of an executed notebook whose cells carry their slide types (:func:`slide_types`): one
    self-contained page, code hidden, the bundled reveal.js inlined.

    Parameters
    ----------
    nb : nbformat.NotebookNode
    name : str
        The deck's title.

    Returns
    -------
    str
        The HTML page.
    """
    import jinja2
    import nbformat
    from nbconvert import SlidesExporter

    exporter = SlidesExporter(template_name="reveal", embed_images=True,
                              extra_loaders=[jinja2.DictLoader({"slides.html.j2": _SLIDES})],
                              template_file="slides.html.j2", exclude_input=True, exclude_input_prompt=True,
                              exclude_output_prompt=True, reveal_url_prefix=_INLINE, reveal_theme="white")
    deck, _ = exporter.from_notebook_node(nbformat.from_dict(nb), resources={"metadata": {"name": name}})
    return _inline_reveal(deck)


class _Interrupt:
    """Signals received while the kernel runs: the first one's exception, raised again by the main thread."""

    def __init__(self) -> None:
        self.exception: BaseException | None = None


def _run(client, interrupt: _Interrupt) -> None:
    """Execute the notebook in a worker thread (so nbclient installs no signal handler); the main thread waits
    and stays the one that receives signals. On an interruption the kernel is killed and the thread joined."""
    outcome: dict = {}

    def work() -> None:
        try:
            # the kernel's log off (a cell's errors come as messages); GEORECALL_LECTURE_BUILD: the notebook
            # draws its static figures instead of live widgets
            client.execute(stderr=subprocess.DEVNULL, env={**os.environ, "GEORECALL_LECTURE_BUILD": "1"})
        except BaseException as exc:  # handed to the main thread
            outcome["error"] = exc
        finally:  # the event loop nbclient made for this thread
            try:
                loop = asyncio.get_event_loop()
                if not loop.is_running():
                    loop.close()
            except RuntimeError:
                pass

    worker = threading.Thread(target=work, name="georecall-lecture-kernel", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except BaseException as exc:  # Ctrl-C or SIGTERM (raised by the command line's handler)
        interrupt.exception = exc
        _kill_kernel(client)
        worker.join(30)
        raise
    if "error" in outcome:
        raise outcome["error"]


def _kill_kernel(client) -> None:
    """Kill the kernel's process group (it runs in its own session), whatever state the client is in."""
    process = getattr(getattr(getattr(client, "km", None), "provisioner", None), "process", None)
    pid = getattr(process, "pid", None)
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _written(path: str, data: str, what: str) -> str:
    """``atomic_write`` with a failure as one line naming the file (its temporary is removed)."""
    try:
        return atomic_write(path, data)
    except OSError as exc:
        raise InputError(f"cannot write the {what} {path!r}: {exc.strerror or exc}") from None


def _plain(text: str) -> str:
    """The first non-blank line of ``text`` without terminal colour codes (a kernel's tracebacks carry them),
    at most 300 characters."""
    lines = [line.strip() for line in _ANSI.sub("", text).splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


class _Cells:
    """The code cells as the kernel runs them: which one runs (a failure's message names it) and, with
    ``progress``, a line on stderr as each one finishes without an error."""

    def __init__(self, nb, start: float, progress: bool) -> None:
        # a code cell's index in the notebook -> its number among the code cells, from 1
        self.numbers: dict[int, int] = {}
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                self.numbers[index] = len(self.numbers) + 1
        self.start, self.progress, self.done = start, progress, 0
        self.running: tuple[int, str] | None = None  # the running cell's number and first source line

    def execute(self, cell, cell_index: int, **_) -> None:
        """nbclient's ``on_cell_execute``: a code cell is sent to the kernel."""
        self.running = (self.numbers.get(cell_index, 0), _plain(cell.source))

    def executed(self, cell, execute_reply=None, **_) -> None:
        """nbclient's ``on_cell_executed``: a code cell ran (one that raised is not counted as run)."""
        failed = (execute_reply or {}).get("content", {}).get("status") == "error"
        if failed and "raises-exception" not in cell.metadata.get("tags", []):
            return
        self.done += 1
        if self.progress:
            seconds = time.perf_counter() - self.start
            print(f"lecture: [{self.done}/{len(self.numbers)}] cells run, {seconds:.0f} s", file=sys.stderr,
                  flush=True)

    def where(self, notebook: str) -> str:
        """The running cell of ``notebook``, for a message: ``code cell 2 of 9 of 'lecture.md' (it begins
        'x = 1')``."""
        if self.running is None:
            return f"a code cell of {notebook!r}"
        number, line = self.running
        return f"code cell {number} of {len(self.numbers)} of {notebook!r} (it begins {line!r})"


def _made_folder(path: str) -> list[str]:
    """Create the folder ``path`` with its missing parents; the folders created, deepest first."""
    missing = []
    folder = os.path.abspath(path)
    while not os.path.exists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the output folder {path!r}: {exc.strerror or exc}") from None
    return missing


def _remove_empty(folders: list[str]) -> None:
    """Remove the folders a failed build created (deepest first), as long as they are empty."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:  # not empty (a cell wrote into it), or gone: kept as it is
            return


def build_lecture(notebook: str, out_dir: str, *, timeout: int = 600, kernel: str = "python3",
                  progress: bool = False) -> dict:
    """Execute ``notebook`` (jupytext Markdown) end to end and write ``out_dir/<name>.ipynb``, the handout
    ``out_dir/<name>.html`` and the slides ``out_dir/<name>.slides.html``.

    Every cell runs in a fresh kernel whose working folder is ``out_dir``; a cell that raises, runs past
    ``timeout`` or kills its kernel stops the build with one :class:`InputError` naming it (its number among
    the code cells and its first line; the error's type and message without terminal colour codes). The
    handout is nbconvert's ``lab`` template with the figures embedded (``embed_images``); the slides its
    ``reveal`` template with the code hidden and the bundled reveal.js inlined (module docstring). Nothing is
    written until every cell has run, and a build that fails or is interrupted removes the folders it created
    for ``out_dir`` again when they are empty.

    Parameters
    ----------
    notebook : str
        The source (``.md`` in jupytext's Markdown format, or ``.ipynb``).
    out_dir : str
        The output folder, created (with its missing parents) when missing.
    timeout : int
        The longest one cell may run, in seconds.
    kernel : str
        The Jupyter kernel's name.
    progress : bool
        A line on stderr as the kernel starts and as each code cell finishes without an error (``[i/n]``,
        seconds so far).

    Returns
    -------
    dict
        ``notebook``, ``html`` and ``slides`` (the paths written), ``cells`` (code cells run), ``seconds``
        (execution time), ``images`` (PNG outputs embedded), ``slide_count``.

    Raises
    ------
    InputError
        Without the teach extra, a missing or unreadable notebook (:func:`read_notebook`), an output folder
        that cannot be created, a cell that fails, runs past ``timeout`` or kills its kernel, or an output
        that cannot be written.
    KeyboardInterrupt
        Ctrl-C or SIGTERM while the cells run (the kernel is killed first; nothing is written).
    """
    require_teach()
    nb = read_notebook(notebook)
    created = _made_folder(out_dir)
    try:
        return _build(nb, notebook, out_dir, timeout=timeout, kernel=kernel, progress=progress)
    except BaseException:
        _remove_empty(created)
        raise


def _build(nb, notebook: str, out_dir: str, *, timeout: int, kernel: str, progress: bool) -> dict:
    """:func:`build_lecture` in an existing ``out_dir``: run the cells, render, write."""
    import jinja2
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor

    name = os.path.splitext(os.path.basename(notebook))[0]
    ipynb_path = validate_output_path(os.path.join(out_dir, f"{name}.ipynb"), what="executed notebook")
    html_path = validate_output_path(os.path.join(out_dir, f"{name}.html"), what="lecture page")
    slides_path = validate_output_path(os.path.join(out_dir, f"{name}.slides.html"), what="lecture slides")
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": "Python 3", "language": "python"}
    start = time.perf_counter()
    cells = _Cells(nb, start, progress)
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel,
                            resources={"metadata": {"path": os.path.abspath(out_dir)}},
                            on_cell_execute=cells.execute, on_cell_executed=cells.executed)
    interrupt = _Interrupt()
    if progress:
        print(f"lecture: running the {len(cells.numbers)} code cells of {notebook} in a fresh {kernel} "
              "kernel", file=sys.stderr, flush=True)
    try:
        _run(client, interrupt)
    except CellTimeoutError:
        raise InputError(f"{cells.where(notebook)} ran past --timeout {timeout} s") from None
    except DeadKernelError:
        raise InputError(f"the kernel died while running {cells.where(notebook)} (the cell killed it, or it "
                         "ran out of memory)") from None
    except CellExecutionError as error:
        what = _plain(error.ename) or "an error"
        message = _plain(error.evalue)
        said = f"{what}: {message}" if message else what
        raise InputError(f"{cells.where(notebook)} failed: {said}") from None
    seconds = time.perf_counter() - start
    _drop_widgets(nb)
    slide_types(nb)
    loader = jinja2.DictLoader({"lecture.html.j2": _SELF_CONTAINED})
    tags = TagRemovePreprocessor(remove_input_tags={"remove-input"}, enabled=True)
    tagged, _ = tags.preprocess(nbformat.from_dict(nb), {})
    html, _ = HTMLExporter(template_name="lab", embed_images=True, extra_loaders=[loader],
                           template_file="lecture.html.j2").from_notebook_node(
        tagged, resources={"metadata": {"name": name}})
    deck = render_slides(nb, name)
    _written(ipynb_path, nbformat.writes(nb), "executed notebook")
    _written(html_path, html, "lecture page")
    _written(slides_path, deck, "lecture slides")
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    images = sum(1 for cell in code for output in cell.get("outputs", [])
                 if "image/png" in output.get("data", {}))
    slide_count = sum(1 for cell in nb.cells
                      if cell.metadata.get("slideshow", {}).get("slide_type") == "slide")
    return {"notebook": ipynb_path, "html": html_path, "slides": slides_path, "cells": len(code),
            "seconds": seconds, "images": images, "slide_count": slide_count}
