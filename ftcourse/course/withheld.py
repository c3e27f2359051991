"""The exercise build of the course package: the answers out of the sandbox's reach.

A submission runs arbitrary code, so no spelling of an import may reach the course's own answer to
a part: not ``import``, not ``importlib`` with a joined string, not ``exec`` of base64, not
``vars(module)[...]``. A static scan sees only the plain spellings. So the sandbox does not get the
course's package: it gets a copy in which the modules that implement a part are absent, bound over
the package's folder (``sandbox.command``'s ``overlays``), and the code that would solve the part
is simply not there to be reached.

An exercise declares what it withholds (``Exercise.withheld``), module by module:

- ``ABSENT``: the module's code is not in the copy; importing it raises an ``ImportError`` that
  says the exercise asks for this code to be written, whatever spelling reached it;
- ``CONSTANTS``: the module keeps its docstring and its top-level literal constants (a tuple of
  names, a number), and nothing else: a given cell or check may read ``REGIMES`` from it, and no
  function is left to call.

A module that imports an absent one at its top level could not be imported either, so it is
withheld too (``build`` says which). What the exercise's given cells need must stay: the tests
execute the student copy's given cells against the build.
"""

from __future__ import annotations

import ast
import atexit
import hashlib
import shutil
import tempfile
import threading
from pathlib import Path

from . import layout
from .. import provenance

ABSENT = "absent"
CONSTANTS = "constants"
_ABSENT_SOURCE = ('"""Withheld from the exercise\'s sandbox (ftcourse.course.withheld)."""\n'
                  'raise ImportError("{name} is not in the exercise\'s build of ftcourse: it holds the course\'s own '
                  'answer to a part, which the exercise asks you to write yourself. Fix: write it in your notebook '
                  'with the libraries the given cells import.")\n')
_HEADER = ("# The exercise build of ftcourse (ftcourse.course.withheld): this module keeps only its constants;\n"
           "# its functions are withheld from the sandbox, where a submission runs.\n")


def constants_only(source: str) -> str:
    """``source`` reduced to its docstring, its ``__future__`` imports and its top-level constants
    whose value is a literal (``ast.literal_eval`` reads it)."""
    kept = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and not kept:
            kept.append(node)  # the docstring
        elif isinstance(node, ast.ImportFrom) and node.module == "__future__":
            kept.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            try:
                ast.literal_eval(node.value)
            except ValueError:
                continue
            kept.append(node)
    return _HEADER + ast.unparse(ast.Module(body=kept, type_ignores=[])) + "\n"


def top_level_imports(name: str, tree: ast.Module, is_package: bool) -> set:
    """The package modules ``name`` imports when it is imported: its top-level imports only (not its
    functions', nor a ``TYPE_CHECKING`` block's), resolved as the notebook stamps resolve them."""
    return provenance.imported(ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))],
                                          type_ignores=[]), name, is_package)


def plan(withheld: dict, package: Path = layout.PACKAGE_DIR) -> dict:
    """``{module: ABSENT | CONSTANTS}``: what ``withheld`` declares, and every module that imports an
    absent one at its top level (absent too, since it could not be imported)."""
    for name, how in withheld.items():
        if how not in (ABSENT, CONSTANTS):
            raise ValueError(f"{name}: withheld as {how!r}; expected {ABSENT!r} or {CONSTANTS!r}.")
        if provenance.module_file(name, package.parent) is None:
            raise ValueError(f"{name} is withheld, but the package has no such module. Fix: name a module of "
                             f"{package.name} (for example ftcourse.lora).")
    sources, packages = {}, set()
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        sources[name] = ast.parse(path.read_text(encoding="utf-8"))
        if parts[-1] == "__init__":
            packages.add(name)
    result = dict(withheld)
    grew = True
    while grew:
        grew = False
        for name, tree in sources.items():
            if name in result:
                continue
            if top_level_imports(name, tree, name in packages) & {n for n, how in result.items() if how == ABSENT}:
                result[name] = ABSENT
                grew = True
    return result


def build(withheld: dict, into: Path, package: Path = layout.PACKAGE_DIR) -> Path:
    """A copy of ``package`` under ``into`` with ``plan(withheld)`` applied; returns the copy's folder."""
    target = Path(into) / package.name
    shutil.copytree(package, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name, how in plan(withheld, package).items():
        path = provenance.module_file(name, target.parent)
        if how == ABSENT:
            path.write_text(_ABSENT_SOURCE.format(name=name), encoding="utf-8")
        else:
            path.write_text(constants_only(path.read_text(encoding="utf-8")), encoding="utf-8")
    return target


_built: dict = {}
_lock = threading.Lock()


def cached_build(withheld: dict, package: Path = layout.PACKAGE_DIR) -> Path | None:
    """``build`` once per process and declaration (and package content): the folder to bind over the
    package inside the sandbox, or None when nothing is withheld. It lives in a temporary folder of
    the grader's, read-only to the sandbox."""
    if not withheld:
        return None
    digest = hashlib.sha256(repr(sorted(withheld.items())).encode())
    for path in sorted(package.rglob("*.py")):
        digest.update(path.read_bytes())
    key = digest.hexdigest()
    with _lock:
        if key not in _built or not _built[key].is_dir():
            folder = Path(tempfile.mkdtemp(prefix="ftcourse-exercise-package-"))
            folder.chmod(0o755)  # the sandbox's unprivileged uid reads it
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            _built[key] = build(withheld, folder, package)
        return _built[key]
