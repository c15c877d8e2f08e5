"""The documentation site: every relative link in the Markdown pages resolves, the API pages cover
``georecall.__all__``, the command reference covers every command of the parser, and the built site's index
page renders in headless Chromium (a screenshot with text in it, not a blank page).

The build test uses the site CI has just built when ``GEORECALL_DOCS_HTML`` names its folder, else builds it
into a temporary folder; it is skipped, with the reason, when Sphinx (``pip install '.[docs]'``) or Chromium
is absent.
"""

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import georecall

ROOT = pathlib.Path(__file__).parent.parent
DOCS = ROOT / "docs"
GENERATED = {"_build", "generated", "reference"}  # written by the build, not by hand
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list[pathlib.Path]:
    found = [p for p in DOCS.rglob("*.md") if not GENERATED & set(p.relative_to(DOCS).parts)]
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(found)]


def slug(heading: str) -> str:
    """MyST's heading anchor (``myst_heading_anchors``): lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: pathlib.Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def broken_links(page: pathlib.Path, text: str) -> list[str]:
    """The relative links of ``text`` (the page ``page``) whose file, or heading anchor, does not exist."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    bad = []
    for match in LINK.finditer(text):
        target = match.group(1) or match.group(2)
        if re.match(r"^[a-z][a-z+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = page if not path else (page.parent / path).resolve()
        if not resolved.exists():
            bad.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            bad.append(target)
    return bad


def test_every_relative_link_in_the_docs_resolves():
    bad = {str(p.relative_to(ROOT)): broken for p in pages() if (broken := broken_links(p, p.read_text()))}
    assert bad == {}
    assert len(pages()) >= 20


def test_a_broken_link_is_caught():
    page = DOCS / "index.md"
    planted = ("[ok](cli.md) [gone](no_such_page.md) [anchor](cli.md#no-such-heading) "
               "[good anchor](cli.md#quick-start) [web](https://example.org/x.md) ![fig](figures/nope.png)")
    assert broken_links(page, planted) == ["no_such_page.md", "cli.md#no-such-heading", "figures/nope.png"]


def test_the_api_pages_list_exactly_the_public_names():
    text = (DOCS / "api" / "index.md").read_text()
    listed = re.findall(r"^   (\w+)$", text, flags=re.M)
    assert sorted(listed) == sorted(n for n in georecall.__all__ if n != "__version__")
    assert len(listed) == len(set(listed))


def test_the_command_reference_covers_every_command_of_the_parser():
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import cli_reference
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    from georecall.cli import params
    from georecall.cli.parser import build_parser

    found = cli_reference.commands(build_parser())
    assert {words.removeprefix("georecall ") for words, _, _ in found} == set(params.PARAMS)
    text = cli_reference.render()
    for words, _, _ in found:
        assert f"\n## {words}\n" in text
    assert "--max-gib" in text and "--construction" in text


# ----------------------------------------------------------------------------------- the built site

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)


def screenshot(html: pathlib.Path, png: pathlib.Path) -> None:
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1280,900", f"--screenshot={png}", html.as_uri()],
                   capture_output=True, timeout=120, check=True)


def has_text(png: pathlib.Path) -> bool:
    """Whether the screenshot shows a page with text: enough pixels differ from the background (the most
    common colour), and they vary."""
    import numpy as np
    from matplotlib import image

    pixels = image.imread(str(png))[..., :3].reshape(-1, 3)
    values, counts = np.unique((pixels * 255).round().astype(np.int64), axis=0, return_counts=True)
    background = values[counts.argmax()]
    ink = np.abs((pixels * 255).round() - background).sum(axis=1) > 60
    return bool(ink.mean() > 0.01 and pixels.std() > 0.02)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> pathlib.Path:
    given = os.environ.get("GEORECALL_DOCS_HTML")
    if given:
        return pathlib.Path(given)
    if importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("myst_parser") is None:
        pytest.skip("Sphinx and MyST-Parser are not installed (pip install '.[docs]' from a clone)")
    out = tmp_path_factory.mktemp("html")
    subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
                    str(out)], check=True, capture_output=True, timeout=900)
    return out


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (CI installs it with apt)")
def test_the_built_index_page_renders_with_text(site, tmp_path):
    index = site / "index.html"
    assert index.exists()
    assert (site / "api" / "generated" / "georecall.check.html").exists()
    assert (site / "reference" / "commands.html").exists()
    png = tmp_path / "index.png"
    screenshot(index, png)
    assert has_text(png)


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (CI installs it with apt)")
def test_a_blank_page_is_seen_as_blank(tmp_path):
    blank = tmp_path / "blank.html"
    blank.write_text("<html><body style='background: white'></body></html>")
    png = tmp_path / "blank.png"
    screenshot(blank, png)
    assert not has_text(png)
