"""Grade submitted exercise notebooks: the submission runs in a sandbox, the verdicts are computed outside it.

Each submission runs once, in a fresh kernel inside a bubblewrap sandbox (``ftcourse.course.sandbox``:
read-only course and environment, private temporary home, no network, an unprivileged user, limits on
the whole sandbox's memory and processes, on CPU time and on output):

1. **The student's notebook, as submitted**, top to bottom, every cell even after an error
   (``ftcourse.course.kernelrun``). This gives the notebook's status (``ok``, ``errors`` with the
   first failing cell, ``timeout``, ``kernel died``, ``output flood``) and which cells raised. A
   part whose own cells raised (its answer, or the cell that checks it) fails.
2. **Then the grader's recording cells**, in the same kernel (``ftcourse.course.evidence``): they
   call the student's functions (the exercise's ``Exercise.records``) and
   write what came out into a folder of the grader's, bound into the sandbox and capped in size:
   JSON records, and the weights each run changed, as safetensors. Nothing else leaves the sandbox.
3. **The verdicts, in the grader's own process** (``ftcourse.course.verdicts``), which never
   executes submission code: it reads that folder as hostile data, rebuilds every model from the
   course's code, loads the recorded weights into them and recomputes each figure it judges (the
   exercise's ``Exercise.judge``: for the bert-base exercise, the LoRA count, which parameters train,
   that training happened and nothing frozen moved, the accuracy re-scored on its own dev set and on
   held-out sentences the sandbox never had). A check passes only on such a positive, recomputed result;
   a missing or malformed record is a failure.

**The threat model.** A submission runs arbitrary code in its kernel, and the recording cells run in that
kernel too: anything written there can be forged. A part should PASS only on evidence this process verifies
by recomputation, where forging it costs at least as much as the work; a claim it cannot verify goes to the
instructor as REVIEW, never as PASS. Concretely:

- "trained" is verified as a descent step from the weights, on the grader's own training examples
  (``verdicts.descent``): noise, or digests made to look changed, fail it; a change between
  ``verdicts.DESCENT_REVIEW_Z`` and ``DESCENT_MIN_Z`` (more than noise, less than training usually gives)
  goes to REVIEW;
- "frozen" is read through two views of the model (its ``named_parameters``, and a walk of its modules' own
  dictionaries: ``evidence.raw_digests``) whose disagreement goes to REVIEW;
- the data are the grader's (``Exercise.sandbox_data``): the sandbox reads only the exercise's training rows and
  part of the dev set, and the grader scores every run on the rest as well; a dev score far above that
  held-out one (``verdicts.HELD_OUT_MIN_Z``), or a dev loss far below it (``verdicts.HELD_OUT_LOSS_MIN_T``:
  the power the accuracy lacks on a small dev set), goes to REVIEW;
- the course's own answers are not in the sandbox: it sees an exercise build of the package without them
  (``Exercise.withheld``, ``ftcourse.course.withheld``), so no spelling of an import reaches them. The static
  scan for the course's helpers (``Exercise.solved_by_import``) stays as a hint for what must stay given
  (a given helper, used where a part asks for the student's own code).

A run trained honestly on a rebound, tiny subset of the training set is a descent step; part 3 sends the
student's loop to REVIEW when its change fits the grader's training examples no better than unseen sentences
(``verdicts.fit``, stated with its margins in ``book/instructors.md``). With ``--no-sandbox`` (trusted runs
only) nothing is withheld.

Which guarantee comes from where:

- *from the boundary*: whatever the submission does in its process (patch the checks, the guard,
  ``math.isclose``, IPython's exception display, the recording code itself; forge the records), the
  verdicts are computed where none of it runs, from data; forged data must still be a model that the
  course's code rebuilds, that trained what its regime trains, and that scores what it says;
- *from the sandbox*: the submission cannot reach the grader, other submissions, the network or the
  instructor's files, nor exhaust the machine;
- *from the checks*: what the data cannot prove is only checked for sense (seconds per epoch, peak
  memory); the guard (``ftcourse.course.guard``), installed before the recording cells, is a second
  line: a student function that patches the grader's modules when called sends its part to REVIEW.
- *from the exercise build*: the implementations a part asks for are not in the sandbox's package; a
  submission that imports a given helper to solve a part (``Exercise.solved_by_import``) gets that part sent
  for review.

The engine knows no exercise by name: each is declared, as data and its own verdict function, in a
module ``ftcourse/course/exercise_<name>.py`` (``known_exercises``); a new exercise needs no change here.

``grade_folder`` grades a class in parallel and writes a gradebook; ``ftcourse grade`` is
the command (see ``ftcourse.course.cli``). Before any submission runs, both build what the
verdicts need in the grader's process (``ready``: the dev set, the encoder), so that a grader
without them (offline, no ``FTCOURSE_DATA``) stops within seconds, naming the fix.

The grader's own process treats every submission as hostile data too:

- it reads a submission only when it is a regular file (``os.lstat``, never following a
  link; opened with ``O_NOFOLLOW`` and checked again on the open file), and at most
  ``MAX_NOTEBOOK_BYTES``: a symlink (to ``/dev/zero``, ``/etc/shadow``, another student's
  notebook), a FIFO, a device or an oversized file is a ``refused: ...`` row, never read;
- a submission's evidence folder is removed after its verdicts, whatever it left there
  (``sandbox.remove_tree``: any depth, any permissions, links never followed), and its JSON
  records are parsed only within caps on their bytes, values and nesting (``verdicts.read_json``);
- the gradebook is rewritten atomically (temporary file, ``os.replace``) after every
  submission, so a crash loses at most the submission being graded;
- a re-run skips a submission only when its hash *and* the grader's version
  (``grader_version``: the source of ``ftcourse/course/*.py`` and ``ftcourse.__version__``)
  match, so a fixed grader regrades everything;
- every string a submission controls (its file names, its exceptions' names and messages, its
  written answers) is escaped before it reaches the instructor (``clean``: control characters,
  ANSI escapes, bidirectional overrides; ``visible`` on the review pages, keeping an answer's
  lines), CSV cells cannot start a formula (``csv_cell``), and only the grader names a verdict:
  the guard's ``SubmissionTampered`` counts only when it carries the grading's secret (see
  ``GUARD_CELL``); an exception of the same name raised by the submission is shown as
  ``submission raised ...``.
"""

from __future__ import annotations

import ast
import copy
import csv
import dataclasses
import hashlib
import json
import os
import queue
import re
import secrets
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
    """One verdict of an exercise part, computed by the grader's own process (``judge``); ``what``
    says what it checks, for the instructors' page and the rows of a submission nothing ran for."""

    part: str  # short name, a column of the table
    what: str
    hidden: bool = True  # not shown in the student's notebook


@dataclass(frozen=True)
class Record:
    """Grader code run (under the guard) in the evidence kernel: it calls the submission's functions
    and writes what they produced into the evidence folder (``ftcourse.course.evidence``)."""

    part: str
    code: str


@dataclass(frozen=True)
class Part:
    """An exercise part: the names its answer defines and the checks the notebook calls for it
    (a cell of the submission that binds one or calls one belongs to the part)."""

    name: str
    defines: tuple = ()
    checked_by: tuple = ()


@dataclass(frozen=True)
class Exercise:
    name: str  # the notebook's file name without .ipynb
    title: str
    checks: tuple
    parts: tuple = ()
    #: What the evidence kernel records; ``records(profile)`` gives them for a profile.
    records: object = ()
    #: The grader's verdicts: ``judge(evidence_folder, profile)`` -> [(part, passed, message, hidden)];
    #: ``passed`` None: the evidence contradicts itself, and the part goes to the instructor (REVIEW).
    judge: object = None
    #: Part -> (module, function, inside): the course's own helper that solves the part (anywhere in the
    #: notebook, or called inside the function ``inside``). A submission that uses it gets that part sent
    #: for review (the instructor decides whether it is an answer).
    solved_by_import: dict = field(default_factory=dict)
    #: The course's own student notebook: the trusted source of the given cells.
    course_notebook: Path | None = None
    #: ``prepare(profile)``: build what ``judge`` needs in the grader's process (data, models), or raise
    #: saying what is missing and how to fix it; called before any submission runs (``ready``).
    prepare: object = None
    #: The functions whose source the review page shows: what the student wrote that no check can judge.
    reviewed_code: tuple = ()
    #: Module -> ``withheld.ABSENT`` or ``withheld.CONSTANTS``: the course's own answers to the parts, left out
    #: of the package the sandbox sees (``ftcourse.course.withheld``), so that no spelling of an import reaches them.
    withheld: dict = field(default_factory=dict)
    #: ``sandbox_data(profile, folder)``: write the only data the sandbox may read (its ``FTCOURSE_DATA``), so
    #: the grader keeps a held-out scoring set the submission never sees; None: the sandbox reads ours.
    sandbox_data: object = None

    @property
    def course_path(self) -> Path:
        return Path(self.course_notebook) if self.course_notebook else REPO_ROOT / "notebooks" / f"{self.name}.ipynb"

    def records_for(self, profile) -> tuple:
        return tuple(self.records(profile) if callable(self.records) else self.records)


#: The name the evidence module has in the submission's kernel (``GUARD_CELL``), for the records' code.
EVIDENCE = "__ftcourse_evidence__"


def student_raised(error) -> str:
    """The message for a student function that raised (``verdicts.StudentRaised``): a stub is "not done"; a
    ``SubmissionTampered`` of the submission's own is named as such; anything else says what raised it."""
    if error.ename in ("NotImplementedError", TAMPERED):
        return _message(error.ename, error.evalue)
    return f"{clean(error.what, 80)} raised {_message(error.ename, error.evalue)}"


#: The exercises the grader knows: each ``ftcourse/course/exercise_<name>.py`` module declares one as
#: ``EXERCISE`` (its parts, records, verdicts, helper policy and reviewed code); the engine names none.
EXERCISE_MODULE_PREFIX = "exercise_"


def known_exercises() -> dict:
    """``{name: Exercise}`` of every exercise module beside this one (``EXERCISE_MODULE_PREFIX``)."""
    import importlib
    import pkgutil

    found = {}
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if module.name.startswith(EXERCISE_MODULE_PREFIX):
            exercise = importlib.import_module(f"{__package__}.{module.name}").EXERCISE
            found[exercise.name] = exercise
    return found


#: Run in the submission's kernel after its last cell, before the grader's recording cells (which run
#: under the guard, a second line behind the verdicts): it takes the grading's secret from the file
#: kernelrun wrote (and deletes it), keeps it only in a closure, and stamps it on the guard's own
#: ``SubmissionTampered``; an exception of that name the submission raises has no stamp, and is the
#: submission's, not a verdict. (All this runs in one process with the submission, which can read the
#: secret before this cell runs: it can forge a REVIEW, which only sends its row to the instructor,
#: never a pass. Passes come from ``ftcourse.course.verdicts``, in the grader's process.)
GUARD_CELL = """from ftcourse import checks
from ftcourse.course import evidence as __ftcourse_evidence__


def __ftcourse_install__():
    import os
    from ftcourse.course.guard import Guard, SubmissionTampered

    secret, path = "", os.environ.pop("FTCOURSE_VERDICT_FILE", "")
    if path:
        with open(path, encoding="utf-8") as handle:
            secret = handle.read().strip()
        os.unlink(path)
    guard = Guard(globals(), names={names!r})

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
    """The grader was asked for something it cannot do (an unknown exercise, no files, no data to judge with)."""


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
    notes: list = field(default_factory=list)  # what the grader noticed (a guard it could not install, say)
    #: What the instructor reads: each written question and the student's answer, the student's own loop.
    answers: list = field(default_factory=list)

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
    exercises = known_exercises()
    if name:
        if name not in exercises:
            raise GradingError(f"Unknown exercise {name!r}. Known exercises: {', '.join(exercises)}.")
        return exercises[name]
    matches = [e for e in exercises.values() if e.name in Path(path).stem]
    if len(matches) == 1:
        return matches[0]
    if len(exercises) == 1:
        return next(iter(exercises.values()))
    raise GradingError(f"Cannot tell which exercise {Path(path).name} is. Fix: pass --exercise, one of: "
                       f"{', '.join(exercises)}.")


class Refused(GradingError):
    """The submission is not something the grader reads: not a regular file, or too big."""


def read_submission(path, cap: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of the submission at ``path``, or ``Refused``: only a regular file of at most ``cap``
    bytes, never following a link (``sandbox.read_untrusted``)."""
    try:
        return sandbox.read_untrusted(path, cap)
    except sandbox.NotReadable as refusal:
        raise Refused(f"{REFUSED}: {refusal}") from None


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
    cut = limit is not None and len(text) > limit
    if cut:
        text = text[:limit]
    return _UNSAFE.sub(_escape, text) + ("..." if cut else "")


def _escape(match) -> str:
    """An unsafe character (``_UNSAFE``) as the escape that shows it: ``\\n``, ``\\x1b``, ``\\u202e``."""
    char = match.group()
    if ord(char) >= 0x100:
        return f"\\u{ord(char):04x}"
    return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(char, repr(char)[1:-1])


def visible(text) -> str:
    """Multi-line ``text`` (student-controlled: a written answer, a function's source) safe to show on a page:
    as ``clean``, every control character, ANSI escape and bidirectional override written as its escape, but
    its line breaks and tabs kept (a Windows line end is a line break), and never truncated."""
    return _UNSAFE.sub(lambda m: m.group() if m.group() in "\n\t" else _escape(m),
                       str(text).replace("\r\n", "\n"))


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
    names = {"checks", EVIDENCE, "__ftcourse_run__", "__ftcourse_install__"}
    for source in scaffold_cells(course):
        tree = parse_cell(source)
        if tree is not None:
            names |= _bound(tree)
    return names


def imports_of(nb: nbformat.NotebookNode, module: str, function: str, inside: str | None = None) -> bool:
    """Whether the submission's code reaches ``module.function``: imports it (``from a.b import f``,
    ``import a.b``, ``from a import b``), calls ``<anything>.function``, or names the module in a string
    (``importlib.import_module("a.b")``). With ``inside``: whether
    the body of the function ``inside`` calls ``function`` (by its name, or as ``<module's last part>.function``)."""
    package, _, leaf = module.rpartition(".")
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tree = parse_cell(cell.source)
        if tree is None:
            continue
        if inside is not None:
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == inside:
                    for call in ast.walk(node):
                        func = getattr(call, "func", None) if isinstance(call, ast.Call) else None
                        if (isinstance(func, ast.Name) and func.id == function) or (
                                isinstance(func, ast.Attribute) and func.attr == function
                                and isinstance(func.value, ast.Name) and func.value.id in (leaf, "ftcourse")):
                            return True
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in (module, package) and any(
                    alias.name in (function, leaf, "*") for alias in node.names):
                return True
            if isinstance(node, ast.Import) and any(alias.name == module for alias in node.names):
                return True
            if isinstance(node, ast.Attribute) and node.attr == function:
                return True
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and module in node.value:
                return True
    return False


QUESTION = "**Question"
#: The answers' stub in the student copy (``ftcourse.course.exercise``).
ANSWER_STUB = "YOUR ANSWER HERE"
def collect_answers(nb: nbformat.NotebookNode, course: nbformat.NotebookNode, reviewed_code=()) -> list:
    """The written questions of the course's notebook and the submission's answers: for each question
    cell (markdown, starting "**Question"), every cell after it in the submission up to the next cell the
    course gave, and the source of each function named in ``reviewed_code`` (``Exercise.reviewed_code``). A stub
    left as it was is no answer."""
    given = {c.source.strip() for c in course.cells if c.source.strip() and c.source.strip() != ANSWER_STUB}
    sources = [c.source.strip() for c in nb.cells]
    answers = []
    for question in (c.source.strip() for c in course.cells if c.cell_type == "markdown"
                     and c.source.startswith(QUESTION)):
        if question not in sources:
            answers.append({"question": question, "answer": "", "missing": "the question's cell is not in the notebook"})
            continue
        written = []
        for source in sources[sources.index(question) + 1:]:
            if source in given:
                break
            if source and source != ANSWER_STUB:
                written.append(source)
        answers.append({"question": question, "answer": "\n\n".join(written)})
    for name in reviewed_code:
        code = [c.source for c in nb.cells if c.cell_type == "code" and f"def {name}(" in c.source]
        answers.append({"question": f"The student's {name}", "answer": "\n\n".join(code), "code": True})
    return answers


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


def graded_notebook(nb: nbformat.NotebookNode, course: nbformat.NotebookNode, records):
    """The notebook the sandboxed kernel runs: the submission's cells as submitted, then the guard,
    then the grader's recording cells. Returns it and, per cell, ("submission", None) | ("guard", None)
    | ("record", Record)."""
    protected = sorted(scaffold_names(course) - {EVIDENCE, "__ftcourse_run__", "__ftcourse_install__"})
    cells = [copy.deepcopy(cell) for cell in nb.cells]
    for cell in cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    roles = [("submission", None)] * len(cells)
    cells.append(nbformat.v4.new_code_cell(GUARD_CELL.replace("{names!r}", repr(protected))))
    roles.append(("guard", None))
    for record in records:
        cells.append(nbformat.v4.new_code_cell(f"__ftcourse_run__({record.code!r})"))
        roles.append(("record", record))
    graded = nbformat.v4.new_notebook(cells=cells)
    graded.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return graded, roles


def ready(exercises, env: dict | None = None) -> None:
    """Build what each exercise's verdicts need in the grader's own process (``Exercise.prepare``) under the
    profile the submissions run under, before any of them runs; a ``GradingError`` saying what is missing
    and the fix when it cannot be had (offline without ``FTCOURSE_DATA``, say): within seconds, not after
    a submission ran and the hub client retried for minutes. Each exercise's reference is built once."""
    from . import verdicts
    from ..config import ConfigError

    preparing = [e for e in {e.name: e for e in exercises}.values() if e.prepare is not None]
    for exercise in preparing:
        try:
            exercise.prepare(grading_profile(env))
        except (verdicts.ReferenceUnavailable, ConfigError) as error:
            raise GradingError(f"{exercise.name}: {error}") from None


_data_folders: dict = {}
_data_lock = threading.Lock()


def sandbox_data_folder(exercise: Exercise, profile) -> Path | None:
    """The folder ``exercise.sandbox_data`` wrote for ``profile``, once per process (removed at exit), or
    None when the exercise lets the sandbox read the grader's data."""
    if exercise.sandbox_data is None:
        return None
    import atexit
    import shutil

    with _data_lock:
        key = (exercise.name, repr(profile))
        if key not in _data_folders or not _data_folders[key].is_dir():
            folder = Path(tempfile.mkdtemp(prefix="ftcourse-sandbox-data-"))
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            exercise.sandbox_data(profile, folder)
            for path in [folder, *folder.rglob("*")]:  # the sandbox's unprivileged uid reads it
                path.chmod(0o755 if path.is_dir() else 0o644)
            _data_folders[key] = folder
        return _data_folders[key]


def grading_profile(env: dict | None = None):
    """The profile the submission runs under (``FTCOURSE_PROFILE`` of ``env``, else ours, else offline),
    with the model overrides both environments name: the grader rebuilds the same models."""
    from ..config import get_profile, with_model_overrides

    merged = {**os.environ, **(env or {})}
    return with_model_overrides(get_profile(merged.get("FTCOURSE_PROFILE") or "offline"), merged)


def kernel_env(env: dict | None = None, sandboxed: bool = True) -> dict:
    """The sandboxed kernel's environment: the course's settings from ours, a private cache, ``env``."""
    passed = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    private = {"FTCOURSE_CACHE": f"{sandbox.HOME}/.cache/ftcourse"} if sandboxed else {}
    return {**passed, **private, "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}


def _execute(nb: nbformat.NotebookNode, timeout: float, env: dict, slot: int, use_sandbox: bool,
             limits: sandbox.Limits, secret: str = "", evidence: str | None = None, withheld: dict | None = None,
             data: Path | None = None) -> dict:
    """Run ``nb`` through ``ftcourse.course.kernelrun`` (sandboxed); its report, or one saying why there is none.
    ``secret``: what the guard stamps on its verdicts (``GUARD_CELL``), handed over by kernelrun in a file.
    ``evidence``: the grader's folder the kernel writes its records into (``FTCOURSE_EVIDENCE_DIR``).
    ``withheld``: the exercise's ``withheld`` modules: the sandbox sees the package built without them.
    ``data``: the exercise's own data folder (``sandbox_data_folder``), the only data the sandbox reads."""
    from . import layout, withheld as withholding

    build = withholding.cached_build(withheld or {}) if use_sandbox else None
    overlays = [(build, layout.PACKAGE_DIR)] if build is not None else []
    if use_sandbox and data is not None:
        # Bound over our data folder when there is one (the sandbox sees only the exercise's files there),
        # else at its own path with the setting pointed at it.
        ours = os.environ.get("FTCOURSE_DATA")
        target = ours if ours and Path(ours).is_dir() else str(data)
        overlays.append((data, target))
        env = {**env, "FTCOURSE_DATA": target}
    if evidence is not None:
        from .evidence import ENV

        env = {**env, ENV: sandbox.WRITABLE if use_sandbox else evidence}
    token = secrets.token_hex(16)
    # The runner's cap on the kernel's output sits below the grader's cap on the runner's stdout, so a
    # print flood is stopped, and named, by the runner; the grader's cap catches anything else.
    job = json.dumps({"notebook": nbformat.writes(nb), "timeout": timeout, "token": token,
                      "output_bytes": limits.output_bytes // 2, "verdict_secret": secret})
    # Slack beyond the notebook's own limit: starting the sandbox and the kernel.
    run = sandbox.run([sys.executable, "-m", "ftcourse.course.kernelrun"], job, timeout=timeout + 120, limits=limits,
                      env=kernel_env(env, use_sandbox), slot=slot, sandbox=use_sandbox, writable=evidence,
                      overlays=overlays)
    if run.overfilled:
        return {"status": "output flood", "cells": [], "stopped_at": None,
                "message": f"it wrote more than {limits.writable_bytes:,} bytes (or {sandbox.MAX_WRITABLE_FILES:,} "
                           "files) into the evidence folder"}
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


def grade(path, exercise: Exercise | None = None, timeout: float = 600, env: dict | None = None,
          use_sandbox: bool = True, slot: int = 0, limits: sandbox.Limits | None = None) -> Submission:
    """Grade one notebook (see the module's docstring). ``env`` adds environment variables for
    the kernel, e.g. ``{"FTCOURSE_PROFILE": "smoke"}``; ``timeout`` limits the notebook and the
    grader's cells together; ``slot`` tells concurrent gradings apart (their sandbox uid)."""
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
            _grade(nb, exercise, result, timeout, env, use_sandbox, slot, limits)
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


def _remove_evidence(folder: str, result: Submission) -> None:
    """Remove a submission's evidence folder, whatever it left there (``sandbox.remove_tree``: deep trees,
    folders without permissions); one that cannot be removed is a note in its row, not a lost grade."""
    try:
        sandbox.remove_tree(folder)
    except OSError as error:
        result.notes.append(f"its evidence folder {folder} could not be removed ({clean(error, 200)}): "
                            "remove it by hand")


def _grade(nb, exercise: Exercise, result: Submission, timeout: float, env: dict, use_sandbox: bool, slot: int,
           limits: sandbox.Limits) -> None:
    course = nbformat.read(exercise.course_path, as_version=4)
    if not is_exercise(nb, course):
        result.status = "wrong exercise"
        result.failing_cell = CellError(-1, "", "WrongExercise",
                                        f"fewer than half of the given cells of {exercise.name} are in this notebook")
        result.cell_errors.append(result.failing_cell)
        return
    result.answers = collect_answers(nb, course, exercise.reviewed_code)
    ready([exercise], env)  # what the verdicts need, before the submission runs for nothing
    # 1. One sandboxed kernel: the notebook as submitted, every cell even after an error, then the
    #    grader's cells, which call the student's functions and write what they made into our folder.
    profile = grading_profile(env)
    graded, roles = graded_notebook(nb, course, exercise.records_for(profile))
    secret = secrets.token_hex(16)
    evidence = tempfile.mkdtemp(prefix="ftcourse-evidence-")
    try:
        report = _execute(graded, timeout, env, slot, use_sandbox, limits, secret, evidence, exercise.withheld,
                          sandbox_data_folder(exercise, profile) if use_sandbox else None)
        errors = {entry["index"]: entry["error"] for entry in report["cells"]}
        for index, (role, _) in enumerate(roles):
            if role == "submission" and errors.get(index):
                result.cell_errors.append(CellError(index, _first_line(nb.cells[index].source), *errors[index]))
        stopped = report["stopped_at"]
        if report["status"] != "ok":
            result.status = report["status"]
            where = ((stopped, _first_line(nb.cells[stopped].source)) if stopped is not None and stopped < len(nb.cells)
                     else (-1, "the grader's cells, calling the submission's functions"))
            result.failing_cell = CellError(*where, {"timeout": "Timeout", "output flood": "OutputFlood"}.get(
                report["status"], "DeadKernelError"), report["message"])
            result.cell_errors.append(result.failing_cell)
            if stopped is None or stopped < len(nb.cells):
                return  # stopped in the notebook itself: nothing of the grader's ran
        elif result.cell_errors:
            result.status = "errors"
            result.failing_cell = result.cell_errors[0]
        not_run = f"not run: the kernel {report['status']} ({report['message']})" if report["status"] != "ok" else ""
        raised, reviewed = {}, {}
        for index, (role, entry) in enumerate(roles):
            if role == "guard" and errors.get(index):
                result.notes.append(f"the grader's guard could not be installed: {_said(errors[index], None)[:300]}")
            if role != "record":
                continue
            error = errors.get(index) if index in errors else ["NotRun", not_run or "not run"]
            verdict = _verdict(error, secret)
            if verdict is not None:
                reviewed.setdefault(entry.part, verdict)
            elif error:
                raised.setdefault(entry.part, _said(error, None))
        # 2. The verdicts, computed here, in the grader's process, from that data alone.
        for part, passed, message, hidden in exercise.judge(Path(evidence), profile):
            if passed is None:  # a verdict that cannot decide: evidence that contradicts itself
                result.checks.append(PartResult(part, False, clean(message, 2 * MAX_MESSAGE_CHARS), hidden,
                                                review=True))
                result.status = REVIEW
                continue
            if part in reviewed:
                result.checks.append(PartResult(part, False, _message(TAMPERED, reviewed[part], True), hidden,
                                                review=True))
                continue
            if not passed and part in raised:
                message = raised[part]
            result.checks.append(PartResult(part, passed, clean(message, 2 * MAX_MESSAGE_CHARS), hidden))
    finally:
        _remove_evidence(evidence, result)
    for part, (module, function, inside) in exercise.solved_by_import.items():
        if imports_of(nb, module, function, inside):
            for check in result.checks:
                if check.part == part and check.passed:
                    check.passed, check.review = False, True
                    check.message = (f"uses {module}.{function}{f' in {inside}' if inside else ''}, the course's "
                                     "own helper for this part: for the instructor to decide whether that is an answer")
            reviewed.setdefault(part, "import")
    if report["status"] != "ok" and result.status == "ok":
        result.status = report["status"]
    if reviewed:
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


def threads_per_worker(env: dict | None, workers: int) -> dict:
    """``env`` with each sandboxed kernel's torch threads set to its share of the cores, unless the
    caller (or the grader's environment) already set them: two kernels of two threads each on two
    cores run each submission about five times slower than one thread each."""
    env = dict(env or {})
    if not any(name in env or name in os.environ for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")):
        share = str(max(1, len(os.sched_getaffinity(0)) // workers))
        env.update(OMP_NUM_THREADS=share, MKL_NUM_THREADS=share)
    return env


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
                           "e.g. submissions/alice/<exercise>.ipynb.")
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
    ready({chosen.name: chosen for _, _, chosen in todo}.values(), env)  # before any submission runs
    workers = max(1, min(workers or default_workers(), len(todo) or 1))
    env = threads_per_worker(env, workers)
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
    write_review(results, review_folder(gradebook))
    return csv_path, json_path


def review_folder(gradebook) -> Path:
    """Where the review pages of a gradebook go: ``<gradebook>-review/``."""
    gradebook = Path(gradebook)
    return gradebook.with_name(gradebook.name + "-review")


def _page_name(student: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", student)[:60]
    return f"{safe}-{hashlib.sha256(student.encode()).hexdigest()[:8]}.html"


def write_review(results: list[Submission], folder) -> Path:
    """One HTML page per student for the instructor: the verdicts, each written question with the
    student's answer, the student's own loop; and ``index.html`` linking them. Everything the student
    wrote is escaped: shown as text, never as markup, its control characters, ANSI escapes and bidirectional
    overrides as visible escapes (``visible``, ``clean``). The rubric is in the instructors' notes."""
    import html

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for result in results:
        name = _page_name(result.student or result.path)
        marks = result.marks()
        who = clean(result.student, 120) if result.student else _name(result)
        body = [f"<h1>{html.escape(who)}</h1>",
                f"<p>status: {html.escape(clean(result.status))}; "
                + ", ".join(f"{html.escape(p)}: <b>{m}</b>" for p, m in marks.items()) + "</p>"]
        failed = [c for c in result.checks if not c.passed]
        if failed:
            body.append("<ul>" + "".join(f"<li>{html.escape(c.part)}{' [REVIEW]' if c.review else ''}: "
                                         f"{html.escape(clean(c.message, 2 * MAX_MESSAGE_CHARS))}</li>" for c in failed)
                        + "</ul>")
        for entry in result.answers:
            body.append(f"<h2>{html.escape(visible(entry['question']))}</h2>")
            if entry.get("missing"):
                body.append(f"<p><i>{html.escape(clean(entry['missing']))}</i></p>")
            elif not entry["answer"]:
                body.append("<p><i>not answered</i></p>")
            else:
                tag = "pre" if entry.get("code") else "pre style='white-space: pre-wrap'"
                body.append(f"<{tag}>{html.escape(visible(entry['answer']))}</pre>")
        page = ("<!doctype html><html><head><meta charset='utf-8'><title>review</title></head><body>"
                + "\n".join(body) + "</body></html>\n")
        _replace(folder / name, lambda handle, page=page: handle.write(page))
        answered = sum(1 for e in result.answers if not e.get("code") and e["answer"])
        questions = sum(1 for e in result.answers if not e.get("code"))
        rows.append(f"<tr><td><a href='{name}'>{html.escape(who)}</a></td>"
                    f"<td>{html.escape(clean(result.status))}</td><td>{answered} of {questions}</td></tr>")
    index = ("<!doctype html><html><head><meta charset='utf-8'><title>answers to review</title></head><body>"
             "<h1>Answers to review</h1><p>The rubric is in the instructors' notes (book/instructors.md).</p>"
             "<table><tr><th>student</th><th>status</th><th>questions answered</th></tr>"
             + "".join(rows) + "</table></body></html>\n")
    _replace(folder / "index.html", lambda handle: handle.write(index))
    return folder


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
