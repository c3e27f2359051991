"""Grade submitted exercise notebooks in a sandbox, with checks a submission cannot fool.

Each submission is graded in two runs, each in a fresh kernel inside a bubblewrap sandbox
(``ftcourse.course.sandbox``: read-only course and environment, private temporary home, no network,
an unprivileged user, limits on memory, processes, CPU time and output). The grader's own
process only parses notebooks and reads results; it never executes a submission's code.

1. **The student's notebook, as submitted**, top to bottom, every cell even after an error
   (``ftcourse.course.kernelrun``). This gives the notebook's status (``ok``, ``errors`` with the
   first failing cell, ``timeout``, ``kernel died``, ``output flood``) and which cells
   raised. A part whose own cells raised (its answer, or the cell that checks it) fails.
2. **The checks, in a kernel the grader builds**: the course's own trusted cells (from
   ``notebooks/``, not from the submission), then only the student's *definitions*
   (functions, classes, imports, constant assignments) parsed out of the submission with
   ``ast``; every other top-level statement is dropped, so nothing the notebook did at top
   level (patching ``ftcourse.course.checks``, rebinding ``checks``) reaches this kernel. The
   grader's code then computes what it checks (e.g. ``results`` from the student's
   ``run_regime``) and runs the checks, visible and hidden, under ``ftcourse.course.guard``: a
   student function that, when called, patches the checks, ``sys.modules``, ``importlib``
   or the notebook's names is caught, and the submission gets the status ``review`` (for
   the instructor) with nothing after it trusted.

``grade_folder`` grades a class in parallel and writes a gradebook; ``ftcourse grade`` is
the command (see ``ftcourse.course.cli``).

The grader's own process treats every submission as hostile data too:

- it reads a submission only when it is a regular file (``os.lstat``, never following a
  link; opened with ``O_NOFOLLOW`` and checked again on the open file), and at most
  ``MAX_NOTEBOOK_BYTES``: a symlink (to ``/dev/zero``, ``/etc/shadow``, another student's
  notebook), a FIFO, a device or an oversized file is a ``refused: ...`` row, never read;
- the gradebook is rewritten atomically (temporary file, ``os.replace``) after every
  submission, so a crash loses at most the submission being graded;
- a re-run skips a submission only when its hash *and* the grader's version
  (``grader_version``: the source of ``ftcourse/course/*.py`` and ``ftcourse.__version__``)
  match, so a fixed grader regrades everything;
- every string a submission controls (its file names, its exceptions' names and messages)
  is escaped before it reaches the instructor (``clean``: control characters, ANSI escapes,
  bidirectional overrides), CSV cells cannot start a formula (``csv_cell``), and only the
  grader names a verdict: the guard's ``SubmissionTampered`` counts only when it carries the
  grading's secret (see ``GUARD_CELL``); an exception of the same name raised by the
  submission is shown as ``submission raised ...``.
"""

from __future__ import annotations

import ast
import csv
import dataclasses
import hashlib
import json
import os
import queue
import re
import secrets
import stat
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from . import sandbox
from ..config import REPO_ROOT
from .exercise import parse_cell
from .kernelrun import RESULT_MARK

NOT_DONE = "not done: the stub still raises NotImplementedError"
REVIEW = "review"
TAMPERED = "SubmissionTampered"
STUB = "raise NotImplementedError()"
RAISES_TAG = "raises-exception"
#: The largest notebook the grader reads; a bigger one is refused unread (read at most this + 1 bytes).
MAX_NOTEBOOK_BYTES = 20 * 2**20
REFUSED = "refused"
#: The longest student-controlled message kept in a row (exception messages, file names).
MAX_MESSAGE_CHARS = 300


@dataclass(frozen=True)
class Check:
    """One check of an exercise part: grader ``code`` run (under the guard) in the checks
    kernel; it passes when it raises nothing."""

    part: str  # short name, a column of the table
    code: str
    hidden: bool = True  # not shown in the student's notebook


@dataclass(frozen=True)
class Part:
    """An exercise part: the names its answer defines and the checks the notebook calls for it
    (a cell of the submission that binds one or calls one belongs to the part)."""

    name: str
    defines: tuple = ()
    checked_by: tuple = ()


@dataclass(frozen=True)
class Exercise:
    name: str  # the notebook's file name without .ipynb, e.g. "05_exercise_bert_base"
    title: str
    checks: tuple
    parts: tuple = ()
    #: Grader code that computes what the checks compare, from the student's functions.
    steps: tuple = ()
    #: The course's own student notebook: the trusted source of the given cells.
    course_notebook: Path | None = None

    @property
    def course_path(self) -> Path:
        return Path(self.course_notebook) if self.course_notebook else REPO_ROOT / "notebooks" / f"{self.name}.ipynb"


REGIMES = "('frozen', 'finetune', 'lora')"
BERT_BASE = Exercise(
    name="05_exercise_bert_base",
    title="bert-base: frozen, fine-tuned, LoRA r=8",
    parts=(
        Part("1 lora", ("add_lora",), ("check_lora_on_bert_base",)),
        Part("2 regimes", ("build_model",), ("check_frozen_regime", "check_finetune_regime", "check_lora_regime")),
        Part("3 measure", ("run_regime", "results"), ("check_regime_result",)),
        Part("4 seeds", ("summarize", "stability"), ("check_seed_summary",)),
    ),
    steps=(
        # The grader measures with the student's run_regime itself, rather than trusting the notebook's tables.
        Check("3 measure", f"results = [checks.check_regime_result(run_regime(r), r) for r in {REGIMES}]"),
        Check("4 seeds", f"stability = {{r: [run_regime(r, seed) for seed in profile.stability_seeds] "
                         f"for r in {REGIMES}}}"),
    ),
    checks=(
        Check("1 lora", "checks.check_lora_on_bert_base(add_lora)", hidden=False),
        # Hidden: the student's add_lora must target query and value only, at rank 8.
        Check("1 lora", "checks.check_lora_targets(add_lora)"),
        Check("2 regimes", "checks.check_frozen_regime(build_model('frozen'))", hidden=False),
        Check("2 regimes", "checks.check_finetune_regime(build_model('finetune'))", hidden=False),
        Check("2 regimes", "checks.check_lora_regime(build_model('lora'))", hidden=False),
        # Hidden: the measured table covers the three regimes, with their real trainable counts.
        Check("3 measure", "checks.check_results(results, build_model)"),
        Check("4 seeds", "checks.check_seed_summary(summarize)", hidden=False),
        # Hidden: the stability runs are the seeds of the profile, summarised correctly.
        Check("4 seeds", "checks.check_stability(stability, summarize, profile.stability_seeds)"),
    ),
)
EXERCISES = {exercise.name: exercise for exercise in (BERT_BASE,)}
#: Installed in the checks kernel after the course's cells, before the student's definitions (which
#: run after it, under the guard). It takes the grading's secret from the file kernelrun wrote (and
#: deletes it), keeps it only in a closure, and stamps it on the guard's own ``SubmissionTampered``;
#: an exception of that name the submission raises has no stamp, and is the submission's, not a verdict.
#: (All this runs in one process with the submission: code that digs the secret out of the
#: closure can forge a REVIEW, which only sends its row to the instructor, never a pass.)
GUARD_CELL = """from ftcourse import checks


def __ftcourse_install__():
    import os
    from ftcourse.course.guard import Guard, SubmissionTampered

    secret, path = "", os.environ.pop("FTCOURSE_VERDICT_FILE", "")
    if path:
        with open(path, encoding="utf-8") as handle:
            secret = handle.read().strip()
        os.unlink(path)
    guard = Guard(globals())

    def run(code):
        try:
            guard.run(code)
        except SubmissionTampered as error:
            if type(error) is SubmissionTampered and guard.tampered and secret:
                raise SubmissionTampered(secret + " " + str(error)) from None
            raise

    return run


__ftcourse_run__ = __ftcourse_install__()
del __ftcourse_install__
"""
#: Environment variables the sandboxed kernel gets from the grader's (everything else is cleared).
PASSED_ENV = ("FTCOURSE_PROFILE", "FTCOURSE_DATA", "FTCOURSE_ENCODER", "FTCOURSE_RAW_ENCODER", "FTCOURSE_SENTENCE",
              "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "HF_HUB_CACHE", "TOKENIZERS_PARALLELISM",
              "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class GradingError(ValueError):
    """The grader was asked for something it cannot do (an unknown exercise, no files)."""


@dataclass
class CellError:
    cell: int  # index among all the notebook's cells (-1: not a cell)
    first_line: str
    ename: str
    evalue: str


@dataclass
class PartResult:
    part: str
    passed: bool
    message: str
    hidden: bool
    review: bool = False  # the submission tampered with the grader here: the instructor decides


@dataclass
class Submission:
    path: str
    exercise: str
    student: str = ""
    # ok | errors | timeout | output flood | kernel died | unreadable | refused: ... | wrong exercise | review
    # | grader error
    status: str = "ok"
    seconds: float = 0.0
    sha256: str = ""
    grader: str = ""  # grader_version() of the grader that graded it: a cached row from another is regraded
    profile: str = ""
    sandboxed: bool = True
    failing_cell: CellError | None = None
    cell_errors: list = field(default_factory=list)
    checks: list = field(default_factory=list)
    notes: list = field(default_factory=list)  # what the grader ignored (top-level statements) or saw

    def parts(self) -> dict:
        """Part -> passed (a part passes when all its checks pass)."""
        parts: dict = {}
        for check in self.checks:
            parts[check.part] = parts.get(check.part, True) and check.passed
        return parts

    def marks(self) -> dict:
        """Part -> PASS, FAIL or REVIEW (the submission tampered with this part's checks)."""
        marks = {}
        for part, passed in self.parts().items():
            review = any(c.review for c in self.checks if c.part == part)
            marks[part] = "REVIEW" if review else ("PASS" if passed else "FAIL")
        return marks


def find_exercise(path: Path, name: str | None = None) -> Exercise:
    """The exercise named ``name``, else the one whose name the file name contains, else the
    only one there is."""
    if name:
        if name not in EXERCISES:
            raise GradingError(f"Unknown exercise {name!r}. Known exercises: {', '.join(EXERCISES)}.")
        return EXERCISES[name]
    matches = [e for e in EXERCISES.values() if e.name in Path(path).stem]
    if len(matches) == 1:
        return matches[0]
    if len(EXERCISES) == 1:
        return next(iter(EXERCISES.values()))
    raise GradingError(f"Cannot tell which exercise {Path(path).name} is. Fix: pass --exercise, one of: "
                       f"{', '.join(EXERCISES)}.")


class Refused(GradingError):
    """The submission is not something the grader reads: not a regular file, or too big."""


_KINDS = ((stat.S_ISLNK, "symlink"), (stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "special file")


def read_submission(path, cap: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of the submission at ``path``, or ``Refused``: only a regular file (checked
    with ``os.lstat``; a symlink is never followed, even at open time) of at most ``cap`` bytes,
    read through one descriptor and never more than ``cap + 1`` bytes."""
    path = Path(path)
    before = os.lstat(path)
    if not stat.S_ISREG(before.st_mode):
        raise Refused(f"{REFUSED}: not a regular file ({_kind(before.st_mode)})")
    if before.st_size > cap:
        raise Refused(f"{REFUSED}: {before.st_size:,} bytes, over the cap of {cap:,} bytes")
    # O_NOFOLLOW and O_NONBLOCK: a file swapped for a link or a FIFO after the lstat neither
    # gets followed nor blocks the grader; fstat then checks it is still the same regular file.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise Refused(f"{REFUSED}: not a regular file (it changed while being opened)")
        chunks, size = [], 0
        while size <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > cap:
        raise Refused(f"{REFUSED}: over the cap of {cap:,} bytes")
    return b"".join(chunks)


def sha256(path: Path) -> str:
    """The submission's hash (read as the grader reads it: ``Refused`` unless a regular file within the cap)."""
    return hashlib.sha256(read_submission(path)).hexdigest()


def grader_version() -> str:
    """What a cached grade depends on besides the notebook: the grader's code (every
    ``ftcourse/course/*.py``) and the course's version. A change to either regrades everything."""
    import ftcourse

    digest = hashlib.sha256(f"ftcourse {ftcourse.__version__}\n".encode())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    return f"{ftcourse.__version__}+{digest.hexdigest()[:16]}"


#: Characters a terminal, a spreadsheet or an editor would interpret: C0 controls (all of them,
#: newline and tab too), DEL and C1 controls (0x7f-0x9f, CSI among them), and the Unicode
#: bidirectional overrides and isolates that reorder what is displayed.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
#: Characters that start a formula in a spreadsheet (or a cell separator, tab and CR, before one).
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def clean(text, limit: int | None = None) -> str:
    """``text`` (student-controlled) safe to show: every control character, ANSI escape (its ESC),
    and bidirectional override written as an escape (``\\x1b``, ``\\n``, ``\\u202e``), then
    truncated to ``limit`` characters with an ellipsis."""
    text = str(text)
    if limit is not None and len(text) > limit:
        text = text[:limit]
        cut = True
    else:
        cut = False
    text = _UNSAFE.sub(lambda m: {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(m.group(), repr(m.group())[1:-1])
                       if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)
    return text + ("..." if cut else "")


def csv_cell(value):
    """A gradebook cell: numbers as they are; text cleaned, and a leading apostrophe on text that
    a spreadsheet would take for a formula (``=``, ``+``, ``-``, ``@``, a tab or a CR first)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raw = str(value)
    text = clean(raw)
    return "'" + text if raw.startswith(_FORMULA) or text.startswith(_FORMULA) else text


def _first_line(source: str) -> str:
    """The cell's first line of code (comments such as ``# NBVAL_CHECK_OUTPUT`` skipped)."""
    lines = [line.strip() for line in source.splitlines() if line.strip()]
    return next((line for line in lines if not line.startswith("#")), lines[0] if lines else "")[:80]


def _message(ename: str, evalue: str, verdict: bool = False) -> str:
    """What an error says in the gradebook, escaped and truncated. ``verdict``: the grader's own
    tamper verdict (stamped with the grading's secret); an exception of the same name without
    it is the submission's, and says so."""
    if verdict:
        return clean(evalue, MAX_MESSAGE_CHARS)
    if ename == "NotImplementedError":
        return NOT_DONE
    if ename in ("CheckFailed", "AssertionError"):
        return clean(evalue, MAX_MESSAGE_CHARS)
    if ename == TAMPERED:
        return f"submission raised {TAMPERED} (not the grader's verdict): {clean(evalue, MAX_MESSAGE_CHARS)}"
    return f"{clean(ename, 80)}: {clean(evalue, MAX_MESSAGE_CHARS)}"


def _said(error, verdict: str | None) -> str:
    """The message of a checks cell's error: the verdict's (unstamped) text, or the error's, as ``_message`` says."""
    return _message(error[0], error[1], False) if verdict is None else _message(error[0], verdict, True)


def _verdict(error, secret: str) -> str | None:
    """The grader's tamper verdict in a checks cell's ``[ename, evalue]``, without its stamp; None when
    there is none (no error, another error, or a ``SubmissionTampered`` the submission raised itself)."""
    if error and error[0] == TAMPERED and secret and error[1].startswith(secret + " "):
        return error[1][len(secret) + 1:]
    return None


# ----------------------------------------------------------------------------- reading notebooks


def scaffold_cells(course: nbformat.NotebookNode) -> list[str]:
    """The course's given code cells that run before and without any answer: no stub, not
    tagged as depending on one. The checks kernel runs these, from the course's copy."""
    return [cell.source for cell in course.cells if cell.cell_type == "code" and STUB not in cell.source
            and RAISES_TAG not in cell.metadata.get("tags", [])]


def _bound(tree: ast.Module) -> set:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.add(sub.id)
    return names


def _called(tree: ast.Module) -> set:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None))
    return names


def scaffold_names(course: nbformat.NotebookNode) -> set:
    """Names the course's given cells bind (the data, the profile, ``checks``...): a submission's
    definitions may not replace them in the checks kernel."""
    names = {"checks"}
    for source in scaffold_cells(course):
        tree = parse_cell(source)
        if tree is not None:
            names |= _bound(tree)
    return names


def _constant(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def student_definitions(nb: nbformat.NotebookNode, protected: set, given: set = frozenset()) -> tuple[str, list[str]]:
    """The submission's definitions as one Python source: functions, classes, imports and
    constant assignments (``REGIMES = ("frozen", ...)``), in notebook order. Every other
    top-level statement is dropped, as is anything that would rebind a ``protected`` name.
    Cells whose source is in ``given`` (the course's own cells, unchanged) are skipped.
    Returns (source, notes about what was dropped)."""
    kept, dropped, notes = [], 0, []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or cell.source.strip() in given:
            continue
        tree = parse_cell(cell.source)
        if tree is None:
            notes.append(f"cell {index} does not parse as Python: its definitions are missing")
            continue
        for node in tree.body:
            definition = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import))
            if isinstance(node, ast.ImportFrom):
                definition = node.module != "__future__"
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                definition = all(isinstance(t, ast.Name) for t in targets) and _constant(node.value)
            if not definition:
                dropped += 1
                continue
            if _bound(ast.Module(body=[node], type_ignores=[])) & protected:
                dropped += 1
                continue
            kept.append(ast.unparse(node))
    if dropped:
        notes.append(f"{dropped} top-level statements ignored by the checks (only definitions are kept)")
    return "\n\n".join(kept) + "\n", notes


def cell_parts(source: str, exercise: Exercise) -> set:
    """The exercise parts a submission's cell belongs to: it binds a part's name or calls its check."""
    tree = parse_cell(source)
    if tree is None:
        return set()
    bound, called = _bound(tree), _called(tree)
    return {part.name for part in exercise.parts if bound & set(part.defines) or called & set(part.checked_by)}


def is_exercise(nb: nbformat.NotebookNode, course: nbformat.NotebookNode) -> bool:
    """Whether ``nb`` is a copy of the course's exercise: it keeps at least half of the given cells."""
    given = {source.strip() for source in scaffold_cells(course)}
    present = {cell.source.strip() for cell in nb.cells if cell.cell_type == "code"}
    return bool(given) and len(given & present) * 2 >= len(given)


def checks_notebook(course: nbformat.NotebookNode, definitions: str, exercise: Exercise):
    """The notebook the checks run in, and what each of its code cells is:
    ("scaffold", None) | ("guard", None) | ("definitions", None) | ("step", Check) | ("check", Check)."""
    cells, roles = [], []
    for source in scaffold_cells(course):
        cells.append(source)
        roles.append(("scaffold", None))
    cells.append(GUARD_CELL)
    roles.append(("guard", None))
    cells.append(f"__ftcourse_run__({definitions!r})")
    roles.append(("definitions", None))
    for kind, entries in (("step", exercise.steps), ("check", exercise.checks)):
        for entry in entries:
            cells.append(f"__ftcourse_run__({entry.code!r})")
            roles.append((kind, entry))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb, roles


# ----------------------------------------------------------------------------- running


def kernel_env(env: dict | None = None, sandboxed: bool = True) -> dict:
    """The sandboxed kernel's environment: the course's settings from ours, a private cache, ``env``."""
    passed = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    private = {"FTCOURSE_CACHE": f"{sandbox.HOME}/.cache/ftcourse"} if sandboxed else {}
    return {**passed, **private, "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}


def _execute(nb: nbformat.NotebookNode, timeout: float, env: dict, slot: int, use_sandbox: bool,
             limits: sandbox.Limits, secret: str = "") -> dict:
    """Run ``nb`` through ``ftcourse.course.kernelrun`` (sandboxed); its report, or one saying why there is none.
    ``secret``: what the guard stamps on its verdicts (``GUARD_CELL``), handed over by kernelrun in a file."""
    token = secrets.token_hex(16)
    # The runner's cap on the kernel's output sits below the grader's cap on the runner's stdout, so a
    # print flood is stopped, and named, by the runner; the grader's cap catches anything else.
    job = json.dumps({"notebook": nbformat.writes(nb), "timeout": timeout, "token": token,
                      "output_bytes": limits.output_bytes // 2, "verdict_secret": secret})
    # Slack beyond the notebook's own limit: starting the sandbox and the kernel.
    run = sandbox.run([sys.executable, "-m", "ftcourse.course.kernelrun"], job, timeout=timeout + 120, limits=limits,
                      env=kernel_env(env, use_sandbox), slot=slot, sandbox=use_sandbox)
    for line in reversed(run.stdout.splitlines()):
        if line.startswith(f"{RESULT_MARK} {token} "):
            report = json.loads(line.split(" ", 2)[2])
            if report["status"] == "kernel died" and run.oom_killed:  # the kernel was the one killed
                report["message"] = (f"the sandbox ran out of memory (its cgroup's limit, "
                                     f"{(limits.sandbox_memory_bytes or sandbox.machine_memory()) / sandbox.GiB:.1f} "
                                     f"GiB): {report['message']}")[:400]
            return report
    if run.flooded:
        return {"status": "output flood", "cells": [], "stopped_at": None,
                "message": f"more than {limits.output_bytes:,} bytes on the runner's output"}
    if run.timed_out:
        return {"status": "timeout", "cells": [], "stopped_at": None,
                "message": f"the sandbox ran past {timeout + 120:.0f} s"}
    if run.oom_killed:
        return {"status": "kernel died", "cells": [], "stopped_at": None,
                "message": f"the sandbox ran out of memory (its cgroup's limit, "
                           f"{(limits.sandbox_memory_bytes or sandbox.machine_memory()) / sandbox.GiB:.1f} GiB)"}
    return {"status": "kernel died", "cells": [], "stopped_at": None,
            "message": f"the sandbox exited {run.returncode} without a result: {run.stderr.strip()[-300:]}"}


def _read_notebook(path: Path, result: Submission):
    """The submission as a notebook, or None with ``result.status`` saying why (refused, unreadable)."""
    try:
        data = read_submission(path)
    except Refused as refusal:  # a link, a FIFO, a device, too big: one row, nothing read
        result.status = str(refusal)
        return None
    except OSError as error:
        result.status = "unreadable"
        result.cell_errors.append(CellError(-1, "", type(error).__name__, clean(error.strerror or str(error))))
        return None
    result.sha256 = hashlib.sha256(data).hexdigest()
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        # Schema nits (a cell id in an nbformat 4.4 file) do not matter; cells with sources do.
        if not all(isinstance(cell.get("source"), str) and "cell_type" in cell for cell in nb.cells):
            raise ValueError("its cells are not notebook cells (no cell_type or source)")
    except Exception as error:  # not JSON, not a notebook: report, don't crash
        result.status = "unreadable"
        result.cell_errors.append(CellError(-1, "", type(error).__name__, clean(str(error), MAX_MESSAGE_CHARS)))
        return None
    return nb


def grade(path, exercise: Exercise | None = None, timeout: float = 600, check_timeout: float | None = None,
          env: dict | None = None, use_sandbox: bool = True, slot: int = 0,
          limits: sandbox.Limits | None = None) -> Submission:
    """Grade one notebook (see the module's docstring). ``env`` adds environment variables for
    the kernels, e.g. ``{"FTCOURSE_PROFILE": "smoke"}``; ``check_timeout`` limits the checks
    run (default: ``timeout``); ``slot`` tells concurrent gradings apart (their sandbox uid)."""
    path = Path(path)
    exercise = exercise or find_exercise(path)
    # RLIMIT_CPU is per process and counts every thread: twice the wall-clock limit, for torch's threads.
    limits = limits or sandbox.Limits(cpu_seconds=int(2 * timeout) + 60)
    env = env or {}
    result = Submission(path=str(path), exercise=exercise.name, sandboxed=use_sandbox, grader=grader_version(),
                        profile=env.get("FTCOURSE_PROFILE") or os.environ.get("FTCOURSE_PROFILE") or "offline")
    start = time.perf_counter()
    try:
        nb = _read_notebook(path, result)
        if nb is not None:
            _grade(nb, exercise, result, timeout, check_timeout or timeout, env, use_sandbox, slot, limits)
    except Exception as error:  # the grader's own failure, still one row of the report
        result.status = "grader error"
        result.cell_errors.append(CellError(-1, "", type(error).__name__, clean(str(error), MAX_MESSAGE_CHARS)))
    if not result.checks:  # nothing could be checked: every part fails, saying why
        reason = {"unreadable": "the notebook could not be read", "timeout": "the notebook timed out",
                  "output flood": "the notebook flooded its output",
                  "wrong exercise": f"this is not the exercise {exercise.name}"}.get(result.status, result.status)
        if result.cell_errors and result.status not in ("timeout", "output flood", "wrong exercise"):
            last = result.cell_errors[-1]
            reason += f" ({last.ename}: {last.evalue})"
        for check in exercise.checks:
            result.checks.append(PartResult(check.part, False, reason, check.hidden))
    result.seconds = time.perf_counter() - start
    return result


def _grade(nb, exercise: Exercise, result: Submission, timeout: float, check_timeout: float, env: dict,
           use_sandbox: bool, slot: int, limits: sandbox.Limits) -> None:
    course = nbformat.read(exercise.course_path, as_version=4)
    if not is_exercise(nb, course):
        result.status = "wrong exercise"
        result.failing_cell = CellError(-1, "", "WrongExercise",
                                        f"fewer than half of the given cells of {exercise.name} are in this notebook")
        result.cell_errors.append(result.failing_cell)
        return
    # 1. The notebook as submitted: its status, and which cells raised.
    report = _execute(nb, timeout, env, slot, use_sandbox, limits)
    for entry in report["cells"]:
        if entry["error"]:
            index = entry["index"]
            result.cell_errors.append(CellError(index, _first_line(nb.cells[index].source), *entry["error"]))
    if report["status"] != "ok":
        result.status = report["status"]
        index = report["stopped_at"]
        where = (index, _first_line(nb.cells[index].source)) if index is not None else (-1, "")
        result.failing_cell = CellError(*where, {"timeout": "Timeout", "output flood": "OutputFlood"}.get(
            report["status"], "DeadKernelError"), report["message"])
        result.cell_errors.append(result.failing_cell)
        return
    if result.cell_errors:
        result.status = "errors"
        result.failing_cell = result.cell_errors[0]
    # 2. The checks, in a kernel built from the course's cells and the submission's definitions only.
    given = {c.source.strip() for c in course.cells if c.cell_type == "code" and STUB not in c.source}
    definitions, result.notes = student_definitions(nb, scaffold_names(course), given)
    checks_nb, roles = checks_notebook(course, definitions, exercise)
    secret = secrets.token_hex(16)
    report = _execute(checks_nb, check_timeout, env, slot, use_sandbox, limits, secret)
    errors = {entry["index"]: entry["error"] for entry in report["cells"]}
    ran = set(errors)
    for index, (role, _) in enumerate(roles):
        if role in ("scaffold", "guard") and index in ran and errors[index]:
            raise RuntimeError(f"the course's own cell failed in the checks kernel: {errors[index][0]}: "
                               f"{errors[index][1][:200]}")
    not_run = f"not run: the checks {report['status']} ({report['message']})" if report["status"] != "ok" else ""
    failed_steps = {}
    tampered = False
    for index, (role, entry) in enumerate(roles):
        if role not in ("definitions", "step", "check"):
            continue
        error = errors.get(index) if index in ran else ["NotRun", not_run or "not run"]
        verdict = _verdict(error, secret)
        if verdict is not None:
            tampered = True
        if role == "definitions":
            if error:
                result.notes.append(f"the submission's definitions raised: "
                                    f"{_said(error, verdict)[:300]}")
            continue
        if role == "step":
            if error:
                failed_steps[entry.part] = _said(error, verdict)
            continue
        message = _said(error, verdict) if error else ""
        if error and verdict is None and entry.part in failed_steps:
            message = failed_steps[entry.part]  # the check had nothing to check: say why
        result.checks.append(PartResult(entry.part, error is None, message, entry.hidden, review=verdict is not None))
    if report["status"] != "ok" and result.status == "ok":
        result.status = report["status"]
    if tampered:
        result.status = REVIEW
    # A part whose own cells raised in the submitted notebook cannot pass.
    for error in result.cell_errors:
        if error.cell < 0:
            continue
        for part in sorted(cell_parts(nb.cells[error.cell].source, exercise)):
            result.checks.append(PartResult(part, False, f"its cell {error.cell} (`{error.first_line}`) raised: "
                                            f"{_message(error.ename, error.evalue)}", False))


# ----------------------------------------------------------------------------- a whole class


def submissions_in(folder: Path) -> dict:
    """Student -> notebook, for every ``.ipynb`` under ``folder`` (checkpoints skipped). A
    student is the notebook's folder below ``folder`` (``alice/05_...ipynb``), or its name.
    Links to folders are not followed; a ``.ipynb`` that is a link, a FIFO or a device is listed
    (the grader refuses it, in its row) but never opened here."""
    folder = Path(folder)
    found = {}
    paths = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d != ".ipynb_checkpoints")
        paths += [Path(root) / name for name in files if name.endswith(".ipynb")]
        # A link to a folder named *.ipynb: listed as a submission, refused as not a regular file.
        paths += [Path(root) / name for name in dirs if name.endswith(".ipynb") and os.path.islink(Path(root) / name)]
    for path in sorted(paths):
        relative = path.relative_to(folder)
        student = "/".join(relative.parent.parts) if relative.parent.parts else relative.stem
        if student in found:
            student = relative.as_posix()
        found[student] = path
    return found


def default_workers(per_run_bytes: int = 3 * sandbox.GiB) -> int:
    """As many gradings at once as the cores and the available memory allow (at least one)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        available = next(int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                         if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        available = per_run_bytes
    return max(1, min(cores, available // per_run_bytes))


def _load_gradebook(path: Path) -> dict:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))["submissions"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    book = {}
    for row in rows:
        try:
            row = dict(row)
            row["failing_cell"] = CellError(**row["failing_cell"]) if row.get("failing_cell") else None
            row["cell_errors"] = [CellError(**e) for e in row.get("cell_errors", [])]
            row["checks"] = [PartResult(**c) for c in row.get("checks", [])]
            for derived in ("parts", "marks", "passed", "total"):
                row.pop(derived, None)
            result = Submission(**row)
        except (TypeError, KeyError):
            continue
        book[_cache_key(result.student, result.sha256, result.exercise, result.profile, result.sandboxed,
                        result.grader)] = result
    return book


def _cache_key(student, digest, exercise, profile, sandboxed, grader) -> tuple:
    return (student, digest, exercise, profile, sandboxed, grader)


def _refused(path: Path, student: str, exercise: Exercise, status: str, sandboxed: bool, profile: str) -> Submission:
    result = Submission(path=str(path), exercise=exercise.name, student=student, status=status, sandboxed=sandboxed,
                        profile=profile, grader=grader_version())
    result.checks = [PartResult(check.part, False, status, check.hidden) for check in exercise.checks]
    return result


def grade_folder(folder, gradebook, exercise: Exercise | None = None, workers: int | None = None,
                 force: bool = False, timeout: float = 600, env: dict | None = None, use_sandbox: bool = True,
                 progress: bool = True, limits: sandbox.Limits | None = None) -> list[Submission]:
    """Grade every notebook under ``folder`` with ``workers`` in parallel; write ``gradebook``
    (``.csv`` and ``.json``, one row per student). A submission already in the gradebook with the
    same hash (same exercise, profile, sandboxing and grader version) is not graded again unless
    ``force``. The gradebook is rewritten (atomically) as each submission finishes: a crash loses
    at most the ones still being graded."""
    from tqdm.auto import tqdm

    folder, gradebook = Path(folder), Path(gradebook)
    found = submissions_in(folder)
    if not found:
        raise GradingError(f"No notebooks (*.ipynb) under {folder}. Fix: put one notebook per student there, "
                           "e.g. submissions/alice/05_exercise_bert_base.ipynb.")
    profile = (env or {}).get("FTCOURSE_PROFILE") or os.environ.get("FTCOURSE_PROFILE") or "offline"
    previous = {} if force else _load_gradebook(gradebook.with_suffix(".json"))
    version = grader_version()
    results, todo = {}, []
    for student, path in found.items():
        chosen = exercise or find_exercise(path)
        try:
            digest = sha256(path)
        except Refused as refusal:  # never read, never cached: its row says why
            results[student] = _refused(path, student, chosen, str(refusal), use_sandbox, profile)
            continue
        except OSError as error:  # vanished, unreadable: grade() says so in its row
            digest = f"unreadable: {error.strerror}"
        key = _cache_key(student, digest, chosen.name, profile, use_sandbox, version)
        if key in previous:
            previous[key].path = str(path)
            results[student] = previous[key]
        else:
            todo.append((student, path, chosen))
    workers = max(1, min(workers or default_workers(), len(todo) or 1))
    # Each worker's sandboxes share the machine's memory equally (their cgroup's memory.max, where there is one).
    limits = limits or sandbox.Limits(cpu_seconds=int(2 * timeout) + 60)
    if limits.sandbox_memory_bytes is None:
        limits = dataclasses.replace(limits, sandbox_memory_bytes=sandbox.machine_memory() // workers)
    slots: queue.Queue = queue.Queue()
    for slot in range(workers):
        slots.put(slot)

    written = threading.Lock()

    def one(student, path, chosen):
        slot = slots.get()  # each concurrent grading gets its own sandbox uid
        try:
            result = grade(path, chosen, timeout=timeout, env=env, use_sandbox=use_sandbox, slot=slot, limits=limits)
        except Exception as error:  # noqa: BLE001 - a grader bug costs this row, not the class
            result = _refused(path, student, chosen, "grader error", use_sandbox, profile)
            result.cell_errors.append(CellError(-1, "", type(error).__name__, clean(str(error), MAX_MESSAGE_CHARS)))
        finally:
            slots.put(slot)
        # The version this class run started with: a grader edited while it runs regrades on the next run.
        result.student, result.grader = student, version
        with written:  # the row is on disk as soon as it is graded
            results[student] = result
            write_gradebook([results[s] for s in found if s in results], gradebook)
        return result

    write_gradebook([results[s] for s in found if s in results], gradebook)  # the cached and refused rows
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(one, *job) for job in todo]
        bar = tqdm(as_completed(futures), total=len(futures), desc=f"grading ({workers} workers)", unit="notebook",
                   disable=not progress or not futures)
        for future in bar:
            future.result()
    ordered = [results[student] for student in found]
    write_gradebook(ordered, gradebook)
    return ordered


def _replace(path: Path, write) -> Path:
    """Write ``path`` through ``write(handle)`` into a temporary file beside it, then rename it
    over ``path``: a reader (or a crash) sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    return path


def write_gradebook(results: list[Submission], gradebook) -> tuple[Path, Path]:
    """``gradebook.csv`` (one row per student, one column per part: PASS / FAIL / REVIEW) and
    ``gradebook.json`` (everything, with every check's message)."""
    gradebook = Path(gradebook)
    parts = list(dict.fromkeys(p for r in results for p in r.parts()))
    csv_path, json_path = gradebook.with_suffix(".csv"), gradebook.with_suffix(".json")

    def write(handle):
        writer = csv.writer(handle)
        writer.writerow([csv_cell(c) for c in ("student", "exercise", "status", *parts, "passed", "total",
                                                "sha256", "seconds")])
        for r in results:
            marks = r.marks()
            writer.writerow([csv_cell(c) for c in (r.student, r.exercise, r.status,
                                                   *(marks.get(p, "") for p in parts), sum(r.parts().values()),
                                                   len(marks), r.sha256, f"{r.seconds:.0f}")])
    _replace(csv_path, write)
    write_report(results, json_path)
    return csv_path, json_path


# ----------------------------------------------------------------------------- reporting


def _name(result: Submission) -> str:
    """The submission's folder and file name: enough to tell submissions apart, no machine path."""
    path = Path(result.path)
    return clean(f"{path.parent.name}/{path.name}" if path.parent.name else path.name, 120)


def table(results: list[Submission]) -> str:
    """One row per submission: its status, then PASS / FAIL / REVIEW per exercise part."""
    parts = list(dict.fromkeys(p for r in results for p in r.parts()))
    name_width = max([len("submission")] + [len(_name(r)) for r in results])
    status_width = max([len("status")] + [len(clean(r.status)) for r in results])
    header = f"{'submission':<{name_width}}  {'status':<{status_width}}  " + "  ".join(
        f"{p:<9}" for p in parts) + "  passed"
    lines = [header, "-" * len(header)]
    for r in results:
        marks = r.marks()
        cells = "  ".join(f"{marks.get(p, '-'):<9}" for p in parts)
        lines.append(f"{_name(r):<{name_width}}  {clean(r.status):<{status_width}}  {cells}  "
                     f"{sum(r.parts().values())}/{len(marks)}")
    return "\n".join(lines)


def details(result: Submission) -> str:
    """Why things failed, for one submission: the first failing cell and each failed check."""
    lines = [f"{_name(result)}: {clean(result.status)}, {result.seconds:.0f} s"
             + ("" if result.sandboxed else " (NOT sandboxed)")]
    if result.failing_cell:
        cell = result.failing_cell
        lines.append(f"  first failing cell: {cell.cell} `{clean(cell.first_line, 80)}` -> "
                     f"{_message(cell.ename, cell.evalue)}")
    for check in result.checks:
        if not check.passed:
            lines.append(f"  {check.part}{' (hidden)' if check.hidden else ''}"
                         f"{' [REVIEW]' if check.review else ''}: {clean(check.message, 2 * MAX_MESSAGE_CHARS)}")
    return "\n".join(lines)


def write_report(results: list[Submission], path) -> Path:
    """The JSON report: one object per submission, with every check and cell error."""
    path = Path(path)
    report = {
        "submissions": [
            {**asdict(r), "parts": r.parts(), "marks": r.marks(), "passed": sum(r.parts().values()),
             "total": len(r.parts())}
            for r in results
        ]
    }
    # json.dumps escapes every control character but DEL; ensure_ascii escapes C1 and the rest.
    text = json.dumps(report, indent=2, ensure_ascii=True).replace("\x7f", "\\u007f")
    return _replace(path, lambda handle: handle.write(text + "\n"))
