"""The order `make test` hands scopes to the workers: heaviest first, from measured seconds.

A scope is what one xdist worker runs as a unit (``--dist loadscope``): a test file, a test class
(the paper-smoke notebooks are a class each, so they spread over the workers) or a notebook under
nbval. ``data/suite_timings.json`` holds the seconds each took when last measured
(``make test RECORD_TIMINGS=1``); a scope never measured goes last.

``python tests/suite_order.py tests`` prints the test files, ``... notebooks`` the course notebooks.
It is also the pytest plugin that measures them (``-p tests.suite_order``, in pyproject's addopts):
``--record-timings PATH`` merges each scope's seconds into ``PATH``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMINGS = ROOT / "data" / "suite_timings.json"


def scope_of(nodeid: str) -> str:
    """``tests/test_a.py::TestB::test_c[x]`` -> ``tests/test_a.py::TestB``; a function -> its file."""
    parts = nodeid.split("::")
    if len(parts) > 2 and parts[1].startswith("Test"):
        return "::".join(parts[:2])
    return parts[0]


def read(path: Path = TIMINGS) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def record(path: Path, seconds: dict) -> None:
    """Merge ``{scope: seconds}`` into ``path``: a run of part of the suite keeps the rest."""
    merged = {**read(path), **{key: round(value, 1) for key, value in seconds.items()}}
    path.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")


def heaviest_first(names: list[str], timings: dict | None = None) -> list[str]:
    """``names`` (files or scopes) by their measured seconds, a file counting all its scopes;
    the unmeasured keep their order, after the rest."""
    timings = read() if timings is None else timings

    def seconds(name):
        found = [value for key, value in timings.items() if key == name or key.startswith(name + "::")]
        return sum(found) if found else None

    measured = {name: seconds(name) for name in names}
    return sorted(names, key=lambda name: (measured[name] is None, -(measured[name] or 0.0)))


def files(kind: str) -> list[str]:
    if kind == "tests":
        found = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob("test_*.py"))
    elif kind == "notebooks":
        from ftcourse.course.catalog import course_notebooks  # the one list of the course's notebooks

        found = [p.relative_to(ROOT).as_posix() for p in course_notebooks(ROOT)]
    else:
        raise SystemExit(f"usage: python tests/suite_order.py tests|notebooks (got {kind!r})")
    return heaviest_first(found)


# ----------------------------------------------------------------------------- the plugin
_scope_seconds: dict = {}


def pytest_addoption(parser):
    parser.addoption("--record-timings", metavar="PATH", default=None,
                     help="merge each scope's seconds (a test file, a test class, a notebook) into this JSON file")


def pytest_runtest_logreport(report):
    key = scope_of(report.nodeid)
    _scope_seconds[key] = _scope_seconds.get(key, 0.0) + report.duration


def pytest_sessionfinish(session):
    path = session.config.getoption("--record-timings")
    if path and not hasattr(session.config, "workerinput") and _scope_seconds:  # xdist's controller only
        record(Path(path), _scope_seconds)


if __name__ == "__main__":
    print("\n".join(files(sys.argv[1] if len(sys.argv) > 1 else "tests")))
