"""Grade submitted exercise notebooks: run each in a fresh kernel, then run the checks.

For each submission the grader

1. copies it into a temporary folder (the submission itself is only read, never written);
2. executes the copy top to bottom in a fresh Python kernel, every cell even after an
   error (a student may have solved part 3 and not part 2), within a time limit for the
   whole notebook;
3. runs the exercise's checks in that same kernel: the ones the student saw, and hidden
   ones (``Check.hidden``) that inspect what the student's code built and measured;
4. records, per exercise part, pass or fail with the check's message, and for the
   notebook its status (``ok``, ``errors`` with the first failing cell, ``timeout`` with
   the cell that ran out of time, ``unreadable``).

Nothing a submission does can stop the grader: every failure becomes a line in the report.
``ftcourse grade SUBMISSION.ipynb ...`` is the command (see ``ftcourse.cli``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

NOT_DONE = "not done: the stub still raises NotImplementedError"


@dataclass(frozen=True)
class Check:
    """One part of an exercise, graded by running ``code`` in the executed notebook's kernel:
    it passes when the code raises nothing."""

    part: str  # short name, a column of the table
    code: str
    hidden: bool = True  # not shown in the student's notebook


@dataclass(frozen=True)
class Exercise:
    name: str  # the notebook's file name without .ipynb, e.g. "05_exercise_bert_base"
    title: str
    checks: tuple


BERT_BASE = Exercise(
    name="05_exercise_bert_base",
    title="bert-base: frozen, fine-tuned, LoRA r=8",
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
#: Run in the kernel before the checks, so they find the course's modules whatever the student imported.
CHECK_PRELUDE = "from ftcourse import checks as checks"


class GradingError(ValueError):
    """The grader was asked for something it cannot do (an unknown exercise, no files)."""


@dataclass
class CellError:
    cell: int  # index among all the notebook's cells
    first_line: str
    ename: str
    evalue: str


@dataclass
class PartResult:
    part: str
    passed: bool
    message: str
    hidden: bool


@dataclass
class Submission:
    path: str
    exercise: str
    status: str = "ok"  # ok | errors | timeout | unreadable | kernel died | grader error
    seconds: float = 0.0
    sha256: str = ""
    failing_cell: CellError | None = None
    cell_errors: list = field(default_factory=list)
    checks: list = field(default_factory=list)

    def parts(self) -> dict:
        """Part -> passed (a part passes when all its checks pass)."""
        parts: dict = {}
        for check in self.checks:
            parts[check.part] = parts.get(check.part, True) and check.passed
        return parts


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


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _first_line(source: str) -> str:
    return next((line.strip() for line in source.splitlines() if line.strip()), "")[:80]


def _error_of(outputs) -> tuple[str, str] | None:
    for output in outputs:
        if output.get("output_type") == "error":
            return output.get("ename", "Error"), str(output.get("evalue", "")).strip()
    return None


def _message(ename: str, evalue: str) -> str:
    if ename == "NotImplementedError":
        return NOT_DONE
    if ename in ("CheckFailed", "AssertionError"):
        return evalue
    return f"{ename}: {evalue}"


def grade(path, exercise: Exercise | None = None, timeout: float = 600, check_timeout: float = 120,
          env: dict | None = None) -> Submission:
    """Grade one notebook (see the module's docstring). ``env`` adds environment variables
    for the kernel, e.g. ``{"FTCOURSE_PROFILE": "smoke"}``."""
    path = Path(path)
    exercise = exercise or find_exercise(path)
    result = Submission(path=str(path), exercise=exercise.name)
    start = time.perf_counter()
    try:
        result.sha256 = sha256(path)
        with tempfile.TemporaryDirectory(prefix="ftcourse-grade-") as folder:
            copy = Path(folder) / path.name
            shutil.copyfile(path, copy)
            try:
                nb = nbformat.read(copy, as_version=4)
            except Exception as error:  # not JSON, not a notebook: report, don't crash
                result.status = "unreadable"
                result.cell_errors.append(CellError(-1, "", type(error).__name__, str(error)[:300]))
            else:
                _run(nb, exercise, result, Path(folder), timeout, check_timeout, env)
    except Exception as error:  # the grader's own failure, still one row of the report
        result.status = "grader error"
        result.cell_errors.append(CellError(-1, "", type(error).__name__, str(error)[:300]))
    if not result.checks:  # nothing could be checked: every part fails, saying why
        reason = {"unreadable": "the notebook could not be read", "timeout": "the notebook timed out"}.get(
            result.status, result.status)
        if result.cell_errors and result.status not in ("timeout",):
            last = result.cell_errors[-1]
            reason += f" ({last.ename}: {last.evalue})"
        for check in exercise.checks:
            result.checks.append(PartResult(check.part, False, reason, check.hidden))
    result.seconds = time.perf_counter() - start
    return result


def _run(nb, exercise: Exercise, result: Submission, folder: Path, timeout: float, check_timeout: float,
         env: dict | None) -> None:
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    client = NotebookClient(nb, timeout=int(timeout), kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(folder)}})
    deadline = time.monotonic() + timeout
    kernel_env = {**os.environ, **(env or {})}
    current = None
    try:
        with client.setup_kernel(env=kernel_env):
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                current = (index, cell)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CellTimeoutError(f"the notebook's time limit ({timeout:.0f} s) ran out")
                client.timeout = max(1, int(remaining))
                client.execute_cell(cell, index)
                error = _error_of(cell.outputs)
                if error:
                    result.cell_errors.append(CellError(index, _first_line(cell.source), *error))
            current = None
            if result.cell_errors:
                result.status = "errors"
                result.failing_cell = result.cell_errors[0]
            client.timeout = int(check_timeout)
            # The checks run as extra cells of the (temporary copy of the) notebook, in its kernel.
            nb.cells.append(nbformat.v4.new_code_cell(CHECK_PRELUDE))
            client.execute_cell(nb.cells[-1], len(nb.cells) - 1)
            for check in exercise.checks:
                nb.cells.append(nbformat.v4.new_code_cell(check.code))
                cell = nb.cells[-1]
                try:
                    client.execute_cell(cell, len(nb.cells) - 1)
                except CellTimeoutError:
                    result.checks.append(PartResult(check.part, False, f"the check timed out ({check_timeout:.0f} s)",
                                                    check.hidden))
                    continue
                error = _error_of(cell.outputs)
                result.checks.append(PartResult(check.part, error is None, "" if error is None else _message(*error),
                                                check.hidden))
    except CellTimeoutError as error:
        result.status = "timeout"
        index, cell = current if current else (-1, None)
        result.failing_cell = CellError(index, _first_line(cell.source) if cell else "", "Timeout",
                                        f"no result within the notebook's limit of {timeout:.0f} s")
        result.cell_errors.append(result.failing_cell)
        result.checks = []
    except DeadKernelError as error:
        result.status = "kernel died"
        index, cell = current if current else (-1, None)
        result.failing_cell = CellError(index, _first_line(cell.source) if cell else "", "DeadKernelError", str(error)[:300])
        result.cell_errors.append(result.failing_cell)
        result.checks = []


# ----------------------------------------------------------------------------- reporting


def _name(result: Submission) -> str:
    """The submission's folder and file name: enough to tell submissions apart, no machine path."""
    path = Path(result.path)
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def table(results: list[Submission]) -> str:
    """One row per submission: its status, then PASS / FAIL per exercise part."""
    parts = list(dict.fromkeys(p for r in results for p in r.parts()))
    name_width = max([len("submission")] + [len(_name(r)) for r in results])
    status_width = max([len("status")] + [len(r.status) for r in results])
    header = f"{'submission':<{name_width}}  {'status':<{status_width}}  " + "  ".join(
        f"{p:<9}" for p in parts) + "  passed"
    lines = [header, "-" * len(header)]
    for r in results:
        marks = r.parts()
        cells = "  ".join(f"{('PASS' if marks.get(p) else 'FAIL') if p in marks else '-':<9}" for p in parts)
        lines.append(f"{_name(r):<{name_width}}  {r.status:<{status_width}}  {cells}  "
                     f"{sum(marks.values())}/{len(marks)}")
    return "\n".join(lines)


def details(result: Submission) -> str:
    """Why things failed, for one submission: the first failing cell and each failed check."""
    lines = [f"{_name(result)}: {result.status}, {result.seconds:.0f} s"]
    if result.failing_cell:
        cell = result.failing_cell
        lines.append(f"  first failing cell: {cell.cell} `{cell.first_line}` -> {_message(cell.ename, cell.evalue)}")
    for check in result.checks:
        if not check.passed:
            lines.append(f"  {check.part}{' (hidden)' if check.hidden else ''}: {check.message}")
    return "\n".join(lines)


def write_report(results: list[Submission], path) -> Path:
    """The JSON report: one object per submission, with every check and cell error."""
    path = Path(path)
    report = {
        "submissions": [
            {**asdict(r), "parts": r.parts(), "passed": sum(r.parts().values()), "total": len(r.parts())}
            for r in results
        ]
    }
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return path
