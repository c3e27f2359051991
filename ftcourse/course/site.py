"""The course as a website: the executed notebooks, built into a static site with Jupyter Book.

``build_site(executed, out)`` takes a folder holding executed copies of the course's notebooks
(``notebooks/``, ``solutions/``: what ``python -m ftcourse.course.notebooks build`` writes, or the
repository itself, whose notebooks are committed executed) and builds ``out/site/``:

- a landing page: what the course teaches, the lessons in order with a one-line summary each,
  and each lesson's headline figures, published beside measured, read from the notebooks'
  ``ftcourse.report.headline`` outputs (``headlines_in``), never typed;
- one page per notebook, with the sidebar, previous/next links and a page table of contents of
  the Sphinx book theme; math by MathJax served from the site itself;
- a page for instructors (``book/instructors.md``).

The notebooks are rendered, never executed again (``execute_notebooks: off``), and nothing on
the site is fetched from another machine: ``remote_references`` lists what would be, and the
build fails on it.

``python -m ftcourse.course.site [--executed build] [--out build]`` rebuilds the site alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import nbformat

from ..config import REPO_ROOT
from .catalog import course_notebooks
from ..report import format_figure as fmt_figure, headlines_in  # the lessons' own number format

BOOK_SOURCES = REPO_ROOT / "book"  # _config.yml, intro.md, instructors.md, _static/
NO_HEADLINE = "no headline recorded"


class SiteError(RuntimeError):
    """The site could not be built; the message names the problem and the fix."""


@dataclass(frozen=True)
class Page:
    """One notebook's page. ``path`` is relative to the course root, without ``.ipynb``."""

    path: str
    summary: str  # one line on the landing page
    part: str = "Lessons"
    nav_title: str | None = None  # the sidebar's title, when the notebook's heading would be ambiguous
    headlines_from: str | None = None  # the notebook whose headline the landing page shows (default: itself)
    instructors: bool = False  # not a lesson: listed under "For instructors", marked as theirs
    banner: str = ""  # MyST shown above the notebook on its page (the notebook itself is not changed)


EXERCISE_BANNER = """:::{note}
This page shows the student's notebook executed as handed out: the cells that stop with
`NotImplementedError` are the stubs to fill in. Download it (the button at the top) to work on it.
:::"""

SOLUTION_BANNER = """:::{admonition} The instructor's solution
:class: warning
The worked solution of the exercise, for instructors. Students: solve
{doc}`the exercise <../notebooks/05_exercise_bert_base>` first. Grading is described in
{doc}`../instructors`.
:::"""

PAGES = (
    Page("notebooks/01_composition",
         "The composition y = head(encoder(x)), the four head shapes, and the transfer recipe in both regimes."),
    Page("notebooks/02_feature_readout",
         "Which layer to read when the encoder stays frozen: the BERT paper's CoNLL-2003 table."),
    Page("notebooks/03_costs_and_lora",
         "What each regime costs in parameters, storage, time, memory and labelled data, and LoRA with peft."),
    Page("notebooks/03b_peft_frontier",
         "The parameter-efficient frontier: every method the texts name, trained on one encoder and one budget."),
    Page("notebooks/03c_between_the_extremes",
         "Between the extremes: freezing the lower layers, the stability tactics one at a time, and what pretraining buys."),
    Page("notebooks/04_cls_vs_sbert",
         "[CLS] is not a sentence embedding: raw BERT against GloVe and Sentence-BERT on STS-B."),
    Page("notebooks/04b_span_and_pair_heads",
         "The span and pair heads, trained: extractive answers from CoNLL-2003, and a cross-encoder against a bi-encoder."),
    Page("notebooks/05_exercise_bert_base",
         "The exercise: bert-base frozen, fine-tuned and with LoRA at rank 8, and how stable each is across seeds.",
         part="Exercise", headlines_from="solutions/05_exercise_bert_base", banner=EXERCISE_BANNER),
    Page("solutions/05_exercise_bert_base", "The exercise's worked solution.", part="For instructors",
         nav_title="Solution of the exercise (instructors)", instructors=True, banner=SOLUTION_BANNER),
)
INSTRUCTORS_PAGE = "instructors"  # book/instructors.md
#: Who a site is for. The students' site has the lessons and the student exercise, and no
#: solution: no page, no link, no figure of it. The instructors' site adds the solution, the
#: grading page and its rubric.
AUDIENCES = {"students": "site", "instructors": "site-instructors"}  # audience -> folder under out/


@dataclass
class Entry:
    """A page as built: its notebook, the title read from it, and the headlines shown for it."""

    page: Page
    title: str
    headlines: list[dict] = field(default_factory=list)
    status: str = ""  # how its execution went, when the build knows


def _check_audience(audience: str) -> None:
    if audience not in AUDIENCES:
        raise SiteError(f"Unknown audience {audience!r}. Known: {', '.join(AUDIENCES)}.")


def pages_for(executed: Path, audience: str = "instructors") -> list[Page]:
    """``PAGES`` whose notebooks are in ``executed``, then any course notebook PAGES lacks
    (shown under "More", so the site never silently drops one; tests/test_site.py fails on it).
    For students, no instructors' page and nothing from ``solutions/``."""
    _check_audience(audience)
    executed = Path(executed)
    for_students = audience == "students"
    listed = [p for p in PAGES if (executed / f"{p.path}.ipynb").is_file() and not (for_students and p.instructors)]
    known = {p.path for p in PAGES}
    extra = [Page(path, "(no summary: add this notebook to ftcourse.course.site.PAGES)", part="More")
             for path in (f"{nb.parent.name}/{nb.stem}" for nb in course_notebooks(executed))
             if path not in known and not (for_students and path.startswith("solutions/"))]
    if not listed and not extra:
        raise SiteError(f"No course notebooks under {executed} (looked in notebooks/ and solutions/). "
                        "Fix: run `python -m ftcourse.course.notebooks build --out build` first, or pass the "
                        "repository root, whose notebooks are committed executed.")
    return listed + extra


def notebook_title(nb) -> str:
    """The notebook's first Markdown heading (the title its page and the sidebar show)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            match = re.search(r"^#\s+(.+?)\s*#*\s*$", cell.source, re.MULTILINE)
            if match:
                return match.group(1)
    return ""


def entries(executed: Path, status: dict[str, str] | None = None, audience: str = "instructors") -> list[Entry]:
    """Every page with its title and the headlines its notebook (or ``headlines_from``) recorded.
    Students see no headline taken from a solution."""
    executed = Path(executed)
    found = []
    for page in pages_for(executed, audience):
        nb = nbformat.read(executed / f"{page.path}.ipynb", as_version=4)
        if audience == "students" and page.headlines_from:
            page = replace(page, headlines_from=None)
        source = executed / f"{page.headlines_from or page.path}.ipynb"
        headlines = headlines_in(source) if source.is_file() else []
        found.append(Entry(page, notebook_title(nb) or page.path, headlines, (status or {}).get(page.path, "")))
    return found


# ----------------------------------------------------------------------------- the landing page


def md_text(text) -> str:
    """Text that Markdown (MyST, with $math$) shows as typed, on one line (a table's cell)."""
    return re.sub(r"([\\`*_\[\]{}<>|$#])", r"\\\1", " ".join(str(text).split()))


def link_text(title: str) -> str:
    """A notebook's title (Markdown already: `code`, $math$) as a link's text: brackets escaped."""
    return re.sub(r"([\[\]])", r"\\\1", title)


def headline_markdown(headline: dict) -> str:
    """One headline as a Markdown table, published beside measured, and its verdicts."""
    figures = headline.get("figures", [])
    notes = any(f.get("note") for f in figures)
    lines = [f"**{md_text(headline.get('title', ''))}** (profile: {md_text(headline.get('profile', '?'))})", "",
             "| figure | published | measured | unit |" + (" note |" if notes else ""),
             "| :-- | --: | --: | :-- |" + (" :-- |" if notes else "")]
    for f in figures:
        cells = [f.get("name", ""), fmt_figure(f.get("published")), f"**{md_text(fmt_figure(f.get('measured')))}**",
                 f.get("unit", "")] + ([f.get("note", "")] if notes else [])
        lines.append("| " + " | ".join(c if i == 2 else md_text(c) for i, c in enumerate(cells)) + " |")
    verdicts = headline.get("verdicts", [])
    if verdicts:
        lines += [""] + [f"- {md_text(v)}" for v in verdicts]
    return "\n".join(lines)


def landing_page(found: list[Entry], intro: str, audience: str = "instructors") -> str:
    """The landing page (MyST Markdown): the course in a paragraph, the lessons in order, each
    with its summary and headline figures, then what is for instructors."""
    lines = ["# ftcourse: adapting pretrained encoders", "", intro.strip(), "",
             "## The lessons", "",
             "Each lesson ends with its headline: the figures it measured when it was executed for "
             "this site, beside the figures the paper published (— where the paper has none).", ""]
    number = 0
    for entry in found:
        if entry.page.instructors:
            continue
        number += 1
        link = f"[{link_text(entry.title)}]({entry.page.path}.ipynb)"
        lines += [f"### {number}. {link}", "", md_text(entry.page.summary), ""]
        if entry.status.startswith("FAILED"):
            lines += [":::{warning}", f"This notebook failed to execute in this build: {md_text(entry.status)}", ":::", ""]
        if entry.page.headlines_from and entry.headlines:
            lines += [f"Measured by {{doc}}`the solution <{entry.page.headlines_from}>`:", ""]
        if not entry.headlines:
            lines += [f"*Headline: {NO_HEADLINE}.*", ""]
        for headline in entry.headlines:
            lines += [headline_markdown(headline), ""]
    if audience == "students":
        return "\n".join(lines) + "\n"
    lines += ["## For instructors", ""]
    for entry in found:
        if entry.page.instructors:
            lines.append(f"- [{link_text(entry.page.nav_title or entry.title)}]({entry.page.path}.ipynb): "
                         f"{md_text(entry.page.summary)}")
    lines.append(f"- {{doc}}`{INSTRUCTORS_PAGE}`: grading submissions with `ftcourse grade`, and what the "
                 "hidden checks cover.")
    return "\n".join(lines) + "\n"


def table_of_contents(found: list[Entry], audience: str = "instructors") -> str:
    """Jupyter Book's _toc.yml: the landing page, then one part per ``Page.part``, in order."""
    parts: dict[str, list[str]] = {}
    for entry in found:
        item = f"  - file: {entry.page.path}"
        if entry.page.nav_title:
            item += f"\n    title: {json.dumps(entry.page.nav_title)}"
        parts.setdefault(entry.page.part, []).append(item)
    if audience == "instructors":
        parts.setdefault("For instructors", []).append(f"  - file: {INSTRUCTORS_PAGE}")
    lines = ["format: jb-book", "root: index", "parts:"]
    for caption, items in parts.items():
        lines += [f"- caption: {json.dumps(caption)}", "  chapters:"] + items
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the build


#: A reference the browser would fetch from another machine: a src, a stylesheet, a preload.
_REMOTE = re.compile(
    r"""<(?:script|img|iframe|source|video|audio|embed)\b[^>]*?\ssrc=["']?((?:https?:)?//[^"'\s>]+)"""
    r"""|<link\b(?=[^>]*\srel=["']?(?:stylesheet|preload|modulepreload|icon|shortcut icon|prefetch|dns-prefetch|preconnect))"""
    r"""[^>]*?\shref=["']?((?:https?:)?//[^"'\s>]+)"""
    r"""|url\(\s*["']?((?:https?:)?//[^"')\s]+)|@import\s+["']((?:https?:)?//[^"']+)""",
    re.IGNORECASE)


def remote_references(site: Path) -> list[str]:
    """What a page of ``site`` would fetch from another machine, as ``file: URL`` lines: the
    src of scripts, images and frames, stylesheets and preloads, CSS url() and @import."""
    found = []
    for path in sorted(Path(site).rglob("*")):
        if path.suffix not in (".html", ".css") or not path.is_file():
            continue
        for match in _REMOTE.finditer(path.read_text(encoding="utf-8", errors="replace")):
            url = next(g for g in match.groups() if g)
            found.append(f"{path.relative_to(site)}: {url}")
    return found


def _copy_notebook(source: Path, target: Path, banner: str) -> None:
    nb = nbformat.read(source, as_version=4)
    if banner:
        first = nb.cells[0] if nb.cells else None
        if first is not None and first.cell_type == "markdown" and first.source.startswith("# "):
            # Right under the title, which stays the page's (and the sidebar's) heading.
            title, _, rest = first.source.partition("\n")
            first.source = f"{title}\n\n{banner}\n\n{rest.lstrip()}"
        else:
            nb.cells.insert(0, nbformat.v4.new_markdown_cell(banner))
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)


def build_sites(executed: Path, out: Path, status: dict[str, str] | None = None, quiet: bool = True) -> dict[str, Path]:
    """Both sites: the students' (``out/site``) and the instructors' (``out/site-instructors``);
    audience -> index.html."""
    return {audience: build_site(executed, out, status, quiet, audience) for audience in AUDIENCES}


def build_site(executed: Path, out: Path, status: dict[str, str] | None = None, quiet: bool = True,
               audience: str = "students") -> Path:
    """Build the course site for ``audience`` from the executed notebooks under ``executed``
    into ``out/site`` (students) or ``out/site-instructors``; returns the site's index.html.
    ``status`` maps a page's path to how its execution went (a "FAILED: ..." status is shown
    on the landing page)."""
    _check_audience(audience)
    executed, out = Path(executed).resolve(), Path(out).resolve()
    found = entries(executed, status, audience)
    source = out / f"{AUDIENCES[audience]}-src"  # the book's sources: regenerated whole each time
    site = out / AUDIENCES[audience]
    shutil.rmtree(source, ignore_errors=True)
    ignored = ["_build", "__pycache__", "*.pyc"] + ([f"{INSTRUCTORS_PAGE}.md"] if audience == "students" else [])
    shutil.copytree(BOOK_SOURCES, source, ignore=shutil.ignore_patterns(*ignored))
    for entry in found:
        _copy_notebook(executed / f"{entry.page.path}.ipynb", source / f"{entry.page.path}.ipynb", entry.page.banner)
    intro = (source / "intro.md").read_text(encoding="utf-8")
    (source / "intro.md").unlink()  # its text is the landing page's first paragraph, not a page
    (source / "index.md").write_text(landing_page(found, intro, audience), encoding="utf-8")
    (source / "_toc.yml").write_text(table_of_contents(found, audience), encoding="utf-8")

    log = out / f"{AUDIENCES[audience]}-build.log"
    command = [sys.executable, "-c", "import sys; from jupyter_book.cli.main import main; sys.exit(main())",
               "build", str(source), "--path-output", str(source), "--builder", "html"]
    # Offline by construction: nothing is executed, and no extension is told to fetch anything.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    start = time.perf_counter()
    done = subprocess.run(command, cwd=source, env=env, capture_output=True, text=True)
    log.write_text(done.stdout + done.stderr, encoding="utf-8")
    built = source / "_build" / "html"
    if done.returncode != 0 or not (built / "index.html").is_file():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise SiteError(f"Jupyter Book could not build the site (exit {done.returncode}); the whole log is "
                        f"{log}. Its end:\n{tail}")
    shutil.rmtree(site, ignore_errors=True)
    os.replace(built, site)
    remote = remote_references(site)
    if remote:
        raise SiteError("The site would fetch from other machines when viewed, and it must work offline:\n  "
                        + "\n  ".join(remote[:20]) + "\nFix: serve these files from the site (book/_static) "
                        "or switch off what adds them in book/_config.yml.")
    warnings = [line for line in (done.stdout + done.stderr).splitlines() if "WARNING" in line]
    if not quiet:
        print(f"{audience}' site built in {time.perf_counter() - start:.0f} s with {len(warnings)} warning(s) (log: {log})")
    return site / "index.html"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ftcourse.course.site", description=__doc__.splitlines()[0])
    parser.add_argument("--executed", type=Path, default=REPO_ROOT / "build",
                        help="folder with the executed notebooks/ and solutions/ (default build/)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "build", help="the site goes to OUT/site")
    args = parser.parse_args(argv)
    try:
        indexes = build_sites(args.executed, args.out, quiet=False)
    except SiteError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for audience, index in indexes.items():
        print(f"The {audience}' site: {index} (to serve it: python -m http.server -d {index.parent})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
