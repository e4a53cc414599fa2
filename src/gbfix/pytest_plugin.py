"""pytest --gbfix: the graph breaks of the compiled code a test suite runs.

Registered as the ``gbfix`` pytest11 entry point. Without ``--gbfix`` (or
``--gbfix-baseline``) it only adds its options: no torch import, no patching.
With it, the test process gets what gbfix's child process installs (``gbfix.child``):
Dynamo's break reporting hooked (``hooks``) and, unless ``--gbfix-backend own``,
``torch.compile`` patched to the cheap eager backend with ``fullgraph=False``
(``compile_patch``), before the first conftest is imported. Each break is attributed
to the test during which Dynamo compiled it (a function compiled once and called
by ten tests breaks in the first of them).

Under pytest-xdist every worker records its own breaks and hands them to the
controller in ``workeroutput``; the controller merges them in
``pytest_testnodedown`` and reports once. ``--gbfix-baseline FILE`` compares the
break sites with a baseline in ``gbfix check``'s format (``gbfix.baseline``) and fails
the session on breaks it does not list.

As for ``gbfix check``, ``select`` / ``ignore`` of ``[tool.gbfix]`` (in the pyproject.toml
nearest the rootdir) and ``# gbfix: ignore`` comments at a site leave a break out of the
report and the baseline (``gbfix.config``, ``gbfix.suppress``); suppressed sites are counted.
"""

from __future__ import annotations

import importlib.util
import linecache
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

_GBFIX_DIR = os.path.dirname(os.path.realpath(__file__)) + os.sep
_KEY = "gbfix"  # in xdist's workeroutput
_installed: dict[str, Any] = {}  # what _install put in place, once per process


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gbfix", "torch.compile graph breaks (gbfix)")
    group.addoption("--gbfix", action="store_true", default=False, help="Record the graph breaks of the compiled code the tests run, and report them per test.")
    group.addoption(
        "--gbfix-backend", choices=("eager", "own"), default="eager",
        help="eager (default): compile with the eager backend, as gbfix detects; own: keep the tests' own torch.compile settings.",
    )
    group.addoption("--gbfix-baseline", metavar="FILE", default=None, help="Fail the session on graph breaks not in this baseline (gbfix check's format); implies --gbfix.")
    group.addoption("--gbfix-update-baseline", action="store_true", default=False, help="Write the breaks found to --gbfix-baseline FILE instead of failing.")


def _active(opts: Any) -> bool:
    return bool(getattr(opts, "gbfix", False) or getattr(opts, "gbfix_baseline", None) or getattr(opts, "gbfix_update_baseline", False))


def _xdist_controller_early(opts: Any) -> bool:
    """Whether this process will hand the tests to xdist workers (decided before xdist configures)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return False
    return bool(getattr(opts, "numprocesses", None) or getattr(opts, "tx", None))


def _install(backend: str) -> None:
    """Hook Dynamo's break reporting and, for the eager backend, patch torch.compile (once)."""
    if _installed:
        return
    if importlib.util.find_spec("torch") is None:
        raise pytest.UsageError("--gbfix needs torch in the test environment (pip install torch)")
    from gbfix.child import hooks
    from gbfix.child.compile_patch import CompileRecorder

    class TestBreaks(hooks.BreakRecorder):
        """The child's recorder, deduplicating per test and tagging each break with its test."""

        test = ""  # the test running now; "" during collection

        def __init__(self) -> None:
            super().__init__()
            self._per_test: dict[str, set] = {}

        def add(self, record: dict[str, Any]) -> None:
            self._seen = self._per_test.setdefault(self.test, set())
            n = len(self.breaks)
            super().add(record)
            if len(self.breaks) > n:
                self.breaks[-1]["test"] = self.test

    class EagerCompile(CompileRecorder):
        """The child's compile patch, without recording outputs: the compiled object is returned as is."""

        def _wrap(self, compiled, name):
            return compiled

    recorder = TestBreaks()
    hooks.install(recorder)
    from gbfix.child import recompiles

    class TestRecompiles(recompiles.RecompileRecorder):
        """The child's recompile recorder, tagging each recompile with the test that ran it."""

        def add(self, cache_entries, frame, reasons) -> None:
            n = len(self.recompiles)
            super().add(cache_entries, frame, reasons)
            if len(self.recompiles) > n:
                self.recompiles[-1]["test"] = recorder.test

    recompiled = TestRecompiles()
    recompiles.install(recompiled)
    if backend == "eager":
        EagerCompile("eager", None).install()
    _installed.update(recorder=recorder, recompiles=recompiled, backend=backend)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    # Before conftests import the user's modules, whose @torch.compile must see the patch.
    opts = early_config.known_args_namespace
    if getattr(opts, "gbfix_update_baseline", False) and not getattr(opts, "gbfix_baseline", None):
        raise pytest.UsageError("--gbfix-update-baseline needs --gbfix-baseline FILE")
    if _active(opts) and not _xdist_controller_early(opts):
        _install(opts.gbfix_backend)


@pytest.hookimpl(trylast=True)  # after xdist registered its controller plugin ("dsession")
def pytest_configure(config: pytest.Config) -> None:
    if not _active(config.option):
        return
    worker = hasattr(config, "workerinput")
    controller = not worker and config.pluginmanager.getplugin("dsession") is not None
    if config.option.gbfix_update_baseline and not config.option.gbfix_baseline:
        raise pytest.UsageError("--gbfix-update-baseline needs --gbfix-baseline FILE")
    if not controller:
        _install(config.option.gbfix_backend)
    config.pluginmanager.register(_Session(config, worker), "gbfix-session")


def _in_project(file: str, root: Path) -> bool:
    """A file of the project under test: below the rootdir, not in a virtualenv, hidden folder or gbfix."""
    real = os.path.realpath(file)
    if not os.path.isfile(real) or real.startswith(_GBFIX_DIR):
        return False
    rel = os.path.relpath(real, root)
    if rel.startswith(".."):
        return False
    folders = Path(rel).parts[:-1]
    return not any(p in ("site-packages", "dist-packages") or p.startswith(".") for p in folders)


def _char_col(file: str, line: int, byte_col: int | None) -> int | None:
    """Dynamo's 0-based byte column -> a 1-based character column."""
    if byte_col is None:
        return None
    from gbfix.sources import char_column

    return char_column(linecache.getline(file, line), byte_col) + 1


def _locate(record: dict[str, Any], root: Path) -> dict[str, Any]:
    """A recorded break, reduced to what the report needs: its site in the project (or its leaf)."""
    from gbfix import baseline as bl
    from gbfix.records import Break

    brk = Break.from_json(record)
    frame = next((f for f in reversed(brk.stack) if _in_project(f.file, root)), None)
    inside = frame is not None
    frame = frame or brk.leaf
    file = os.path.realpath(frame.file) if frame else "?"
    line = frame.line if frame else 0
    return {
        "test": record.get("test", ""),
        "code": brk.root.code or brk.root.gb_type,  # the root cause, as Site.code
        "type": brk.root.gb_type,
        "file": file,
        "line": line,
        "col": _char_col(file, line, frame.col) if frame else None,
        "function": bl.enclosing(file, line) if inside else (frame.name if frame else "?"),
        "inside": inside,
    }


def _locate_recompile(record: dict[str, Any], root: Path) -> dict[str, Any]:
    """A recorded recompile as a break record: its RC code at the line that created the failed
    guard (else the call of the compiled frame, else its def), as ``gbfix.recompiles`` places it."""
    from gbfix import baseline as bl
    from gbfix import rccodes
    from gbfix.records import Frame, Recompile

    rc = Recompile.from_json(record)
    guard = rc.guards[0] if rc.guards else None
    code = rccodes.LIMIT if rc.limit else (rccodes.cause(guard).code if guard else "RC009")
    stacks = () if rc.limit else ((guard.stack if guard else ()), rc.stack)  # RC100: at the def
    frame = next((f for stack in stacks for f in reversed(stack) if _in_project(f.file, root)), None)
    frame = frame or Frame(rc.file, rc.line, None, None, rc.function)
    inside = _in_project(frame.file, root)
    file = os.path.realpath(frame.file)
    what = rccodes.CODES[code][0] + (f": `{guard.text}`" if guard else "")
    return {
        "test": record.get("test", ""),
        "code": code,
        "type": f"recompile of {rc.function}, {what}" if code != rccodes.LIMIT else f"{rc.function} hit {rc.limit}, runs eagerly",
        "file": file,
        "line": frame.line,
        "col": _char_col(file, frame.line, frame.col) if frame.col is not None else _first_col(file, frame.line),
        "function": bl.enclosing(file, frame.line) if inside else frame.name,
        "inside": inside,
    }


def _first_col(file: str, line: int) -> int | None:
    """The 1-based column of the line's first non-blank (a def, where Dynamo gives no column)."""
    text = linecache.getline(file, line)
    return len(text) - len(text.lstrip()) + 1 if text.strip() else None


class _Session:
    def __init__(self, config: pytest.Config, worker: bool) -> None:
        self.config = config
        self.worker = worker
        self.root = Path(config.rootpath)
        self.start = len(_installed["recorder"].breaks) if _installed else 0
        self.start_rc = len(_installed["recompiles"].recompiles) if _installed else 0
        self.records: list[dict[str, Any]] = []  # located breaks: this process's, or the workers'
        self.workers = 0
        self.lines: list[str] = []  # the verdict lines of the terminal summary
        self.baseline_path = None
        self.known = None
        self.selection = None  # select / ignore of [tool.gbfix] (the controller's; workers report everything)
        self.suppressed = 0  # sites a `# gbfix: ignore` comment silences
        if not worker:
            from gbfix.config import resolve
            from gbfix.errors import GbfixError
            from gbfix.suppress import Filter

            try:
                settings = resolve((), {}, cwd=self.root)
            except GbfixError as e:
                raise pytest.UsageError(f"gbfix: {e}") from None
            self.selection = Filter(settings["select"], settings["ignore"])
        if config.option.gbfix_baseline and not worker:
            from gbfix import baseline as bl
            from gbfix.errors import GbfixError

            self.baseline_path = Path(config.option.gbfix_baseline).resolve()
            try:
                self.known = bl.load(self.baseline_path, config.option.gbfix_baseline)
            except GbfixError as e:
                raise pytest.UsageError(f"gbfix: {e}") from None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        recorder = _installed.get("recorder")
        if recorder is not None:
            recorder.test = item.nodeid
        try:
            return (yield)
        finally:
            if recorder is not None:
                recorder.test = ""

    def _own_records(self) -> list[dict[str, Any]]:
        recorder = _installed.get("recorder")
        if not recorder:
            return []
        out = [_locate(r, self.root) for r in recorder.breaks[self.start :]]
        rcs = [_locate_recompile(r, self.root) for r in _installed["recompiles"].recompiles[self.start_rc :]]
        # The recompile limit: RC100 at the def says what Dynamo's GB0039 there says, and more.
        limits = {(r["file"], r["line"]) for r in rcs if r["code"] == "RC100"}
        # RC100 first (the frame runs eagerly); one record per recompile site and test.
        rcs.sort(key=lambda r: r["code"] != "RC100")
        return [r for r in out if not (r["code"] == "GB0039" and (r["file"], r["line"]) in limits)] + rcs

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        out = getattr(node, "workeroutput", None) or {}
        if _KEY in out:
            self.records.extend(out[_KEY])
            self.workers += 1

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.worker:
            self.config.workeroutput[_KEY] = self._own_records()  # type: ignore[attr-defined]
            return
        if self.config.pluginmanager.getplugin("dsession") is None:
            self.records = self._own_records()
        self._select()
        if self.baseline_path is not None:
            self._judge(session, self.baseline_path)

    def _select(self) -> None:
        """Drop the records that select / ignore or a ``# gbfix: ignore`` comment leave out
        (comments are read only in the project's files); count the suppressed sites."""
        selection = self.selection
        if selection is None:
            return
        texts: dict[str, str | None] = {}
        kept, silenced = [], set()
        for r in self.records:
            if r["inside"] and r["file"] not in texts:
                texts[r["file"]] = _read(r["file"])
            text = texts.get(r["file"]) if r["inside"] else None
            if selection.keeps(r["code"], text, r["line"]):
                kept.append(r)
            elif selection.suppressed(r["code"], text, r["line"]):
                silenced.add((r["file"], r["line"], r["col"], r["code"]))
        self.records = kept
        self.suppressed = len(silenced)

    def _sites(self) -> dict[tuple, dict[str, Any]]:
        """Distinct break sites in the project: the same site from two tests or two workers is one."""
        sites: dict[tuple, dict[str, Any]] = {}
        for r in self.records:
            if r["inside"]:
                sites.setdefault((r["file"], r["line"], r["col"], r["code"]), r)
        return sites

    def _judge(self, session: pytest.Session, where: Path) -> None:
        from gbfix import baseline as bl

        shown = _display(str(where), Path.cwd())
        current = Counter(bl.key(r["code"], r["file"], r["line"], where.parent) for r in self._sites().values())
        # As for gbfix check: entries of codes not selected are neither checked nor stale, and an update keeps them.
        selection = self.selection
        unselected = Counter({k: n for k, n in (self.known or {}).items() if selection is not None and not selection.selects(k[0])})
        if self.config.option.gbfix_update_baseline:
            written = current + unselected
            bl.dump(where, written)
            n = sum(written.values())
            self.lines.append(f"gbfix: wrote {shown}: {n} graph break{'' if n == 1 else 's'} in {len(written)} entr{'y' if len(written) == 1 else 'ies'}.")
            return
        cmp = bl.compare(current, None if self.known is None else self.known - unselected)
        note = bl.stale_note(cmp, shown, "run with --gbfix-update-baseline")
        if note:
            self.lines.append(f"gbfix: note: {note}")
        if cmp.new:
            n = cmp.new_total
            listed = ", ".join(bl.describe(k) + (f" x{c}" if c > 1 else "") for k, c in sorted(cmp.new.items()))
            missing = "" if self.known is not None else " (the file does not exist)"
            self.lines.append(f"gbfix: {n} graph break{'' if n == 1 else 's'} not in the baseline {shown}{missing}: {listed}; the session fails.")
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        else:
            self.lines.append(f"gbfix: every graph break is in the baseline {shown}.")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.worker:
            return
        tr = terminalreporter
        backend = self.config.option.gbfix_backend
        tr.write_sep("=", "gbfix: graph breaks")
        by_test: dict[str, list[dict[str, Any]]] = {}
        for r in sorted(self.records, key=lambda r: (r["file"], r["line"], r["col"] or 0)):
            by_test.setdefault(r["test"], [])
            if not any((o["file"], o["line"], o["col"], o["code"]) == (r["file"], r["line"], r["col"], r["code"]) for o in by_test[r["test"]]):
                by_test[r["test"]].append(r)
        for test in sorted(by_test):
            tr.write_line(test or "(collection)")
            for r in by_test[test]:
                where = _display(r["file"], self.root) + f":{r['line']}" + (f":{r['col']}" if r["col"] else "")
                tail = f"in {r['function']}" if r["inside"] else "outside the rootdir, not checked"
                tr.write_line(f"    {where}: {r['code']} {r['type']} ({tail})")
        recompiled = len({k for k in self._sites() if k[3].startswith("RC")})
        n = sum(1 for v in by_test.values() for r in v if not r["code"].startswith("RC"))
        sites = len(self._sites()) - recompiled
        workers = f", {self.workers} workers" if self.workers else ""
        tail = f" {self.suppressed} suppressed." if self.suppressed else ""
        if n == 0:
            tr.write_line(f"gbfix: no graph breaks ({backend} backend{workers})." + tail)
        else:
            tests = len([t for t in by_test if t])
            tr.write_line(
                f"gbfix: {n} graph break{'' if n == 1 else 's'} in {tests} test{'' if tests == 1 else 's'}, "
                f"{sites} site{'' if sites == 1 else 's'} in the project ({backend} backend{workers})." + tail
            )
        if recompiled:
            # the plugin reports; gbfix run on the tests tries the recompile recipes, as for breaks
            sites_rc = f"{recompiled} recompile site{'' if recompiled == 1 else 's'}"
            tr.write_line(f'gbfix: {sites_rc} in the project (RC codes); gbfix --entry "pytest ..." tries their recipes.')
        for line in self.lines:
            tr.write_line(line, red=line.endswith("fails."), bold=line.endswith("fails."))


def _read(file: str) -> str | None:
    """A project file's text (PEP 263 honoured), for its ``# gbfix: ignore`` comments."""
    import tokenize

    try:
        with tokenize.open(file) as f:
            return f.read()
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def _display(path: str, root: Path) -> str:
    rel = os.path.relpath(path, root)
    return path if rel.startswith("..") else Path(rel).as_posix()
