"""The package's architecture, enforced: concepts never import the machinery, no import
cycles (function-level imports included), and the indexes agree with the files."""

import ast
import re
from pathlib import Path

import ftcourse
import ftcourse.course
from ftcourse.course import layout

PACKAGE = layout.PACKAGE_DIR


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imports_of(name: str, path: Path, known) -> set[str]:
    """Every package module ``name`` imports, at any depth of its code (function-level too)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # from . import x / from ..config import y
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            submodules = {f"{target}.{alias.name}" for alias in node.names} & set(known)
            found |= submodules or ({target} & set(known))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
    found.discard(name)
    return found


GRAPH = {name: imports_of(name, path, module_names()) for name, path in module_names().items()}


def is_machinery(name: str) -> bool:
    return name == "ftcourse.course" or name.startswith("ftcourse.course.")


def test_the_import_graph_is_read():  # the test below can fail: the graph is not empty
    assert "ftcourse.course.grading" in GRAPH["ftcourse.course.cli"]
    assert "ftcourse.heads" in GRAPH["ftcourse.course.checks"]


def test_no_concept_imports_the_machinery():
    offenders = {name: sorted(filter(is_machinery, deps)) for name, deps in GRAPH.items()
                 if not is_machinery(name) and name not in layout.ALIASES}
    assert not {k: v for k, v in offenders.items() if v}, "a concept module imports ftcourse.course"


def test_the_aliases_point_where_they_say():
    for alias, target in layout.ALIASES.items():
        assert target in GRAPH[alias] or any(d.startswith(target.rsplit(".", 1)[0]) for d in GRAPH[alias])
    import ftcourse.checks
    import ftcourse.course.checks

    assert ftcourse.checks is ftcourse.course.checks  # the same module: a patch of one is a patch of both


def test_no_import_cycles():
    def cycle_from(start):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for dep in GRAPH.get(node, ()):
                if dep == start:
                    return path + [dep]
                if dep not in seen:
                    seen.add(dep)
                    stack.append((dep, path + [dep]))
        return None

    cycles = {name: cycle_from(name) for name in GRAPH if name not in ("ftcourse", "ftcourse.course")}
    assert not {k: v for k, v in cycles.items() if v}


def test_pretraining_is_a_tool_beside_the_package():
    assert not (PACKAGE / "pretrain.py").exists()
    assert (PACKAGE.parent / "tools" / "pretrain.py").is_file()


def named_modules(doc: str) -> set[str]:
    return set(re.findall(r"^- ``(\w+)``", doc, flags=re.M))


def test_the_package_indexes_name_every_module_once():
    concepts = {m.short for m in layout.modules() if m.floor == layout.CONCEPTS}
    machinery = {m.short for m in layout.modules() if m.floor == layout.MACHINERY}
    assert named_modules(ftcourse.__doc__) == concepts
    assert named_modules(ftcourse.course.__doc__) == machinery


def test_contributing_shows_the_generated_module_map():
    text = (PACKAGE.parent / "CONTRIBUTING.md").read_text()
    assert layout.documented_map(text) == layout.markdown_map()


def test_every_module_says_what_it_is_for():
    assert all(m.summary for m in layout.modules())


#: The concept code that may read the environment: the settings (where the files are), and
#: the profile's variables, read by setup() through config.profile_from_environment alone.
ENVIRONMENT_READERS = {"config.choose_profile", "config.profile_from_environment", "config._folder_setting",
                       "config.cache_dir", "session.setup", "session.quiet_libraries"}


def test_only_setup_reads_the_profile_from_the_environment():
    readers = set()
    for path in sorted((PACKAGE).glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and \
                        isinstance(node.value, ast.Name) and node.value.id == "os":
                    readers.add(f"{path.stem}.{function.name}")
    assert readers <= ENVIRONMENT_READERS, f"concept code reading os.environ: {sorted(readers - ENVIRONMENT_READERS)}"
    assert "session.setup" in readers or "config.profile_from_environment" in readers
