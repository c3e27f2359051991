"""Whether a committed notebook's outputs come from the current code: each executed notebook is
stamped with a digest of everything its outputs depend on, and a stale stamp names what changed.

CI executes every notebook only at small profiles (``smoke`` and ``paper-smoke``), which prove that
no cell raises but not that the committed figures are today's. The stamp closes that gap: the
builder (``ftcourse.course.notebooks.execute``) records, in the notebook's metadata, a digest of

- ``notebook``: its code cells' sources (markdown does not change an output);
- ``code:<module>``: every module of the package that its code can import, followed through the
  package's own imports (found statically, so a module it never reaches does not make it stale),
  each digested without its docstrings and comments (``provenance.source_digest``): rewording
  them changes no output;
- ``model:ftcourse-bert-mini``: the course's committed raw encoder;
- ``pins``: ``constraints.txt``, the exact library versions of the course's builds;
- ``profile``: every field of the profile it ran under (the committed notebooks: ``offline``);
- ``data``: the benchmark files under ``FTCOURSE_DATA`` (``hub`` when the data came from the hub).

``tests/test_freshness.py`` recomputes the digest of every committed notebook and fails on a
difference, naming the notebook, what changed and the command that re-executes it.
"""

from __future__ import annotations

from pathlib import Path

from .. import config
from ..provenance import modules_reached
from ..provenance import digest as _digest, folder_digest as _folder_digest, module_file as _module_file, source_digest

STAMP_KEY = "ftcourse"
#: The profile the committed notebooks are executed under.
COMMITTED_PROFILE = config.DEFAULT_PROFILE


def code_cells(nb) -> list[str]:
    """The notebook's code cells' sources, in order: what its outputs are computed from."""
    return [cell.source for cell in nb.cells if cell.cell_type == "code"]


def inputs(nb, profile: "config.Profile | str | None" = None, data: Path | None | str = "setting",
           root: Path = config.REPO_ROOT) -> dict[str, str]:
    """``{input: digest}`` for notebook ``nb``: see the module's docstring for each input.

    ``profile`` defaults to the one the environment picks (as the notebook's ``setup()`` does);
    ``data`` to ``FTCOURSE_DATA`` (``None``: the hub)."""
    if profile is None:
        profile = config.profile_from_environment()[0]
    profile = config.get_profile(profile)
    data = config.data_dir() if data == "setting" else (Path(data) if data else None)
    cells = code_cells(nb)
    found = {"notebook": _digest(*(cell.encode() for cell in cells))}
    for module in modules_reached(cells, root):
        found[f"code:{module}"] = source_digest(_module_file(module, root))
    encoder = root / "data" / "ftcourse-bert-mini"
    if encoder.is_dir():
        found["model:ftcourse-bert-mini"] = _folder_digest(encoder)
    if (root / "constraints.txt").is_file():
        found["pins"] = _digest((root / "constraints.txt").read_bytes())
    found["profile"] = _digest(repr(profile).encode())
    found["data"] = _folder_digest(data) if data is not None else "hub"
    return found


def stamp(nb, profile=None, data="setting", root: Path = config.REPO_ROOT) -> dict:
    """What the builder writes into an executed notebook's metadata, under ``STAMP_KEY``."""
    profile = config.get_profile(profile) if profile is not None else config.profile_from_environment()[0]
    return {"profile": profile.name, "inputs": inputs(nb, profile, data, root)}


def _describe(key: str) -> str:
    kind, _, name = key.partition(":")
    return {"notebook": "its code cells", "code": f"the module {name}", "model": f"the committed encoder {name}",
            "pins": "constraints.txt (the pinned versions)", "profile": f"the {COMMITTED_PROFILE} profile's settings",
            "data": "the benchmark files (FTCOURSE_DATA)"}.get(kind, key)


def stale_reasons(nb, profile: str = COMMITTED_PROFILE, data="setting", root: Path = config.REPO_ROOT) -> list[str]:
    """Why ``nb``'s outputs may not come from the current code, as phrases; empty when fresh."""
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    if not any(cell.get("outputs") or cell.get("execution_count") is not None for cell in code):
        return []  # never executed (the student copy of the exercise): it shows no output to be stale
    recorded = nb.metadata.get(STAMP_KEY)
    if not recorded or "inputs" not in recorded:
        return ["it carries no stamp of what it was executed from"]
    reasons = []
    if recorded.get("profile") != config.get_profile(profile).name:
        reasons.append(f"it was executed under the {recorded.get('profile')!r} profile, not {profile!r}")
    now, then = inputs(nb, profile, data, root), recorded["inputs"]
    for key in sorted(set(now) | set(then)):
        if key not in then:
            reasons.append(f"it now reaches {_describe(key)}, which it did not when executed")
        elif key not in now:
            reasons.append(f"it no longer reaches {_describe(key)}")
        elif now[key] != then[key]:
            reasons.append(f"{_describe(key)} changed")
    return reasons


def reexecute_command(path: Path, root: Path = config.REPO_ROOT) -> str:
    shown = path.relative_to(root) if path.is_relative_to(root) else path
    return f"python -m ftcourse.course.notebooks execute {shown}"
