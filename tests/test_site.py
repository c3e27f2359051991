"""The course site: the landing page from the notebooks' headlines, the offline build, and every
page checked in headless Chromium (Debian's chromium, driven by Playwright)."""

import functools
import http.server
import os
import re
import shutil
import threading
import time
import urllib.parse
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

from ftcourse import report

from ftcourse.course import site
from ftcourse.config import REPO_ROOT
from ftcourse.course.notebooks import course_notebooks

CHROMIUM = Path(os.environ.get("FTCOURSE_CHROMIUM", "/usr/bin/chromium"))
# What works here as root with no display and no network (Playwright gives each launch a fresh
# profile folder, the --user-data-dir).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = REPO_ROOT / "build" / "site-screenshots"


def _notebook(title: str, headline=None) -> nbformat.NotebookNode:
    """A small executed notebook, as saved: a title, and a closing headline cell if given."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {title}\n\nText."), nbformat.v4.new_code_cell("1 + 1")]
    nb.cells[1].outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "2"}, execution_count=1)]
    if headline is not None:
        cell = nbformat.v4.new_code_cell("report.headline(...)")
        cell.outputs = [nbformat.v4.new_output("execute_result", data=headline._repr_mimebundle_(), execution_count=2)]
        nb.cells.append(cell)
    return nbformat.reads(nbformat.writes(nb), as_version=4)


def _synthetic_course(root: Path) -> None:
    """Lesson 1 records a headline, lesson 2 does not."""
    (root / "notebooks").mkdir(parents=True)
    headline = report.headline("01", "Lesson 1: frozen vs fine-tuned", "offline",
                               [("fine-tuned accuracy | dev", 0.8125, 0.93, "accuracy"), ("trainable\nparameters", 4_386_306)],
                               verdicts=["fine-tuning beats frozen: yes"])
    nbformat.write(_notebook("Lesson 1 — The composition", headline), root / "notebooks" / "01_composition.ipynb")
    nbformat.write(_notebook("Lesson 2: the [CLS] layer, `code` and $x$"), root / "notebooks" / "02_feature_readout.ipynb")


def _section(text: str, heading: str) -> str:
    """The landing page's part under the ### heading that contains ``heading``."""
    start = text.rindex("\n### ", 0, text.index(heading)) + 1
    end = text.find("\n### ", start)
    return text[start:end if end > 0 else len(text)]


def test_landing_page_shows_each_headline_published_beside_measured_or_says_none_was_recorded(tmp_path):
    _synthetic_course(tmp_path)
    text = site.landing_page(site.entries(tmp_path), "What the course teaches.")
    assert text.startswith("# ") and "What the course teaches." in text
    first, second = _section(text, "01_composition"), _section(text, "02_feature_readout")
    assert "### 1. [Lesson 1 — The composition](notebooks/01_composition.ipynb)" in first
    # published beside measured, in one row, in the lessons' own number format
    assert re.search(r"\| fine-tuned accuracy \\\| dev \| 0\.93 \| \*\*0\.812\*\* \| accuracy \|", first), first
    assert "| trainable parameters | — | **4,386,306** |" in first
    assert "- fine-tuning beats frozen: yes" in first and site.NO_HEADLINE not in first
    assert site.NO_HEADLINE in second and "|" not in second.split("\n", 1)[1]
    # a title is the notebook's Markdown (code, math), its brackets escaped inside the link
    assert r"### 2. [Lesson 2: the \[CLS\] layer, `code` and $x$](notebooks/02_feature_readout.ipynb)" in second
    assert text.index("01_composition") < text.index("02_feature_readout")


def _exercise_course(root: Path) -> None:
    """The student exercise, and its solution with a headline."""
    (root / "notebooks").mkdir()
    (root / "solutions").mkdir()
    solved = report.headline("05", "Exercise: three regimes", "offline", [("LoRA accuracy", 0.531)])
    nbformat.write(_notebook("Exercise"), root / "notebooks" / "05_exercise_bert_base.ipynb")
    nbformat.write(_notebook("Exercise", solved), root / "solutions" / "05_exercise_bert_base.ipynb")


def test_the_exercise_shows_its_solutions_headline_and_the_solution_is_for_instructors(tmp_path):
    _exercise_course(tmp_path)
    found = site.entries(tmp_path)
    text = site.landing_page(found, "")
    lessons, instructors = text.split("## For instructors")
    assert "**0.531**" in _section(lessons, "05_exercise_bert_base") and "solutions/05_exercise" in lessons
    assert "(solutions/05_exercise_bert_base.ipynb)" in instructors and site.INSTRUCTORS_PAGE in instructors
    toc = site.table_of_contents(found)
    assert '"Solution of the exercise (instructors)"' in toc and "file: instructors" in toc


def test_the_students_landing_page_has_no_solution_nor_its_figures(tmp_path):
    _exercise_course(tmp_path)
    found = site.entries(tmp_path, audience="students")
    assert [e.page.path for e in found] == ["notebooks/05_exercise_bert_base"]
    text = site.landing_page(found, "", audience="students")
    assert "solutions/" not in text and "0.531" not in text and "For instructors" not in text
    toc = site.table_of_contents(found, audience="students")
    assert "solutions/" not in toc and "instructors" not in toc
    with pytest.raises(site.SiteError, match="Unknown audience 'teachers'"):
        site.entries(tmp_path, audience="teachers")


def test_every_course_notebook_has_a_page_with_a_summary():
    paths = {f"{p.parent.name}/{p.stem}" for p in course_notebooks()}
    missing = paths - {page.path for page in site.PAGES}
    assert not missing, f"add these notebooks to ftcourse.course.site.PAGES (with a one-line summary): {sorted(missing)}"


def test_remote_references_are_found_and_local_ones_are_not(tmp_path):
    (tmp_path / "a.html").write_text(
        '<script src="_static/x.js"></script><script src="https://cdn.example/mathjax.js"></script>'
        '<link rel="stylesheet" href="//fonts.example/f.css"><a href="https://arxiv.org/abs/1810.04805">paper</a>'
        '<img src="data:image/png;base64,AAAA"><link rel="next" href="b.html">')
    (tmp_path / "s.css").write_text("@font-face { src: url(https://fonts.example/a.woff2) } .x { background: url(local.png) }")
    assert site.remote_references(tmp_path) == [
        "a.html: https://cdn.example/mathjax.js", "a.html: //fonts.example/f.css", "s.css: https://fonts.example/a.woff2"]


def test_a_folder_without_notebooks_says_how_to_make_them(tmp_path):
    with pytest.raises(site.SiteError, match="ftcourse.course.notebooks build"):
        site.build_site(tmp_path, tmp_path / "out")


def test_the_course_build_executes_then_builds_the_site_and_shows_a_failed_notebook(tmp_path, monkeypatch, capsys):
    from ftcourse.course import notebooks

    def execute(path, **kwargs):  # the committed outputs stand in for a run: no kernel in this test
        if path.stem == "03_costs_and_lora":
            raise RuntimeError("CellExecutionError: boom")
        return nbformat.read(path, as_version=4)

    monkeypatch.setattr(notebooks, "execute", execute)
    assert notebooks.build(tmp_path) == 1
    landing = (tmp_path / "site-src" / "index.md").read_text(encoding="utf-8")
    assert "failed to execute in this build: FAILED: RuntimeError: CellExecutionError: boom" in landing
    assert (tmp_path / "site" / "notebooks" / "03_costs_and_lora.html").is_file()
    assert "site/index.html" in (tmp_path / "index.html").read_text(encoding="utf-8")
    printed = capsys.readouterr().out
    assert "students' site built in" in printed and "instructors' site built in" in printed
    assert (tmp_path / "site-instructors" / "solutions" / "05_exercise_bert_base.html").is_file()
    assert not (tmp_path / "site" / "solutions").exists()


# ----------------------------------------------------------------------------- the built site


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    """The instructors' site (every page) built from the committed notebooks (executed when
    committed; never run again)."""
    start = time.perf_counter()
    index = site.build_site(REPO_ROOT, tmp_path_factory.mktemp("course-site"), audience="instructors")
    print(f"site built in {time.perf_counter() - start:.0f} s")
    return index.parent


def test_the_site_has_every_page_and_fetches_nothing_from_other_machines(built_site):
    for page in site.PAGES:
        assert (built_site / f"{page.path}.html").is_file(), page.path
    assert (built_site / f"{site.INSTRUCTORS_PAGE}.html").is_file()
    assert site.remote_references(built_site) == []
    assert list((built_site / "_static" / "mathjax").glob("tex-chtml.js")), "MathJax is not served by the site"
    solution = (built_site / "solutions" / "05_exercise_bert_base.html").read_text(encoding="utf-8")
    assert "The instructor’s solution" in solution or "The instructor's solution" in solution


def _unavailable(why: str):
    """Without Chromium the browser check cannot run: a skip on a laptop, a failure in CI."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} CI must run the browser check (CI=true).")
    pytest.skip(why)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextmanager
def _serve(folder: Path):
    """The site over HTTP on 127.0.0.1 and a free port: ``python -m http.server``'s server, in a thread."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_QuietHandler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


#: Every <img> decoded (lazy ones too), then the ones that did not load.
BROKEN_IMAGES = """async () => {
  const images = [...document.images];
  images.forEach(i => { i.loading = 'eager'; });
  await Promise.all(images.map(i => i.decode().catch(() => null)));
  return images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src'));
}"""


@contextmanager
def _browser(folder: Path):
    """Chromium on the site in ``folder``, served on 127.0.0.1: yields (context, origin, left),
    where ``left`` collects every request for another machine (each is aborted, never sent)."""
    with _serve(folder) as origin, local_browser(origin) as (context, left):
        yield context, origin, left


def require_browser() -> None:
    """Chromium and Playwright, or a skip on a laptop and a failure in CI (``_unavailable``)."""
    if not CHROMIUM.exists():
        _unavailable(f"Chromium is not installed ({CHROMIUM} is missing). Fix: `make system-packages` "
                     "(apt-get install chromium), or set FTCOURSE_CHROMIUM to a Chromium binary.")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("The playwright package is missing. Fix: `make install`.")


@contextmanager
def local_browser(origin: str, viewport=(1280, 900)):
    """Headless Chromium that may load only from ``origin`` (and data: and blob: URLs): yields
    (context, left), ``left`` collecting every request for another machine, each aborted."""
    require_browser()
    from playwright.sync_api import Error as PlaywrightError, sync_playwright

    host = urllib.parse.urlsplit(origin).netloc
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        except PlaywrightError as error:
            _unavailable(f"Chromium ({CHROMIUM}) does not start: {str(error).splitlines()[0]}")
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        left = []

        def only_this_machine(route):
            url = urllib.parse.urlsplit(route.request.url)
            if url.scheme in ("data", "blob") or url.netloc == host:
                route.continue_()
            else:
                left.append(route.request.url)
                route.abort()

        context.route("**/*", only_this_machine)
        try:
            yield context, left
        finally:
            browser.close()


def _check_pages(context, origin: str, pages: list[str], screenshots: Path | None = None, book_checks=None) -> list[str]:
    """Load each page; the problems found, as lines: console errors and uncaught exceptions,
    HTTP errors of the page's own requests, formulas MathJax did not typeset, images that did
    not load, internal links that do not answer 200 and anchors that do not exist.
    ``book_checks(name, page)`` adds the problems of one page that only the course's site has."""
    host = urllib.parse.urlsplit(origin).netloc
    problems, links, anchors, fragments = [], set(), {}, set()
    for name in pages:
        page = context.new_page()
        errors = []
        page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"script error: {e}"))
        page.on("response", lambda r: errors.append(f"{r.status} for {r.url}") if r.status >= 400 else None)
        response = page.goto(f"{origin}/{name}", wait_until="networkidle")
        if response is None or response.status != 200:
            errors.append(f"the page answers {response.status if response else 'nothing'}")
        if page.locator(".math").count():  # MathJax typesets every formula of the page
            try:
                page.wait_for_function("document.querySelectorAll('.math').length === "
                                       "document.querySelectorAll('.math mjx-container').length", timeout=20_000)
            except Exception:
                errors.append("MathJax did not typeset every formula within 20 s")
        for src in page.evaluate(BROKEN_IMAGES):
            errors.append(f"image did not load: {src}")
        errors += [f"runs off its column: {what}" for what in page.evaluate(OVERFLOWING)]
        for href in page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)"):
            url = urllib.parse.urlsplit(href)
            if url.netloc == host:
                links.add(url._replace(fragment="").geturl())
                if url.fragment:
                    fragments.add((url.path, urllib.parse.unquote(url.fragment), name))
        anchors[urllib.parse.urlsplit(page.url).path] = set(page.eval_on_selector_all(
            "[id], a[name]", "es => es.map(e => e.id || e.getAttribute('name'))"))
        if book_checks:
            errors += book_checks(name, page)
        if screenshots:
            page.screenshot(path=screenshots / (name.replace("/", "__").replace(".html", ".png")), full_page=True)
        problems += [f"{name}: {e}" for e in errors]
        page.close()
    for url in sorted(links):
        status = context.request.get(url).status
        if status != 200:
            problems.append(f"internal link {url} answers {status}")
    for path, fragment, source in sorted(fragments):
        if path in anchors and fragment not in anchors[path]:
            problems.append(f"{source}: the link to {path}#{fragment} has no such anchor")
    return problems


def _book_checks(name: str, page) -> list[str]:
    """A lesson page has the book's furniture (the sidebar lists every lesson, previous/next
    links, the page's contents) and its notebook's HTML tables as tables; the landing page
    shows the headlines."""
    if name == "index.html":
        return _landing_problems(page, REPO_ROOT)
    if not name.startswith(("notebooks/", "solutions/")):
        return []
    errors = []
    sidebar = page.eval_on_selector_all("nav.bd-docs-nav a", "as => as.map(a => a.href)")
    for lesson in site.PAGES:
        if f"{lesson.path}.html" != name and not any(href.endswith(f"/{lesson.path}.html") for href in sidebar):
            errors.append(f"the sidebar does not link {lesson.path}")
    if not page.locator(".prev-next-area a").count():
        errors.append("no previous/next links")
    if not page.locator(".bd-toc nav.page-toc a").count():
        errors.append("no table of contents for the page")
    nb = nbformat.read(REPO_ROOT / name.replace(".html", ".ipynb"), as_version=4)
    html_tables = sum("<table" in str(o.get("data", {}).get("text/html", ""))
                      for c in nb.cells for o in c.get("outputs", []))
    if page.locator(".output table, .cell_output table").count() < html_tables:
        errors.append(f"{html_tables} HTML table output(s) in the notebook, fewer rendered as tables")
    return errors


#: Code, outputs and text wider than the page's column that neither wrap nor scroll: what a
#: reader cannot see. An element may be wider than its box only inside a scrolling container.
OVERFLOWING = """() => {
  const article = document.querySelector('article.bd-article') || document.body;
  const right = article.getBoundingClientRect().right + 1;
  const scrolls = e => { for (; e && e !== article; e = e.parentElement) {
      const x = getComputedStyle(e).overflowX; if (x === 'auto' || x === 'scroll') return true; } return false; };
  const found = [];
  for (const e of article.querySelectorAll('pre, code, p, li, td, th, .cell_output *, .highlight')) {
    const box = e.getBoundingClientRect();
    const spills = box.right > right || (e.clientWidth && e.scrollWidth > e.clientWidth + 1
                                          && getComputedStyle(e).overflowX === 'visible');
    if (box.width && spills && !scrolls(e))
      found.push(e.tagName.toLowerCase() + ': ' + (e.innerText || '').trim().slice(0, 60));
    if (found.length >= 5) break;
  }
  return found;
}"""


def test_every_page_loads_in_headless_chromium(built_site):
    pages = sorted(p.relative_to(built_site).as_posix() for p in built_site.rglob("*.html")
                   if not p.relative_to(built_site).parts[0].startswith("_"))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for stale in SCREENSHOTS.glob("*.png"):  # no stale page left from an earlier site (other tests' shots stay)
        if not stale.name.startswith(("launch-", "lab-")):
            stale.unlink()
    with _browser(built_site) as (context, origin, left):
        problems = _check_pages(context, origin, pages, SCREENSHOTS, _book_checks)
    assert not left, f"pages asked for things from other machines: {sorted(set(left))}"
    assert not problems, "\n".join(problems)


def test_the_browser_check_finds_what_is_broken(tmp_path):
    """The checks themselves, on a page with one of each fault."""
    (tmp_path / "ok.png").write_bytes(bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c63f8ffff3f0005fe02fea7d6a4e30000000049454e44ae426082"))
    (tmp_path / "index.html").write_text(
        "<!doctype html><title>t</title><img src='ok.png'><img src='missing.png'>"
        "<img src='https://example.invalid/x.png'><a href='nowhere.html'>x</a><a href='index.html#nope'>y</a>"
        "<a href='#here' id='here'>z</a><script>console.error('boom')</script>"
        "<article class='bd-article' style='width: 300px'><pre style='overflow: visible'>" + "x" * 200 + "</pre>"
        "<div style='overflow-x: auto'><pre>" + "y" * 200 + "</pre></div></article>")
    with _browser(tmp_path) as (context, origin, left):
        problems = _check_pages(context, origin, ["index.html"])
    assert left == ["https://example.invalid/x.png"]
    text = "\n".join(problems)
    for fault in ("console: boom", "404 for", "image did not load: missing.png", "nowhere.html answers 404",
                  "#nope has no such anchor", "runs off its column: pre: xxx"):
        assert fault in text, text
    assert "ok.png" not in text and "#here" not in text and "yyy" not in text  # that one scrolls


def test_the_landing_page_shows_recorded_headlines_in_the_browser(tmp_path):
    """Lesson 1 with a closing headline cell (on a copy; the notebooks are the lead's): its
    figures appear in lesson 1's section, the other lessons say none was recorded."""
    for folder in ("notebooks", "solutions"):
        shutil.copytree(REPO_ROOT / folder, tmp_path / "course" / folder)
    lesson = tmp_path / "course" / "notebooks" / "01_composition.ipynb"
    nb = nbformat.read(lesson, as_version=4)
    headline = report.headline("01", "Lesson 1: the transfer recipe", "offline",
                               [("fine-tuned dev accuracy", 0.8125, 0.935, "accuracy"), ("trainable parameters", 4_386_306)])
    cell = nbformat.v4.new_code_cell("headline")
    cell.pop("id")  # the course's notebooks are nbformat 4.4: no cell ids
    cell.outputs = [nbformat.v4.new_output("execute_result", data=headline._repr_mimebundle_(), execution_count=1)]
    nb.cells.append(cell)
    nbformat.write(nb, lesson)
    index = site.build_site(tmp_path / "course", tmp_path / "out", audience="instructors")
    with _browser(index.parent) as (context, origin, left):
        page = context.new_page()
        page.goto(f"{origin}/index.html", wait_until="networkidle")
        assert _landing_problems(page, tmp_path / "course") == []
        section = page.locator("article section:has(> h3 a[href='notebooks/01_composition.html'])")
        row = section.locator("tr", has_text="fine-tuned dev accuracy").inner_text().split("\t")
        assert [c.strip() for c in row] == ["fine-tuned dev accuracy", "0.935", "0.812", "accuracy"]
        assert site.NO_HEADLINE not in section.inner_text()
        page.screenshot(path=tmp_path / "landing.png", full_page=True)
    assert not left


def _landing_problems(page, root: Path) -> list[str]:
    """The landing page links every page and shows, in each lesson's section, that lesson's
    headline figures (read from the notebooks under ``root``) or says that none was recorded."""
    found = []
    hrefs = page.eval_on_selector_all("article a[href]", "as => as.map(a => a.getAttribute('href'))")
    for target in [f"{p.path}.html" for p in site.PAGES] + [f"{site.INSTRUCTORS_PAGE}.html"]:
        if target not in hrefs:
            found.append(f"no link to {target}")
    for entry in site.entries(root):
        if entry.page.instructors:
            continue
        text = page.evaluate("""href => {
            const link = [...document.querySelectorAll('article h3 a')].find(a => a.getAttribute('href') === href);
            return link ? link.closest('section').innerText : null; }""", f"{entry.page.path}.html")
        if text is None:
            found.append(f"no section headed by a link to {entry.page.path}.html")
            continue
        if not entry.headlines and site.NO_HEADLINE not in text:
            found.append(f"{entry.page.path}: neither its headline nor '{site.NO_HEADLINE}'")
        for headline in entry.headlines:
            for figure in headline["figures"]:
                for value in (figure["name"], report.format_figure(figure["measured"]), report.format_figure(figure["published"])):
                    if value not in text:
                        found.append(f"{entry.page.path}: the headline figure {value!r} is not shown")
    return found


def _course_repository() -> str:
    import tomllib

    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


def test_the_course_address_is_set_in_one_place():
    import yaml

    book = yaml.safe_load((REPO_ROOT / "book" / "_config.yml").read_text())
    assert book["repository"]["url"] == _course_repository()
    assert book["launch_buttons"]["colab_url"] == "https://colab.research.google.com"


def test_a_lesson_page_opens_its_notebook_in_colab(built_site):
    """The rocket button of a lesson's page offers Colab, on this lesson's notebook in the
    course's repository; a screenshot shows the open menu."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    github = _course_repository().removeprefix("https://github.com/")
    with _browser(built_site) as (context, origin, left):
        page = context.new_page()
        page.goto(f"{origin}/notebooks/03_costs_and_lora.html", wait_until="networkidle")
        page.click("button[aria-label='Launch interactive content']")
        link = page.locator(".dropdown-launch-buttons a", has_text="Colab")
        link.wait_for(state="visible")
        assert link.get_attribute("href") == (
            f"https://colab.research.google.com/github/{github}/blob/main/notebooks/03_costs_and_lora.ipynb")
        page.screenshot(path=SCREENSHOTS / "launch-button-colab.png")
    assert not left  # a link, not a fetch: the page still loads nothing from other machines


def test_no_solution_page_is_reachable_from_the_students_site(tmp_path):
    """The students' site, built from the committed notebooks: every page loads, and no page,
    link or file of it leads to the solution or the instructors' notes."""
    index = site.build_site(REPO_ROOT, tmp_path, audience="students")
    built = index.parent
    pages = sorted(p.relative_to(built).as_posix() for p in built.rglob("*.html")
                   if not p.relative_to(built).parts[0].startswith("_"))
    assert "notebooks/05_exercise_bert_base.html" in pages and "index.html" in pages
    assert not any(p.startswith("solutions/") or p == f"{site.INSTRUCTORS_PAGE}.html" for p in pages)
    assert not list(built.rglob("*solutions*")) and not list(built.rglob(f"{site.INSTRUCTORS_PAGE}*"))
    for page in built.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "solutions/" not in text and f"{site.INSTRUCTORS_PAGE}.html" not in text, page
    with _browser(built) as (context, origin, left):
        problems = _check_pages(context, origin, pages)
        page = context.new_page()
        page.goto(f"{origin}/index.html", wait_until="networkidle")
        hrefs = page.eval_on_selector_all("a[href]", "as => as.map(a => a.getAttribute('href'))")
        page.screenshot(path=tmp_path / "students-landing.png", full_page=True)
    assert not any("solution" in h or "instructors" in h for h in hrefs), hrefs
    assert not left and not problems, "\n".join(problems)


def test_every_notebook_installs_the_course_from_its_address_in_a_fresh_runtime():
    """The first code cell works in a checkout (the package is there) and in a fresh Colab
    runtime (it installs the course from the repository set in pyproject.toml)."""
    for path in course_notebooks():
        first = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        assert 'importlib.util.find_spec("ftcourse") is None' in first.source, path.name
        assert f'"ftcourse @ git+{_course_repository()}"' in first.source, path.name
        assert "ftcourse.setup()" in first.source, path.name
