"""How a run's child process starts: a fresh interpreter, or a fork of a warm worker.

A fresh ``python -m gbfix.child SPEC`` pays the import of torch, Dynamo and
inductor (seconds) on every run. ``Warm`` keeps one ``gbfix.child.server``
that imported them once and forks a child per run; it falls back to fresh
interpreters, and says why, where forking is unsound or unavailable. ``Shared``
keeps such servers from one gbfix run to the next in one process (a test suite,
a tool that fixes many programs); each gbfix run holds a ``Lease`` on one.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Protocol

from gbfix import scratch


class Timeout(Exception):
    pass


class Launched(Protocol):
    """A started child: ``wait`` returns its exit code (raises Timeout), ``kill`` ends it and its group."""

    pid: int  # also its process group's id

    def wait(self, timeout: float) -> int: ...

    def kill(self) -> None: ...

    def leftovers(self) -> None:
        """Once it has ended: stop what it started and left running (its process group)."""


class WorkerLost(Exception):
    """The warm worker died or answered nonsense; ``str()`` says how."""


class _Popen:
    """A running fresh interpreter."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.pid = proc.pid

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Timeout from None

    def kill(self) -> None:
        kill_group(self.proc.pid)
        self.proc.wait()

    def leftovers(self) -> None:
        end_group(self.proc.pid)


def end_group(pgid: int) -> None:
    """SIGKILL what is left of a run's process group, its leader gone (a server the
    program started and never stopped): no run leaves processes behind. Not its pid
    alone: a leader that is gone may have had its pid given to another process."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # nothing left
        pass


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid``, or ``pid`` alone if it leads none."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # not yet its own group leader, or already gone
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Fresh:
    """Each run in a new interpreter: ``python -m gbfix.child SPEC``."""

    notes: tuple[str, ...] = ()

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd, self.env = cwd, env

    def start(self, spec: Path, stdout: Path, stderr: Path, extra_env: dict[str, str], cwd: Path | None = None) -> _Popen:
        """``cwd``: the run's working directory, if not this launcher's."""
        with open(stdout, "wb") as out, open(stderr, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gbfix.child", str(spec)],
                cwd=cwd or self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env={**self.env, **extra_env},
                start_new_session=True,  # so a timeout can kill the whole process group
            )
        return _Popen(proc)

    def close(self) -> None:
        pass


class _Forked:
    """A run forked by the warm worker; the worker reports its exit code."""

    def __init__(self, worker: Warm, pid: int) -> None:
        self.worker, self.pid = worker, pid
        self.rc: int | None = None  # once the worker reported it (a report comes once)

    def wait(self, timeout: float) -> int:
        if self.rc is None:
            self.rc = self.worker.exit_code(self.pid, time.monotonic() + timeout)
        return self.rc

    def kill(self) -> None:
        if self.rc is not None:  # ended and reaped: a second kill (Ctrl-C, then the clean-up) has nothing to wait for
            return
        kill_group(self.pid)
        try:
            self.rc = self.worker.exit_code(self.pid, time.monotonic() + 30)  # the worker reaps it and reports
        except (Timeout, WorkerLost):
            self.worker.close()

    def leftovers(self) -> None:
        end_group(self.pid)


class Warm:
    """Runs forked from one ``gbfix.child.server`` that imported torch once.

    The server starts with the first run, or before it with ``boot`` (so that its
    imports overlap gbfix's own work). When it cannot start, refuses to fork or
    dies, this and later runs start fresh interpreters, and ``notes`` says so.
    """

    def __init__(self, cwd: Path, env: dict[str, str], startup_timeout: float) -> None:
        self.fresh = Fresh(cwd, env)
        self.startup_timeout = startup_timeout
        self.log: Path | None = None  # the server's stderr, while it runs
        self.proc: subprocess.Popen | None = None
        self.buffer = b""
        self.exited: dict[int, int] = {}  # pid -> exit code, reported and not yet collected
        self.failed: str | None = None if hasattr(os, "fork") else "this platform cannot fork"

    @property
    def notes(self) -> tuple[str, ...]:
        if self.failed is None:
            return ()
        return (f"each run started a fresh interpreter (slower): {self.failed}",)

    def start(self, spec: Path, stdout: Path, stderr: Path, extra_env: dict[str, str], cwd: Path | None = None):
        """``cwd``: the run's working directory, if not the worker's."""
        if self.failed is None:
            try:
                return self._fork(spec, stdout, stderr, extra_env, cwd or self.fresh.cwd)
            except (WorkerLost, Timeout, OSError) as e:
                self.failed = str(e) or type(e).__name__
                self.close()
        return self.fresh.start(spec, stdout, stderr, extra_env, cwd)

    def boot(self) -> None:
        """Start the server now, so that its imports overlap what gbfix does next
        (else the first run starts it)."""
        if self.proc is not None or self.failed is not None:
            return
        try:
            fd, name = tempfile.mkstemp(prefix=f"{scratch.prefix()}worker-", suffix=".log")
            self.log = Path(name)
            with os.fdopen(fd, "wb") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "gbfix.child.server"],
                    cwd=self.fresh.cwd,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    env=self.fresh.env,
                    start_new_session=True,  # Ctrl-C in the terminal reaches gbfix, which stops it
                )
        except OSError as e:  # runs start fresh interpreters instead, and say why
            self.failed = f"the warm worker did not start: {e}"
            self.close()

    def _fork(self, spec: Path, stdout: Path, stderr: Path, extra_env: dict[str, str], cwd: Path) -> _Forked:
        self.boot()
        if self.proc is None:
            raise WorkerLost(self.failed or "the warm worker did not start")
        request = {"spec": str(spec), "stdout": str(stdout), "stderr": str(stderr), "cwd": str(cwd), "env": extra_env}
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerLost(self._death()) from None
        deadline = time.monotonic() + self.startup_timeout
        while True:  # reports of other runs ending may come first
            reply = self.receive(deadline)
            if "refused" in reply:
                raise WorkerLost(str(reply["refused"]))
            if "pid" in reply and "rc" not in reply:
                return _Forked(self, int(reply["pid"]))

    def exit_code(self, pid: int, deadline: float) -> int:
        while pid not in self.exited:
            self.receive(deadline)
        return self.exited.pop(pid)

    def receive(self, deadline: float) -> dict:
        """The worker's next reply line; an exit report is also kept in ``exited``."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise WorkerLost(self._death())
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            reply = json.loads(line)
            if "rc" in reply:
                self.exited[int(reply["pid"])] = int(reply["rc"])
        except (ValueError, KeyError, TypeError):
            raise WorkerLost(f"the warm worker answered {line[:80]!r}") from None
        return reply

    def _death(self) -> str:
        assert self.proc is not None and self.log is not None
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
        lines = [ln for ln in self.log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        return f"the warm worker exited (code {rc})" + (f": {lines[-1].strip()}" if lines else "")

    def close(self) -> None:
        """Stop the worker. It is killed with its group, not asked to exit: it holds
        nothing to save (each run is a child in a group of its own), and an
        interpreter with torch loaded takes over a second to shut down."""
        proc, self.proc = self.proc, None
        if proc is not None:
            kill_group(proc.pid)
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe:
                    pipe.close()
        if self.log is not None:
            self.log.unlink(missing_ok=True)


# Variables that change between runs of gbfix in one process and that nothing reads as it
# imports (pytest names the test running in each): a shared worker's runs get the value of
# their own gbfix run, and the worker is not keyed on it.
VOLATILE = ("PYTEST_CURRENT_TEST",)


class Lease:
    """One gbfix run's use of a worker that ``Shared`` keeps: its runs fork from that
    worker in the run's own folder, with the run's values of ``VOLATILE``; ``close``
    leaves the worker to the next run."""

    def __init__(self, worker: Warm, cwd: Path, env: dict[str, str]) -> None:
        self.worker, self.cwd = worker, cwd
        self.own_env = {name: env[name] for name in VOLATILE if name in env}
        self.open = True

    @property
    def notes(self) -> tuple[str, ...]:
        return self.worker.notes

    def start(self, spec: Path, stdout: Path, stderr: Path, extra_env: dict[str, str]):
        return self.worker.start(spec, stdout, stderr, {**self.own_env, **extra_env}, self.cwd)

    def close(self) -> None:
        self.open = False


class Shared:
    """Warm workers kept from one gbfix run to the next in this process.

    Each run of gbfix would otherwise start a server of its own and pay its import
    of torch and its warm-up (seconds) again. A server never runs the user's code
    (every run is a child forked from it, in its own process group and folder), so
    one serves runs of any program, provided it was started as that run's would
    be: the same interpreter and environment (torch reads settings from it at
    import), but for ``VOLATILE``. Servers run in an empty folder of their own, so that no program's
    files shadow what they import. One server is kept per environment; an idle
    one whose environment is no longer asked for is stopped. ``close`` stops all.
    """

    def __init__(self) -> None:
        self.folder: Path | None = None  # made with the first server
        self.workers: dict[tuple, tuple[Warm, list[Lease]]] = {}

    def lease(self, cwd: Path, env: dict[str, str], startup_timeout: float) -> Lease:
        key = (sys.executable, tuple(sorted((name, name in VOLATILE or value) for name, value in env.items())))
        for other, (worker, leases) in list(self.workers.items()):
            leases[:] = [lease for lease in leases if lease.open]
            gone = worker.failed is not None or (worker.proc is not None and worker.proc.poll() is not None)
            if gone or (other != key and not leases):
                worker.close()
                del self.workers[other]
        if key not in self.workers:
            if self.folder is None:
                self.folder = Path(tempfile.mkdtemp(prefix=f"{scratch.prefix()}workers-"))
            worker = Warm(self.folder, env, startup_timeout)
            worker.boot()
            self.workers[key] = (worker, [])
        worker, leases = self.workers[key]
        worker.startup_timeout = max(worker.startup_timeout, startup_timeout)
        leases.append(Lease(worker, cwd, env))
        return leases[-1]

    def close(self) -> None:
        for worker, _ in self.workers.values():
            worker.close()
        self.workers.clear()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
