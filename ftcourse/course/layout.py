"""The package's module map, read from the modules' own docstrings: the one source that
``CONTRIBUTING.md``'s table and the packages' indexes are checked against.

``python -m ftcourse.course.layout`` prints the map as a Markdown table;
``python -m ftcourse.course.layout --check`` fails when ``CONTRIBUTING.md`` differs from it.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # ftcourse/
CONCEPTS = "ftcourse"
MACHINERY = "ftcourse.course"
#: Modules that exist for compatibility or as entry points, not as a concept of their own.
ALIASES = {"ftcourse.checks": "ftcourse.course.checks", "ftcourse.__main__": "ftcourse.course.cli"}
MAP_START, MAP_END = "<!-- module map: python -m ftcourse.course.layout -->", "<!-- end of module map -->"


@dataclass(frozen=True)
class Module:
    name: str  # dotted: ftcourse.heads
    path: Path
    summary: str  # the docstring's first sentence

    @property
    def floor(self) -> str:
        return MACHINERY if self.name.startswith(MACHINERY + ".") else CONCEPTS

    @property
    def short(self) -> str:
        return self.name.rsplit(".", 1)[1]


def first_sentence(doc: str | None) -> str:
    if not doc:
        return ""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def modules(package_dir: Path = PACKAGE_DIR) -> list[Module]:
    """Every module of the package but the ``__init__``\\ s and the aliases, concepts first."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        name = ".".join(parts)
        if parts[-1] == "__init__" or name in ALIASES:
            continue
        found.append(Module(name, path, first_sentence(ast.get_docstring(ast.parse(path.read_text())))))
    return sorted(found, key=lambda m: (m.floor != CONCEPTS, m.name))


def markdown_map(found: list[Module] | None = None) -> str:
    rows = ["| floor | module | what it is for |", "| --- | --- | --- |"]
    for module in found or modules():
        summary = module.summary.replace('``', '`').replace('|', '/')
        rows.append(f"| `{module.floor}` | `{module.short}` | {summary} |")
    return "\n".join(rows)


def documented_map(text: str) -> str | None:
    """The map between the markers in a document, or None if it has none."""
    if MAP_START not in text or MAP_END not in text:
        return None
    return text.split(MAP_START, 1)[1].split(MAP_END, 1)[0].strip()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ftcourse.course.layout", description=__doc__)
    parser.add_argument("--check", type=Path, nargs="?", const=PACKAGE_DIR.parent / "CONTRIBUTING.md",
                        help="fail when this document's module map differs (default CONTRIBUTING.md)")
    args = parser.parse_args(argv)
    generated = markdown_map()
    if args.check is None:
        print(generated)
        return 0
    if documented_map(args.check.read_text()) != generated:
        print(f"{args.check.name}'s module map is out of date. Fix: paste the output of "
              "`python -m ftcourse.course.layout` between its markers.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
