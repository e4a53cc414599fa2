"""Detect: run the entry once in a spawned child process and read back what it recorded."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from gbfix import generated
from gbfix.entry import Entry
from gbfix.errors import EntryError, GbfixError
from gbfix.gbcodes import torch_dir
from gbfix.launch import Fresh, Launched, Lease, Shared, Timeout, Warm, WorkerLost
from gbfix.records import Break, LogRecord, ObservedCall, Recompile, RunResult, WarningRecord

DEFAULT_TIMEOUT = 900.0
# The files of one run's folder, as the spec names them to the child and Pending reads them back.
RESULT, OUTPUTS, STDOUT, STDERR = "result.json", "outputs.pt", "stdout", "stderr"


class RunFailed(Exception):
    """One run of the entry did not complete; ``str()`` is a one-line reason, ``breaks``
    the graph breaks the run saw before it failed."""

    def __init__(self, reason: str, breaks: tuple[Break, ...] = ()) -> None:
        super().__init__(reason)
        self.breaks = breaks


def _tail(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [ln for ln in lines if ln]
    return lines[-1] if lines else ""


def _run_env() -> dict[str, str]:
    """The environment of every run: the user's, and what makes runs comparable."""
    return {
        **os.environ,
        "PYTHONDONTWRITEBYTECODE": "1",  # never litter the user's tree with __pycache__
        "PYTHONHASHSEED": "0",  # same set/dict iteration order in every run
        "PYTHONUNBUFFERED": "1",
        # Runs overlap on few cores: OpenMP threads that spin while idle (libgomp's
        # default) take the cores from the other run's, 2-3x slower each. Waiting
        # passively changes no result (same threads, same work split).
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
    }


_shared: Shared | None = None  # while ``shared_workers`` holds


@contextlib.contextmanager
def shared_workers(on: bool = True) -> Iterator[None]:
    """Within: the gbfix runs of this process fork their runs from warm workers kept
    from one run to the next (``launch.Shared``), not from one each: for a caller
    that runs ``engine.fix`` many times (a test suite). They stop at the end.
    ``on=False``: within, each gbfix run has a worker of its own again."""
    global _shared
    outer, mine = _shared, Shared() if on else None
    _shared = mine
    try:
        yield
    finally:
        _shared = outer
        if mine is not None:
            mine.close()


def warm_worker(entry: Entry, timeout: float = DEFAULT_TIMEOUT) -> Warm | Lease | None:
    """A warm worker for the runs of ``entry``, booting now: its import of torch goes on
    while the caller does other work (gbfix loading its own modules); within
    ``shared_workers``, a lease on a kept one. None without torch (the Prober says
    so). Hand it to a ``Prober``, or ``close`` it."""
    if torch_dir() is None:
        return None
    # The worker imports torch before its first fork: not a run, so not held to the run limit.
    startup = max(timeout, 300.0)
    if _shared is not None:
        return _shared.lease(entry.cwd, _run_env(), startup)
    worker = Warm(entry.cwd, _run_env(), startup)
    worker.boot()
    return worker


class Prober:
    """Runs the entry in child processes; each run gets its own scratch folder."""

    def __init__(self, entry: Entry, workdir: Path, timeout: float = DEFAULT_TIMEOUT, worker: Warm | Lease | None = None) -> None:
        """``worker``: fork the runs from this warm worker (``warm_worker``), which
        imported torch once (for many runs; a single run gains nothing); None: each
        run starts a fresh interpreter. Call ``close`` when done: it stops the worker too."""
        if torch_dir() is None:
            raise GbfixError(f"torch is not installed for {sys.executable}; install it first (pip install torch)")
        self.entry = entry
        self.workdir = workdir
        self.timeout = timeout
        self.runs = 0
        self.started: list[Pending] = []  # the runs not yet collected
        # A program that writes files runs one run at a time: two side by side would
        # clobber each other's checkpoint or log (set once the baseline shows it writes).
        self.one_at_a_time = False
        self.launcher: Warm | Lease | Fresh = worker if worker is not None else Fresh(entry.cwd, _run_env())

    @property
    def notes(self) -> tuple[str, ...]:
        return self.launcher.notes

    def close(self) -> None:
        """Stop the runs still going (no run outlives gbfix) and the warm worker."""
        for pending in self.started:
            pending.cancel()
        self.launcher.close()

    def run(self, **how) -> RunResult:
        """One run, waited for (see ``start``); raises RunFailed if the entry crashed,
        exited non-zero or timed out."""
        return self.start(**how).result()

    def start(
        self,
        *,
        overlay: dict[Path, bytes] | None = None,
        baseline: Path | None = None,
        backend: str = "eager",
        fullgraph: bool | None = None,
        observe: tuple[tuple[Path, int], ...] = (),
        no_recompiles: bool = False,
    ) -> Pending:
        """Start one run; several may go at once (a ``warm`` prober forks them all).

        backend: "eager" (detection), "own" (the program's own settings) or
        "none" (Dynamo disabled). ``observe``: (file, first line) of user
        functions whose calls are recorded (see ``gbfix.child.observe``).
        ``no_recompiles``: then run the script's main block again under
        ``torch.compiler.set_stance("fail_on_recompile")`` (``RunResult.recompile_proof``).
        """
        if self.one_at_a_time:
            for earlier in self.started:
                earlier.settle()
        self.runs += 1
        rundir = self.workdir / f"run{self.runs}"
        rundir.mkdir(parents=True)
        files = {}
        overlay = {**(overlay or {}), **generated.complete(overlay or {})}  # and the generated modules they import
        for original, text in overlay.items():
            copy = rundir / f"{hashlib.sha1(str(original).encode()).hexdigest()[:12]}.py"
            copy.write_bytes(text)
            files[str(original)] = str(copy)
        spec = {
            "entry": self.entry.to_json(),
            "cwd": str(self.entry.cwd),
            "backend": backend,
            "fullgraph": fullgraph,
            "overlay": files,
            "outputs_out": str(rundir / OUTPUTS),
            "baseline_outputs": str(baseline) if baseline else None,
            "result": str(rundir / RESULT),
            "seed": 0,
            "observe": [{"file": str(path), "line": line} for path, line in observe],
            "no_recompiles": no_recompiles,
        }
        spec_path = rundir / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        stdout_path, stderr_path = rundir / STDOUT, rundir / STDERR
        extra = {"TORCHDYNAMO_DISABLE": "1"} if backend == "none" else {}  # eager ground truth
        pending = Pending(self.launcher.start(spec_path, stdout_path, stderr_path, extra), rundir, self.timeout)
        # The runs still to stop at close: one whose result was collected needs no stopping.
        self.started = [p for p in self.started if not p.collected] + [pending]
        return pending

    def baseline(self, uncompiled_fallback: bool = False) -> RunResult:
        """The first run of the unmodified program: a failure here is the user's to fix.
        ``uncompiled_fallback``: unless the program fails only under torch.compile, after graph breaks (Dynamo
        mistraces the code around one: an f-string with a `.item()` field, in torch 2.13
        and 2.15). Then the baseline is the run without compile, with the compiled run's
        breaks: an edit that removes the break the failure comes from is verified against
        what the program does uncompiled (``RunResult.compile_failure``)."""
        try:
            return self.run()
        except RunFailed as e:
            failed = e
        if uncompiled_fallback and failed.breaks:
            try:
                plain = self.run(backend="none")
            except RunFailed:
                pass
            else:
                return replace(plain, breaks=failed.breaks, compile_failure=str(failed))
        raise EntryError(f"the entry `{self.entry.text}` failed: {failed}")


MEMORY_ENV = "GBFIX_MEMORY_LIMIT"
MEMORY_SHARE = 0.8  # of the machine's memory, for one run and everything it started


def memory_limit() -> int | None:
    """Bytes a run may use (resident, all its processes): ``$GBFIX_MEMORY_LIMIT`` GiB, else
    80% of the machine's memory; None where that cannot be read (no /proc)."""
    if os.environ.get(MEMORY_ENV):
        try:
            return int(float(os.environ[MEMORY_ENV]) * 2**30)
        except ValueError:
            raise GbfixError(f"{MEMORY_ENV}={os.environ[MEMORY_ENV]!r}: not a number of GiB") from None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            total_kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        return None
    return int(total_kib * 1024 * MEMORY_SHARE)


def group_rss(pgid: int) -> int:
    """Resident bytes of the processes in group ``pgid`` (0 where /proc cannot tell)."""
    total = 0
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) == pgid:  # pgrp, the fifth field of stat
                total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")  # rss (pages), the 24th
        except (OSError, IndexError, ValueError):
            continue
    return total


class Pending:
    """A started run: ``result`` waits for it, ``cancel`` kills it."""

    def __init__(self, child: Launched, rundir: Path, timeout: float) -> None:
        self.child, self.rundir, self.timeout = child, rundir, timeout
        self.started = time.perf_counter()
        self._result: RunResult | RunFailed | None = None

    def result(self) -> RunResult:
        if self._result is None:
            try:
                self._result = self._wait()
            except RunFailed as e:
                self._result = e
        if isinstance(self._result, RunFailed):
            raise self._result
        return self._result

    def settle(self) -> None:
        """Wait for the run to end (its result or failure is kept for ``result``)."""
        try:
            self.result()
        except RunFailed:
            pass

    @property
    def collected(self) -> bool:
        """Its result (or failure) is in: waited for, or cancelled."""
        return self._result is not None

    def _watch(self) -> int:
        """Wait for the run's exit code, stopping it at the timeout or when its processes
        together use more memory than ``memory_limit()``: a clear error, not a frozen machine."""
        limit = memory_limit()
        while True:
            left = self.timeout - (time.perf_counter() - self.started)
            if left <= 0:
                self.child.kill()
                raise RunFailed(f"timed out after {self.timeout:g} s")
            try:
                return self.child.wait(min(left, 0.5))
            except Timeout:
                pass
            if limit and group_rss(self.child.pid) > limit:
                self.child.kill()
                raise RunFailed(
                    f"the run used more than {limit / 2**30:.1f} GiB of memory and was stopped"
                    f" (gbfix's cap: {MEMORY_SHARE:.0%} of this machine's memory; {MEMORY_ENV}=GiB sets it)"
                )

    def cancel(self) -> None:
        if self._result is None:
            self.child.kill()
            self._result = RunFailed("cancelled")

    def _wait(self) -> RunResult:
        try:
            rc = self._watch()
        except RunFailed:  # stopped there already
            raise
        except WorkerLost as e:
            raise RunFailed(str(e)) from None
        except BaseException:  # Ctrl-C: the run must not outlive gbfix
            self.child.kill()
            raise
        self.child.leftovers()
        result_path = self.rundir / RESULT
        if not result_path.is_file():
            last = _tail(self.rundir / STDERR)
            raise RunFailed(f"exit code {rc}" + (f": {last}" if last else ""))
        data = json.loads(result_path.read_text(encoding="utf-8"))
        if data["error"]:
            raise RunFailed(data["error"], tuple(Break.from_json(b) for b in data["breaks"]))
        return RunResult(
            breaks=tuple(Break.from_json(b) for b in data["breaks"]),
            stdout=(self.rundir / STDOUT).read_text(encoding="utf-8", errors="replace"),
            logs=tuple(LogRecord(**r) for r in data["logs"]),
            warnings=tuple(WarningRecord(**w) for w in data["warnings"]),
            compiled_calls=data["compiled_calls"],
            outputs_path=self.rundir / OUTPUTS,
            output_mismatch=data["output_mismatch"],
            compile_sites=tuple(tuple(s) for s in data["compile_sites"]),
            torch_version=data["torch_version"],
            capabilities=frozenset(data["capabilities"]),
            seconds=time.perf_counter() - self.started,
            observed={
                (o["file"], o["line"]): tuple(ObservedCall.from_json(c) for c in o["calls"]) for o in data["observed"]
            },
            graphs=data.get("graphs"),
            sources=tuple(data["sources"]),
            wrote=tuple(data["wrote"]["paths"]),
            wrote_more=data["wrote"]["more"],
            recompiles=tuple(Recompile.from_json(r) for r in data.get("recompiles", ())),
            recompile_notes=tuple(data.get("recompile_notes", ())),
            recompile_proof=data.get("recompile_proof"),
        )
