"""Which notebooks make the course, and in what order: the one list the builder, the site
and the tests read."""

from __future__ import annotations

from pathlib import Path

from ..config import REPO_ROOT

NOTEBOOK_FOLDERS = ("notebooks", "solutions")


def course_notebooks(root: Path = REPO_ROOT) -> list[Path]:
    """Every notebook of the course, lessons first, in order."""
    return [p for folder in NOTEBOOK_FOLDERS for p in sorted((root / folder).glob("*.ipynb"))]
