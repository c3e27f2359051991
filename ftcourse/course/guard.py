"""In the grader's checks kernel: run the grader's code around a submission's functions, and
detect a submission that changes what the checks see.

The grader (``ftcourse.course.grading``) installs a ``Guard`` after the course's trusted cells and
before the student's definitions. It records what the checks depend on: every ``ftcourse``
module and its functions' code, the ``sys.modules`` entries of the libraries the checks
use, ``importlib``, the builtins, ``torch.nn.Module``'s methods, the import hooks, the
trace hooks, and the names the course's cells bound (``checks``, ``profile``, the data...).
``Guard.run(code)`` executes grader code (which calls the student's functions) and then
compares: any difference raises ``SubmissionTampered`` naming it, and the grader sends the
submission to the instructor for review instead of passing it.

This is detection inside one process, not isolation: the sandbox (``ftcourse.course.sandbox``)
bounds what a submission can reach; the guard makes the common ways of faking a pass
(patching ``ftcourse.course.checks``, ``sys.modules``, ``importlib.reload``, rebinding ``checks``)
fail loudly.
"""

from __future__ import annotations

import builtins
import importlib
import sys
import types

#: Libraries whose module objects the checks use; replacing one in sys.modules is tampering.
WATCHED_MODULES = ("builtins", "importlib", "sys", "torch", "torch.nn", "transformers", "peft")


class SubmissionTampered(Exception):
    """The submission changed the grader's modules or names: for the instructor's review."""


def _callables(namespace: dict) -> dict:
    """name -> (object, its code object if a function) for the functions and classes of a namespace."""
    found = {}
    for name, value in list(namespace.items()):
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType)):
            found[name] = (value, getattr(value, "__code__", None))
    return found


class Guard:
    def __init__(self, namespace: dict, names=None):
        """``names``: the notebook's names to watch (the course's given ones); None: every public name."""
        self._namespace = namespace
        self._checks = sys.modules["ftcourse.course.checks"]
        # Names the course's cells bound; IPython's own (_, _i1, In, Out) change as cells run.
        self._names = {name: value for name, value in namespace.items()
                       if not name.startswith("_") and name not in ("In", "Out", "exit", "quit", "get_ipython")
                       and (names is None or name in names)}
        self._snapshot = self._take()
        self.tampered: list[str] = []

    def _take(self) -> dict:
        modules = {name: module for name, module in sys.modules.items()
                   if name == "ftcourse" or name.startswith("ftcourse.") or name in WATCHED_MODULES}
        import torch

        return {
            "modules": modules,
            "ftcourse": {name: _callables(vars(module)) for name, module in modules.items()
                         if name.startswith("ftcourse")},
            "importlib": _callables(vars(importlib)),
            "builtins": _callables(vars(builtins)),
            "torch.nn.Module": _callables(dict(vars(torch.nn.Module))),
            "guard": _callables(dict(vars(Guard))),
            "meta_path": list(sys.meta_path),
            "path_hooks": list(sys.path_hooks),
            "trace": (sys.gettrace(), sys.getprofile()),
        }

    def changes(self) -> list[str]:
        """What differs from the snapshot taken before any of the submission's code ran."""
        was, found = self._snapshot, []
        for name, module in was["modules"].items():
            if sys.modules.get(name) is not module:
                found.append(f"sys.modules[{name!r}] was replaced")
        for label, before, namespace in (
            [(f"{name}", functions, vars(was["modules"][name])) for name, functions in was["ftcourse"].items()]
            + [("importlib", was["importlib"], vars(importlib)), ("builtins", was["builtins"], vars(builtins)),
               ("torch.nn.Module", was["torch.nn.Module"], vars(was["modules"]["torch.nn"].Module)),
               ("the grader's guard", was["guard"], vars(Guard))]):
            for name, (value, code) in before.items():
                now = namespace.get(name)
                if now is not value:
                    found.append(f"{label}.{name} was replaced")
                elif code is not None and getattr(now, "__code__", None) is not code:
                    found.append(f"the code of {label}.{name} was replaced")
        if sys.meta_path != was["meta_path"] or sys.path_hooks != was["path_hooks"]:
            found.append("the import hooks (sys.meta_path / sys.path_hooks) were changed")
        if (sys.gettrace(), sys.getprofile()) != was["trace"]:
            found.append("a trace or profile function was installed")
        for name, value in self._names.items():
            if self._namespace.get(name, None) is not value:
                found.append(f"the notebook's name {name!r} was rebound")
        return found

    def run(self, code: str, protect: bool = True) -> None:
        """Execute the grader's ``code`` in the notebook's namespace, then raise
        ``SubmissionTampered`` if anything the checks rely on changed (even if ``code`` raised)."""
        if self.tampered:
            raise SubmissionTampered("not run: the submission tampered with the grader earlier ("
                                     + "; ".join(self.tampered[:3]) + ")")
        error = None
        try:
            exec(compile(code, "<grader>", "exec"), self._namespace)
        except BaseException as raised:  # noqa: BLE001 - the submission may raise anything; reported below
            error = raised
        found = self.changes()
        if found:
            self.tampered = found
            raise SubmissionTampered("the submission changed what the checks rely on: " + "; ".join(found[:5])
                                     + ". For the instructor's review.")
        if error is not None:
            raise error
