"""Which code made a result: a digest of a module and every package module it can import.

Found statically (``ast``), so it costs milliseconds and needs nothing imported. The run store
(``experiments.store``) keys each run by the code that trains it; the notebook stamps
(``ftcourse.course.freshness``) record the code each notebook reaches.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from . import config

PACKAGE = "ftcourse"
_DIGITS = 16  # hex digits kept of each sha256: collisions are not the threat here, stale outputs are


def digest(*parts: bytes) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(len(part).to_bytes(8, "little"))
        hasher.update(part)
    return hasher.hexdigest()[:_DIGITS]


def folder_digest(folder: Path) -> str:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return digest(*(part for p in files for part in (p.relative_to(folder).as_posix().encode(), p.read_bytes())))


def module_file(name: str, root: Path) -> Path | None:
    """The file of the package module ``name`` (dotted) under ``root``, if it is one."""
    path = root.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def imported(tree: ast.AST, current: str | None, is_package: bool) -> set[str]:
    """Package modules an AST imports: ``import a.b``, ``from a import b`` (b may be a module),
    relative imports resolved against ``current``. Candidates only; the caller keeps real files."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if current is None:
                    continue
                parts = current.split(".")
                base = parts if is_package else parts[:-1]
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {name for name in found if name == PACKAGE or name.startswith(PACKAGE + ".")}


def parse_source(source: str) -> ast.AST:
    try:
        return ast.parse(source)
    except SyntaxError:  # IPython magics and shell lines: keep the lines Python reads
        kept = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            return ast.parse(kept)
        except SyntaxError:
            return ast.Module(body=[], type_ignores=[])  # the cell raises when run: nothing it imports


def modules_reached(cells: list[str], root: Path = config.REPO_ROOT) -> list[str]:
    """Every package module that code ``cells`` can import, directly or through the package's
    own imports, each with the packages above it (importing ``a.b`` runs ``a/__init__``)."""
    pending, seen = set(), set()
    for source in cells:
        pending |= imported(parse_source(source), None, False)
    while pending:
        name = pending.pop()
        file = module_file(name, root)
        if file is None or name in seen:
            continue
        seen.add(name)
        pending |= {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        pending |= imported(ast.parse(file.read_text()), name, file.name == "__init__.py")
    return sorted(seen)


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body and \
                isinstance(node.body[0], ast.Expr) and isinstance(getattr(node.body[0], "value", None), ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
    return tree


def source_digest(path: Path) -> str:
    """A digest of what a module's code does: its syntax tree without docstrings or comments,
    so that rewording a docstring does not make every result it touched stale."""
    return digest(ast.dump(_without_docstrings(ast.parse(path.read_text(encoding="utf-8")))).encode())


def code_digest(*modules: str, root: Path = config.REPO_ROOT) -> str:
    """One digest of ``modules`` (dotted names) and every package module they reach."""
    reached = modules_reached([f"import {m}" for m in modules], root)
    return digest(*(part for name in reached for part in (name.encode(), source_digest(module_file(name, root)).encode())))
