"""Student versions of the exercise notebooks, generated from the solved ones.

One source of truth per exercise: ``solutions/NN_exercise_x.ipynb`` is the solved
notebook, with each answer between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` (as
nbgrader marks them). The student version ``notebooks/NN_exercise_x.ipynb`` is made from
it, never edited by hand:

- each solution region becomes ``# YOUR CODE HERE`` and ``raise NotImplementedError()``
  (indented like the region, so a stub inside a function body stays valid Python);
  in a markdown cell it becomes ``YOUR ANSWER HERE``;
- everything else (instructions, the check cells) is kept as it is;
- every cell that raises (a stub) or depends on one (uses a name a stub cell defines,
  directly or through other such cells) is tagged ``raises-exception``, so nbval and the
  course build accept the student's copy as it is handed out;
- the student version has no outputs (the solution's outputs would give answers away).

``python -m ftcourse.course.exercise generate`` regenerates every student version;
``python -m ftcourse.course.exercise check`` says which ones are stale. Generating never
overwrites a student's work: a student copy whose cells hold anything that neither the
new student version nor the committed one has (a filled-in stub, an added cell) is left
alone unless ``--force`` is given.
"""

from __future__ import annotations

import argparse
import ast
import copy
import subprocess
import sys
from pathlib import Path

import nbformat

from ..config import REPO_ROOT
from .freshness import STAMP_KEY
from .notebooks import clean

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
MARKDOWN_STUB = "YOUR ANSWER HERE"
RAISES_TAG = "raises-exception"
SOLUTIONS_DIR = REPO_ROOT / "solutions"
STUDENT_DIR = REPO_ROOT / "notebooks"
EXERCISE_GLOB = "*exercise*.ipynb"


class ExerciseError(ValueError):
    """A solution notebook is malformed, or generating would overwrite a student's work."""


# ----------------------------------------------------------------------------- regions


def solution_regions(source: str) -> list[str]:
    """The text of each ``### BEGIN SOLUTION`` .. ``### END SOLUTION`` region (markers excluded)."""
    regions, current = [], None
    for line in source.splitlines():
        if line.strip() == BEGIN:
            current = []
        elif line.strip() == END:
            if current is not None:
                regions.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return regions


def replace_regions(source: str, markdown: bool = False, where: str = "a cell") -> tuple[str, int]:
    """``source`` with each solution region replaced by the stub; returns (text, regions)."""
    out, inside, indent, count = [], False, "", 0
    for number, line in enumerate(source.splitlines(), start=1):
        marker = line.strip()
        if marker == BEGIN:
            if inside:
                raise ExerciseError(f"{where}, line {number}: {BEGIN} inside another region. Fix: close it with {END}.")
            inside, indent, count = True, line[: len(line) - len(line.lstrip())], count + 1
            out += [MARKDOWN_STUB] if markdown else [indent + stub for stub in CODE_STUB]
        elif marker == END:
            if not inside:
                raise ExerciseError(f"{where}, line {number}: {END} without {BEGIN}. Fix: add the opening marker.")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ExerciseError(f"{where}: {BEGIN} is never closed. Fix: add {END} after the answer.")
    return "\n".join(out), count


# ----------------------------------------------------------------------------- dependencies


def parse_cell(source: str) -> ast.Module | None:
    """The cell as Python, IPython magics and shell lines blanked; None if it does not parse."""
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _names(tree: ast.Module) -> tuple[set, set]:
    """(names the cell reads, names the cell binds or mutates at top level)."""
    used, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        # x.append(...), x[k] = ..., x.attr = ...: the object x changes, so x depends on this cell.
        targets = []
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
            targets = [node.value.func.value]
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            while isinstance(target, (ast.Attribute, ast.Subscript)):
                target = target.value
            if isinstance(target, ast.Name):
                bound.add(target.id)
    return used, bound


def dependent_cells(sources: list[str], stub_cells: set[int]) -> set[int]:
    """Indices of the cells that may raise because of a stub: the stub cells, and every later
    cell that reads a name bound by such a cell. A cell that does not parse counts as dependent."""
    tainted, dependent = set(), set()
    for index, source in enumerate(sources):
        tree = parse_cell(source)
        if tree is None:
            if dependent or index in stub_cells:
                dependent.add(index)
            continue
        used, bound = _names(tree)
        if index in stub_cells or used & tainted:
            dependent.add(index)
            tainted |= bound
    return dependent


# ----------------------------------------------------------------------------- generating


def student_version(solution: nbformat.NotebookNode, name: str = "the solution") -> nbformat.NotebookNode:
    """The student's notebook made from a solved one (see the module's docstring)."""
    nb = copy.deepcopy(solution)
    nb.metadata.pop(STAMP_KEY, None)  # the solution's stamp: the student copy gets its own when executed
    stub_cells, code_indices = set(), []
    for index, cell in enumerate(nb.cells):
        where = f"{name}, cell {index}"
        source, regions = replace_regions(cell.source, markdown=cell.cell_type == "markdown", where=where)
        cell.source = source
        tags = [t for t in cell.metadata.get("tags", []) if t != RAISES_TAG]
        cell.metadata = nbformat.NotebookNode({"tags": tags} if tags else {})
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            code_indices.append(index)
            if regions:
                stub_cells.add(index)
    if not stub_cells:
        raise ExerciseError(f"{name} has no code cell with a {BEGIN} / {END} region: nothing for the student to do.")
    sources = [nb.cells[i].source for i in code_indices]
    for position in dependent_cells(sources, {code_indices.index(i) for i in stub_cells}):
        cell = nb.cells[code_indices[position]]
        cell.metadata.setdefault("tags", []).append(RAISES_TAG)
    return clean(nb)


def student_path(solution_path: Path) -> Path:
    return STUDENT_DIR / Path(solution_path).name


def solution_notebooks() -> list[Path]:
    return sorted(SOLUTIONS_DIR.glob(EXERCISE_GLOB))


def content(nb: nbformat.NotebookNode) -> list[tuple]:
    """What a notebook says, not what running it printed: (type, source, tags) per cell."""
    return [(c.cell_type, c.source, tuple(c.metadata.get("tags", []))) for c in nb.cells]


def _committed(path: Path) -> nbformat.NotebookNode | None:
    """The version of ``path`` in git's HEAD, or None (not in git, not committed, no git)."""
    try:
        relative = Path(path).resolve().relative_to(REPO_ROOT)
        text = subprocess.run(["git", "show", f"HEAD:{relative.as_posix()}"], cwd=REPO_ROOT,
                              capture_output=True, text=True, check=True).stdout
        return nbformat.reads(text, as_version=4)
    except (ValueError, OSError, subprocess.CalledProcessError, nbformat.reader.NotJSONError):
        return None


def student_work(existing: nbformat.NotebookNode, generated: nbformat.NotebookNode,
                 committed: nbformat.NotebookNode | None = None) -> list[str]:
    """Cells of ``existing`` that hold something neither ``generated`` nor ``committed`` has:
    a student's answers or added cells. Empty when regenerating loses nothing."""
    known = {c.source for c in generated.cells} | ({c.source for c in committed.cells} if committed else set())
    found = []
    for index, cell in enumerate(existing.cells):
        if cell.source not in known:
            first = next((line for line in cell.source.splitlines() if line.strip()), "")
            found.append(f"cell {index} ({cell.cell_type}): {first[:60]!r}")
    return found


def generate(solution_path: Path, target: Path | None = None, force: bool = False) -> Path:
    """Write the student version of ``solution_path`` (to ``notebooks/`` by default).

    Refuses (``ExerciseError``) when the existing target holds a student's work, unless ``force``.
    """
    solution_path = Path(solution_path)
    target = Path(target) if target else student_path(solution_path)
    solution = nbformat.read(solution_path, as_version=4)
    generated = student_version(solution, name=solution_path.name)
    if target.exists() and not force:
        try:
            existing = nbformat.read(target, as_version=4)
        except Exception as error:  # unreadable: still somebody's file
            raise ExerciseError(f"{target.name} exists and is not a readable notebook ({error}); "
                                "not overwriting it. Fix: move it away, or pass --force.") from None
        work = student_work(existing, generated, _committed(target))
        if work:
            raise ExerciseError(
                f"{target.name} holds cells that are not in the generated student version, nor in its "
                f"committed one: {'; '.join(work[:5])}{' ...' if len(work) > 5 else ''}. This looks like a "
                "student's work, so it was not overwritten. Fix: move the file away, or, if these are your "
                "own edits of the solution's text, rerun with --force.")
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(generated, target)
    return target


def stale(solution_path: Path, target: Path | None = None) -> bool:
    """True when the committed student version is not what the solution generates."""
    target = Path(target) if target else student_path(solution_path)
    if not target.exists():
        return True
    generated = student_version(nbformat.read(solution_path, as_version=4), name=Path(solution_path).name)
    return content(nbformat.read(target, as_version=4)) != content(generated)


def _relative(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else path.name


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ftcourse.course.exercise", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("generate", help="write the student version of each solved exercise")
    make.add_argument("solutions", nargs="*", type=Path, help="solved notebooks (default: solutions/*exercise*)")
    make.add_argument("--force", action="store_true", help="overwrite even a student copy that holds work")
    check = sub.add_parser("check", help="exit 1 if a student version differs from what its solution generates")
    check.add_argument("solutions", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = args.solutions or solution_notebooks()
    if not paths:
        print(f"No solved exercises found ({_relative(SOLUTIONS_DIR)}/{EXERCISE_GLOB}).")
        return 1
    status = 0
    for path in paths:
        try:
            if args.command == "generate":
                print(f"{_relative(path)} -> {_relative(generate(path, force=args.force))}")
            elif stale(path):
                print(f"{_relative(student_path(path))} is stale: run python -m ftcourse.course.exercise generate")
                status = 1
            else:
                print(f"{_relative(student_path(path))} is up to date")
        except ExerciseError as error:
            print(f"error: {error}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
