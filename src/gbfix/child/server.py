"""A warm worker: ``python -m gbfix.child.server`` imports torch once and forks one child per run.

Every run of the entry otherwise starts a fresh interpreter that spends seconds
importing torch, Dynamo and inductor before the user's code starts. The server
pays that once; a forked child starts with the modules loaded, and the user's
program then runs in it exactly as ``python -m gbfix.child SPEC`` would run it.

Forking is safe only while this process holds no CUDA context and runs no other
thread; when either is not so, the server refuses and the parent starts fresh
interpreters instead (``gbfix.launch``).

Protocol, one JSON object per line: the parent sends
``{"spec", "stdout", "stderr", "cwd", "env"}``; the server answers
``{"pid": N}`` (or ``{"refused": why}``) at once and ``{"pid": N, "rc": N}``
when that child ends (``-signal`` when it was killed); runs may overlap.
"""

from __future__ import annotations

import json
import os
import select
import sys
import threading


def _preload(modules: tuple[str, ...]) -> None:
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module this torch lacks only costs its import later
            pass


def _fork_unsafe() -> str | None:
    """Why a fork of this process would not be a sound run, or None."""
    import torch

    if torch.cuda.is_initialized():
        return "CUDA is initialised in the warm worker"
    if threading.active_count() > 1:
        return f"the warm worker runs {threading.active_count() - 1} other thread(s)"
    return None


def _child(request: dict, replies) -> int:
    """In the forked child: become the run ``python -m gbfix.child SPEC`` would be."""
    os.setsid()  # its own process group, so a timeout kills everything it started
    replies.close()  # the user's program must not see (or keep open) the server's pipes
    devnull = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for src, dst in ((devnull, 0), (out, 1), (err, 2)):
        os.dup2(src, dst)
        os.close(src)
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    from gbfix.child.__main__ import main

    return main(request["spec"])


def serve() -> int:
    # Replies go to a private copy of stdout; fd 1 itself goes to stderr, so that
    # whatever an import prints cannot corrupt the protocol.
    replies = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    _preload(("torch", "torch._dynamo", "gbfix.child.__main__", "gbfix.child.hooks", "gbfix.child.compile_patch"))
    later = ["torch._inductor.compile_fx"]  # imported while the first child runs, on another core
    running: set[int] = set()
    pending = b""
    while True:
        # Several runs may go at once: poll for ended children while waiting for requests.
        ready, _, _ = select.select([0], [], [], 0.02 if running else None)
        for pid, rc in _reap(running):
            replies.write(json.dumps({"pid": pid, "rc": rc}) + "\n")
        if not ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:  # the parent is done: runs it left behind go with the worker
            for pid in running:
                _kill(pid)
            return 0
        pending += chunk
        while b"\n" in pending:
            line, _, pending = pending.partition(b"\n")
            request = json.loads(line)
            why = _fork_unsafe()
            if why is not None:
                replies.write(json.dumps({"refused": why}) + "\n")
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                return _child(request, replies)
            running.add(pid)
            replies.write(json.dumps({"pid": pid}) + "\n")
            if later:
                _preload(tuple(later))
                later.clear()


def _reap(running: set[int]) -> list[tuple[int, int]]:
    """(pid, exit code) of the children that ended; ``-signal`` for one that was killed."""
    ended = []
    for pid in list(running):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            running.discard(pid)
            ended.append((pid, os.waitstatus_to_exitcode(status)))
    return ended


def _kill(pid: int) -> None:
    from gbfix.launch import kill_group

    kill_group(pid)  # the child's group, or the child alone if it has not made one yet
    os.waitpid(pid, 0)


if __name__ == "__main__":
    # In a forked child this is the run's exit: atexit handlers and stream flushes
    # happen as at the end of any interpreter.
    sys.exit(serve())
