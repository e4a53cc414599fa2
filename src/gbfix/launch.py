"""How a run's child process starts: a fresh interpreter, or a fork of a warm worker.

A fresh ``python -m gbfix.child SPEC`` pays the import of torch, Dynamo and
inductor (seconds) on every run. ``Warm`` keeps one ``gbfix.child.server``
that imported them once and forks a child per run; it falls back to fresh
interpreters, and says why, where forking is unsound or unavailable.
"""

from __future__ import annotations

import json
import os
import select
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

    def start(self, spec: Path, stdout: Path, stderr: Path, extra_env: dict[str, str]) -> _Popen:
        with open(stdout, "wb") as out, open(stderr, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gbfix.child", str(spec)],
                cwd=self.cwd,
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

    def start(self, spec: Path, stdout: Path, stderr: Path, extra_env: dict[str, str]):
        if self.failed is None:
            try:
                return self._fork(spec, stdout, stderr, extra_env)
            except (WorkerLost, Timeout, OSError) as e:
                self.failed = str(e) or type(e).__name__
                self.close()
        return self.fresh.start(spec, stdout, stderr, extra_env)

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

    def _fork(self, spec: Path, stdout: Path, stderr: Path, extra_env: dict[str, str]) -> _Forked:
        self.boot()
        if self.proc is None:
            raise WorkerLost(self.failed or "the warm worker did not start")
        request = {"spec": str(spec), "stdout": str(stdout), "stderr": str(stderr), "cwd": str(self.fresh.cwd), "env": extra_env}
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
