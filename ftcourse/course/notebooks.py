"""Execute, clean and publish the course notebooks.

``python -m ftcourse.course.notebooks execute NOTEBOOK...`` runs notebooks in place in a fresh
kernel and saves them clean (what authors commit). ``python -m ftcourse.course.notebooks build``
executes every notebook into ``build/`` and builds the course site from those executed copies
into ``build/site/`` (``ftcourse.course.site``; what ``make course`` runs); the sources are never
modified by a build.

A clean notebook has no metadata beyond the kernel and language, no widget state, cell
metadata limited to tags, and execution counts 1..n (or none at all, if never run).
"""

from __future__ import annotations

import argparse
import html
import os
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import nbformat

from ..config import REPO_ROOT
from . import freshness
from .catalog import NOTEBOOK_FOLDERS, course_notebooks
from .freshness import STAMP_KEY
from .site import AUDIENCES, SiteError, build_sites

KEPT_NOTEBOOK_METADATA = ("kernelspec", "language_info", STAMP_KEY)  # the stamp: what it was executed from
KEPT_CELL_METADATA = ("tags",)
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
# Notebooks expected to stop with an error: the student exercise stubs raise NotImplementedError.
EXPECTED_TO_RAISE = re.compile(r"exercise")
# Absolute paths of this machine must not leak into committed outputs.
MACHINE_PATH = re.compile(r"(/work/|/home/|/root/|/tmp/|/Users/|[A-Z]:\\\\)")
# Notebooks a CPU build runs at once. The course's encoders are small: one kernel on 2 threads
# trains only 1.2x (the 4 x 128 siamese encoder) to 1.55x (MiniLM) faster than on 1 thread, so two
# 1-thread kernels side by side get through more work (bench/README.md). Each kernel peaks near
# 2.3 GB, so two stay inside the course's 6 GB.
MAX_PARALLEL_NOTEBOOKS = 2


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Strip everything but content: stray metadata, widget state, timing records."""
    language = nb.metadata.get("language_info", {})
    stamp = nb.metadata.get(STAMP_KEY)
    nb.metadata = nbformat.NotebookNode(
        kernelspec=KERNELSPEC,
        language_info={"name": language.get("name", "python")},
    )
    if stamp:
        nb.metadata[STAMP_KEY] = stamp
    for cell in nb.cells:
        cell.metadata = nbformat.NotebookNode(
            {k: v for k, v in cell.metadata.items() if k in KEPT_CELL_METADATA and v}
        )
        cell.pop("id", None)
        if cell.cell_type == "code":
            # A widget (a tqdm bar, a slider) lives in kernel state that is not saved; its
            # text fallback is a frozen first frame ("0%"), which misleads, so both go.
            cell.outputs = [o for o in cell.outputs if "application/vnd.jupyter.widget-view+json" not in o.get("data", {})]
    # nbformat 4.4 has no cell ids: random ids would churn every diff.
    nb.nbformat, nb.nbformat_minor = 4, 4
    _renumber(nb)
    return nb


def _renumber(nb) -> None:
    """Execution counts 1..n in cell order (nbclient already does this on a fresh kernel)."""
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    if all(c.execution_count is None for c in code_cells):
        return
    for count, cell in enumerate(code_cells, start=1):
        cell.execution_count = count
        for output in cell.outputs:
            if "execution_count" in output:
                output.execution_count = count


def problems(nb: nbformat.NotebookNode) -> list[str]:
    """What makes a notebook unclean, as sentences; empty when it is clean."""
    found = []
    extra = set(nb.metadata) - set(KEPT_NOTEBOOK_METADATA)
    if extra:
        found.append(f"notebook metadata has stray keys {sorted(extra)}")
    counts = [c.execution_count for c in nb.cells if c.cell_type == "code"]
    if any(n is not None for n in counts) and counts != list(range(1, len(counts) + 1)):
        found.append(f"execution counts are {counts}, not 1..{len(counts)}")
    for index, cell in enumerate(nb.cells):
        extra = set(cell.metadata) - set(KEPT_CELL_METADATA)
        if extra:
            found.append(f"cell {index} has stray metadata {sorted(extra)}")
        for output in cell.get("outputs", []):
            text = _output_text(output)
            if "application/vnd.jupyter.widget-view+json" in output.get("data", {}):
                found.append(f"cell {index} keeps widget state")
            match = MACHINE_PATH.search(text)
            if match:
                start = max(0, match.start() - 30)
                found.append(f"cell {index} output shows a machine path: {text[start:match.end() + 30]!r}")
    return found


def _output_text(output) -> str:
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return "\n".join(output.traceback)
    data = output.get("data", {})
    return "\n".join(str(data[k]) for k in ("text/plain", "text/html", "text/markdown") if k in data)


def execute(path: Path, *, timeout: int = 1800, allow_errors: bool = False, cwd: Path | None = None,
            threads: int | None = None, on_cell=None):
    """Run a notebook top to bottom in a fresh kernel; returns the executed, cleaned copy.

    ``threads`` caps the kernel's compute threads (torch's and the BLAS's); ``None`` leaves
    the kernel to use every core. ``on_cell(index, seconds)`` is called after each code cell
    (the builder's progress). The kernel talks over local IPC sockets in a private folder,
    not TCP: nothing leaves the machine, and the kernel has no reason to warn about
    unencrypted traffic. A failing cell raises ``NotebookError`` naming it."""
    import tempfile

    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    # What the outputs will come from, digested before the kernel starts (ftcourse.course.freshness).
    executed_from = freshness.stamp(nb)
    started = {}

    def cell_started(cell, cell_index, **_):
        started[cell_index] = time.perf_counter()

    def cell_executed(cell, cell_index, **_):
        if on_cell is not None:
            on_cell(cell_index, time.perf_counter() - started.get(cell_index, time.perf_counter()))

    with tempfile.TemporaryDirectory(prefix="ftcourse-kernel-") as sockets:
        manager = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(sockets, "kernel"))
        client = NotebookClient(
            nb,
            km=manager,
            timeout=timeout,
            kernel_name="python3",
            allow_errors=allow_errors,
            resources={"metadata": {"path": str(cwd or path.parent)}},
            on_cell_execute=cell_started,
            on_cell_executed=cell_executed,
        )
        # cleanup_kc: shut the kernel down at the end although the client did not make its
        # manager (nbclient leaves a manager it was handed running: six idle kernels of a build
        # would stay in memory until the build ends).
        kernel = {"cleanup_kc": True}
        if threads is not None:
            kernel["env"] = {**os.environ, **{name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}}
        try:
            client.execute(**kernel)
        except CellExecutionError as error:
            raise NotebookError(path, nb, error) from error
        finally:
            if manager.has_kernel:
                manager.shutdown_kernel(now=True)
    nb.metadata[STAMP_KEY] = executed_from
    return clean(nb)


class NotebookError(RuntimeError):
    """A cell raised: which one (its index among all cells), the head of its source, the error."""

    def __init__(self, path: Path, nb, error):
        index = next((i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and any(
            o.get("output_type") == "error" for o in cell.get("outputs", []))), None)
        head = nb.cells[index].source.strip().splitlines()[:3] if index is not None else []
        self.cell_index, self.source_head = index, head
        self.error = f"{getattr(error, 'ename', type(error).__name__)}: {getattr(error, 'evalue', error)}"
        where = f"cell {index}" if index is not None else "a cell"
        super().__init__(f"{path.name}: {where} raised {self.error}\n" + "".join(f"    | {line}\n" for line in head))


def execute_in_place(paths: list[Path], timeout: int = 1800) -> None:
    """What authors run before committing a notebook: execute, clean, save."""
    for path in paths:
        start = time.perf_counter()
        nb = execute(path, timeout=timeout, allow_errors=bool(EXPECTED_TO_RAISE.search(path.name)) and path.parent.name == "notebooks")
        nbformat.write(nb, path)
        print(f"{path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path}: "
              f"executed in {time.perf_counter() - start:.0f} s")


def clean_in_place(paths: list[Path]) -> None:
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        nbformat.write(clean(nb), path)


def build_order(paths: list[Path], timings: dict | None = None) -> list[Path]:
    """``paths`` heaviest first by their measured seconds (``timings``, default the committed
    figures of a measured build, ``data/notebook_timings.json``), so that notebooks running side by
    side finish together; a notebook never measured goes last, in course order."""
    timings = read_timings() if timings is None else timings
    measured = {key: entry.get("seconds", 0.0) for key, entry in timings.items()}
    return sorted(paths, key=lambda p: (f"{p.parent.name}/{p.stem}" not in measured,
                                        -measured.get(f"{p.parent.name}/{p.stem}", 0.0)))


def default_jobs(count: int) -> int:
    """How many notebooks a build runs at once: one on a GPU (the kernels would share its
    memory), else up to ``MAX_PARALLEL_NOTEBOOKS``, never more than the cores or notebooks."""
    import torch

    if torch.cuda.is_available():
        return 1
    return max(1, min(MAX_PARALLEL_NOTEBOOKS, os.cpu_count() or 1, count))


#: Each build records what every cell took (``build/timings.json``); the next build's estimate
#: of the time left reads it. A first build reads the committed figures of a measured build.
TIMINGS_NAME = "timings.json"
MEASURED_TIMINGS = REPO_ROOT / "data" / "notebook_timings.json"


def read_timings(out: Path | None = None) -> dict:
    """``{"notebooks/01_composition": {"seconds": s, "cells": {index: s}}}`` from the last build
    into ``out``, else from the committed measured build, else empty."""
    import json

    for source in ([out / TIMINGS_NAME] if out is not None else []) + [MEASURED_TIMINGS]:
        try:
            return json.loads(source.read_text())
        except (OSError, ValueError):
            continue
    return {}


def _minutes(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


#: The last build's seconds that this build's finished cells must add up to before the estimate of
#: the time left is scaled by this build's pace (``BuildProgress.pace``).
PACE_AFTER_SECONDS = 30.0
PACE_LIMITS = (0.25, 4.0)


class BuildProgress:
    """One line per notebook while it runs: cells done of all code cells, time spent, and the
    time left estimated from that notebook's last measured cells. Live bars on a terminal; on
    a log (CI, a pipe) a plain line at most once a minute per notebook. The notebooks' own
    progress bars stay in the notebooks."""

    def __init__(self, paths: list[Path], previous: dict, live: bool | None = None, every: float = 60.0):
        self.previous, self.every = previous, every
        self.live = sys.stderr.isatty() if live is None else live
        self.code_cells = {self.key(p): [i for i, c in enumerate(nbformat.read(p, as_version=4).cells)
                                         if c.cell_type == "code"] for p in paths}
        self.measured: dict[str, dict] = {}
        self._bars, self._started, self._printed, self._done, self._last_cell = {}, {}, {}, {}, {}
        self._cell_done_at: dict[str, float] = {}  # when the notebook's last cell finished (or it started)
        self._lock = threading.Lock()

    @staticmethod
    def key(path: Path) -> str:
        return f"{path.parent.name}/{path.stem}"

    def pace(self, key: str) -> float:
        """How this build's speed compares with the last measured one's, for this notebook: the
        seconds its finished cells took now over what they took then (1.5 where they take half as
        long again). 1 until those cells took ``PACE_AFTER_SECONDS`` last time: a few quick cells
        say little about the long ones. Kept within ``PACE_LIMITS``: a run read from the run store
        makes one cell far quicker than the rest will be. Called under ``_lock``."""
        before = self.previous.get(key, {}).get("cells", {})
        now = {i: s for i, s in self.measured.get(key, {}).get("cells", {}).items() if i in before}
        then = sum(before[i] for i in now)
        if then < PACE_AFTER_SECONDS:
            return 1.0
        low, high = PACE_LIMITS
        return min(max(sum(now.values()) / then, low), high)

    def left(self, key: str, index: int, running_for: float = 0.0) -> float | None:
        """Seconds left after cell ``index`` finished, by the last measured build scaled by this
        build's ``pace``, counting down while the next cell has run ``running_for`` seconds (never
        below the cells after it)."""
        cells = self.previous.get(key, {}).get("cells")
        if not cells:
            return None
        ahead = sorted((int(i), seconds) for i, seconds in cells.items() if int(i) > index)
        if not ahead:
            return 0.0
        pace = self.pace(key)
        (_, running), rest = ahead[0], ahead[1:]
        return max(pace * running - running_for, 0.0) + pace * sum(seconds for _, seconds in rest)

    def left_now(self, key: str, index: int | None) -> float | None:
        """``left`` after cell ``index`` (``None``: none finished yet), the running cell counted down."""
        now = time.perf_counter()
        return self.left(key, -1 if index is None else index, now - self._cell_done_at.get(key, now))

    def line(self, key: str, index: int | None = None) -> str:
        done, total = self._done.get(key, 0), len(self.code_cells[key])
        spent = time.perf_counter() - self._started[key]
        left = self.left_now(key, index)
        return (f"{key:<34} {done:>3}/{total:<3} cells  {_minutes(spent)} spent, "
                + (f"about {_minutes(max(left, 0))} left" if left is not None else "time left unknown (first build)"))

    def start(self, path: Path) -> None:
        key = self.key(path)
        with self._lock:
            self._started[key] = self._printed[key] = self._cell_done_at[key] = time.perf_counter()
            self.measured[key] = {"seconds": 0.0, "cells": {}}
            if self.live:
                from tqdm.auto import tqdm

                estimate = self.previous.get(key, {}).get("seconds")
                self._bars[key] = tqdm(total=len(self.code_cells[key]), desc=key, unit="cell", leave=False,
                                       position=len(self._bars), dynamic_ncols=True,
                                       bar_format="{desc:<34} {bar:20} {n_fmt}/{total_fmt} cells  {elapsed} spent"
                                       + (f" of about {_minutes(estimate)}" if estimate else "") + "{postfix}")
            else:
                print(f"{key:<34} started" + (f" (last time {_minutes(self.previous[key]['seconds'])})"
                                              if key in self.previous else ""), flush=True)

    def cell(self, path: Path, index: int, seconds: float) -> None:
        key = self.key(path)
        with self._lock:
            self.measured[key]["cells"][str(index)] = round(seconds, 2)
            self._done[key] = self._done.get(key, 0) + 1
            self._cell_done_at[key] = time.perf_counter()
            if key in self._bars:
                self._bars[key].update(1)
            elif time.perf_counter() - self._printed[key] >= self.every:
                self._printed[key] = time.perf_counter()
                print(self.line(key, index), flush=True)
            self._last_cell[key] = index

    def tick(self) -> None:
        """The time left counts down even in the middle of a long cell: a live bar's estimate is
        refreshed; a log gets a line for each notebook that printed nothing for ``every`` seconds,
        so a build never goes quiet for minutes."""
        with self._lock:
            for key in list(self._started):
                if key not in self.measured or self.measured[key]["seconds"] != 0.0:
                    continue  # finished
                if key in self._bars:
                    left = self.left_now(key, self._last_cell.get(key))
                    if left is not None:
                        self._bars[key].set_postfix_str(f"about {_minutes(left)} left")
                elif time.perf_counter() - self._printed[key] >= self.every:
                    self._printed[key] = time.perf_counter()
                    print(self.line(key, self._last_cell.get(key)), flush=True)

    def finish(self, path: Path, outcome: str, seconds: float) -> None:
        key = self.key(path)
        with self._lock:
            self.measured[key]["seconds"] = round(seconds, 1)
            bar = self._bars.pop(key, None)
            if bar is not None:
                bar.close()
            print(f"{path.parent.name + '/' + path.name:<45} {seconds:6.0f} s  {outcome}", flush=True)

    def save(self, out: Path) -> None:
        import json

        merged = {**self.previous, **{k: v for k, v in self.measured.items() if v["cells"]}}
        (out / TIMINGS_NAME).write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")


def _execute_into(path: Path, out: Path, timeout: int, threads: int | None,
                  progress: BuildProgress | None = None) -> tuple[str, float]:
    """Execute ``path`` into ``out/<folder>/<name>``; returns what happened and the seconds."""
    target = out / path.parent.name / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    expected_errors = bool(EXPECTED_TO_RAISE.search(path.name)) and path.parent.name == "notebooks"
    if progress is not None:
        progress.start(path)
    start = time.perf_counter()
    outcome = "ok"
    on_cell = (lambda index, seconds: progress.cell(path, index, seconds)) if progress is not None else None
    try:
        nb = execute(path, timeout=timeout, allow_errors=expected_errors, cwd=path.parent, threads=threads,
                     on_cell=on_cell)
        if expected_errors:
            outcome = "ok (stops at the exercise stubs, as a student's copy should)"
    except NotebookError as error:  # report and go on: one broken lesson must not hide the rest
        nb = nbformat.read(path, as_version=4)  # the site shows the committed copy, marked failed
        outcome = f"FAILED at {error}".rstrip()
    except Exception as error:
        nb = nbformat.read(path, as_version=4)
        outcome = f"FAILED: {type(error).__name__}: {str(error).strip().splitlines()[-1] if str(error).strip() else ''}"
    nbformat.write(nb, target)
    seconds = time.perf_counter() - start
    if progress is not None:
        progress.finish(path, outcome, seconds)
    return outcome, seconds


def build(out: Path, timeout: int = 1800, site: bool = True, jobs: int | None = None) -> int:
    """Execute every course notebook into ``out`` (``out/notebooks``, ``out/solutions``), then
    build the course's two sites from those executed copies (``ftcourse.course.site``): the
    students' into ``out/site``, the instructors' (with the solution) into ``out/site-instructors``.

    ``jobs`` notebooks run at once (default: ``default_jobs``), heaviest first, each kernel
    on its share of the cores. Returns the number of notebooks that failed (a failed site
    build counts as one). The sources are not modified.
    """
    out.mkdir(parents=True, exist_ok=True)
    paths = course_notebooks()
    jobs = jobs or default_jobs(len(paths))
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}.")
    # One kernel alone keeps every core; side by side, each gets its share (no oversubscription).
    threads = None if jobs == 1 else max(1, (os.cpu_count() or 1) // jobs)
    print(f"executing {len(paths)} notebooks, {jobs} at a time"
          + (f", {threads} thread{'s' if threads > 1 else ''} each" if threads else ""), flush=True)
    status = {}
    start = time.perf_counter()
    progress = BuildProgress(paths, read_timings(out))
    finished = threading.Event()

    def ticker():
        while not finished.wait(5.0):
            progress.tick()

    threading.Thread(target=ticker, daemon=True).start()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        running = {pool.submit(_execute_into, path, out, timeout, threads, progress): path
                   for path in build_order(paths, progress.previous)}
        for done in as_completed(running):
            path = running[done]
            outcome, _ = done.result()
            status[f"{path.parent.name}/{path.stem}"] = outcome
    finished.set()
    progress.save(out)
    print(f"all notebooks: {time.perf_counter() - start:.0f} s", flush=True)
    failures = sum(outcome.startswith("FAILED") for outcome in status.values())
    status = {f"{p.parent.name}/{p.stem}": status[f"{p.parent.name}/{p.stem}"] for p in paths}  # course order
    if site:

        try:
            index = build_sites(out, out, status=status, quiet=False)["students"]
        except SiteError as error:
            print(f"error: the course site: {error}", file=sys.stderr)
            return failures + 1
        # Where earlier builds put their index: it now leads to the site.
        (out / "index.html").write_text(
            "<!doctype html><meta charset='utf-8'><meta http-equiv='refresh' content='0; url=site/index.html'>"
            f"<title>ftcourse</title><a href='{html.escape(index.relative_to(out).as_posix())}'>the course site</a>\n",
            encoding="utf-8")
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ftcourse.course.notebooks", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("execute", help="execute notebooks in place and save them clean")
    run.add_argument("paths", nargs="*", type=Path)
    run.add_argument("--timeout", type=int, default=1800)
    run.add_argument("--stale", action="store_true",
                     help="only the notebooks whose stamp no longer matches their inputs (see `stale`)")
    stale = sub.add_parser("stale", help="list the committed notebooks whose outputs may not come from the "
                           "current code, and why (ftcourse.course.freshness)")
    stale.add_argument("paths", nargs="*", type=Path)
    tidy = sub.add_parser("clean", help="clean notebooks in place without running them")
    tidy.add_argument("paths", nargs="*", type=Path)
    check = sub.add_parser("check", help="list what makes notebooks unclean")
    check.add_argument("paths", nargs="*", type=Path)
    sub.add_parser("order", help="print the course's notebooks heaviest first (what a parallel run starts first)")
    publish = sub.add_parser("build", help="execute every notebook into a folder, then build the course site")
    publish.add_argument("--out", type=Path, default=REPO_ROOT / "build")
    publish.add_argument("--timeout", type=int, default=1800)
    publish.add_argument("--no-site", action="store_true", help="execute only; no site")
    publish.add_argument("--jobs", type=int, default=None,
                         help=f"notebooks executed at once (default: {MAX_PARALLEL_NOTEBOOKS} on a CPU with as many cores, 1 on a GPU)")
    args = parser.parse_args(argv)

    paths = [p.resolve() for p in getattr(args, "paths", [])] or course_notebooks()
    if args.command == "execute":
        if args.stale:
            paths = [p for p in paths if freshness.stale_reasons(nbformat.read(p, as_version=4))]
            print(f"{len(paths)} stale notebook{'s' if len(paths) != 1 else ''}" + (":" if paths else ""), flush=True)
        execute_in_place(paths, timeout=args.timeout)
    elif args.command == "stale":
        stale = {p: freshness.stale_reasons(nbformat.read(p, as_version=4)) for p in paths}
        for path, reasons in stale.items():
            if reasons:
                print(f"{path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path}: " + "; ".join(reasons))
        return 1 if any(stale.values()) else 0
    elif args.command == "clean":
        clean_in_place(paths)
    elif args.command == "check":
        bad = {p: problems(nbformat.read(p, as_version=4)) for p in paths}
        for path, found in bad.items():
            for problem in found:
                print(f"{path.name}: {problem}")
        return 1 if any(bad.values()) else 0
    elif args.command == "order":
        print("\n".join(str(p.relative_to(REPO_ROOT)) for p in build_order(course_notebooks())))
    elif args.command == "build":
        failures = build(args.out.resolve(), timeout=args.timeout, site=not args.no_site, jobs=args.jobs)
        print(f"\nThe executed notebooks are in {args.out}/notebooks and {args.out}/solutions.")
        for audience, folder in AUDIENCES.items():
            if not args.no_site and (args.out / folder / "index.html").is_file():
                print(f"The {audience}' site: open {args.out / folder / 'index.html'} "
                      f"(or serve it: python -m http.server -d {args.out / folder})")
        return 1 if failures else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
