"""Run the user's entry in this process, as `python script.py`, `python -m mod` or `pytest` would."""

from __future__ import annotations

import ast
import os
import runpy
import sys
import types
from typing import Any

from gbfix.child.overlay import OverlayFinder


class EntryFailed(Exception):
    """The entry raised or exited non-zero; the message is one line."""


_SCRIPT: list[tuple[str, bytes]] = []  # (path, source) of the script run, for ``run_main_again``


def _run_script(path: str, args: list[str], overlay: OverlayFinder) -> None:
    path = os.path.abspath(path)
    source = overlay.source_of(path)
    if source is None:
        with open(path, "rb") as f:
            source = f.read()
    _SCRIPT[:] = [(path, source)]
    code = compile(source, path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = __builtins__  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    sys.argv = [path, *args]
    sys.path[0] = os.path.dirname(path)
    exec(code, main.__dict__)


def _run_module(name: str, args: list[str]) -> None:
    sys.argv = [name, *args]
    sys.path[0] = os.getcwd()
    runpy.run_module(name, run_name="__main__", alter_sys=True)


class _GbfixPlugin:
    """pytest plugin: keep the overlay ahead of pytest's assertion-rewriting
    importer, and remember the first failure (the terminal report is off)."""

    def __init__(self, finder: OverlayFinder) -> None:
        self.finder = finder
        self.failure: str | None = None

    def pytest_configure(self, config: Any) -> None:
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        sys.meta_path.insert(0, self.finder)

    def _note(self, report: Any) -> None:
        if report.failed and self.failure is None:
            crash = getattr(report.longrepr, "reprcrash", None)
            why = crash.message if crash else str(report.longrepr).strip().splitlines()[-1:]
            self.failure = f"{report.nodeid or 'collection'}: {why}".splitlines()[0]

    pytest_runtest_logreport = _note
    pytest_collectreport = _note


def _run_pytest(args: list[str], overlay: OverlayFinder) -> None:
    import pytest

    sys.argv = ["pytest", *args]
    sys.path[0] = os.getcwd()
    # -s: test output reaches stdout, where it is compared between runs;
    # no terminal reporter and no cache: their output and files vary run to run.
    plugin = _GbfixPlugin(overlay)
    rc = pytest.main(["-s", "-p", "no:terminal", "-p", "no:cacheprovider", *args], plugins=[plugin])
    if int(rc) not in (0, 5):  # 5: no tests collected
        raise EntryFailed(f"pytest exited with code {int(rc)}" + (f": {plugin.failure}" if plugin.failure else ""))


def run(entry: dict[str, Any], overlay: OverlayFinder) -> None:
    kind, target, args = entry["kind"], entry["target"], list(entry.get("args", []))
    try:
        if kind == "script":
            _run_script(target, args, overlay)
        elif kind == "module":
            _run_module(target, args)
        elif kind == "pytest":
            _run_pytest(args, overlay)
        else:
            raise EntryFailed(f"unknown entry kind {kind!r}")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise EntryFailed(f"the entry called sys.exit({e.code!r})") from None


def run_main_again() -> None:
    """Run the script's ``if __name__ == "__main__":`` block again, in the module it ran in:
    its classes and functions are the same objects, so their compiled code is warm (running
    the whole script again would define new classes, which compile anew)."""
    if not _SCRIPT:
        raise EntryFailed("the entry is not a script: there is no main block to run again")
    path, source = _SCRIPT[0]
    tree = ast.parse(source, path)
    block = next((s for s in tree.body if isinstance(s, ast.If) and _is_main_test(s.test)), None)
    if block is None:
        raise EntryFailed('the entry script has no `if __name__ == "__main__":` block to run again')
    code = compile(ast.Module(body=block.body, type_ignores=[]), path, "exec", dont_inherit=True)
    exec(code, sys.modules["__main__"].__dict__)


def _is_main_test(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name) and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "__main__"
    )
