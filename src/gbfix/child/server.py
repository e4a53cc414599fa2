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
from typing import NoReturn


def _preload(modules: tuple[str, ...]) -> None:
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module this torch lacks only costs its import later
            pass


def _warm_up() -> None:
    """What a run compiling with inductor would otherwise pay for itself: the import
    of inductor's compiler, the hash of torch's sources and the probe of which CPU
    vector ISAs build and load (a C++ compile and a subprocess per ISA, about a
    second on every run, even when all its graphs come from the cache)."""
    _preload(("torch._inductor.compile_fx",))
    try:
        from torch._inductor import codecache, cpu_vec_isa

        codecache.torch_key()
        cpu_vec_isa.valid_vec_isa_list()
        _forget_config_dependent_verdicts(cpu_vec_isa)
    except Exception:  # noqa: BLE001 - private names that move between releases: the run pays instead
        pass


def _forget_config_dependent_verdicts(cpu_vec_isa) -> None:
    """Keep only the probe verdicts cached by the inductor config they were made under.

    An ISA's base check is cached per value of ``config.cpp.vec_isa_ok`` (the costly
    part); the list and the subclasses' extra checks are cached once, whatever the
    config: a program that sets the option before compiling must compute them anew.
    """
    keep = "_VecISA__bool__impl"
    classes = [cpu_vec_isa.VecISA]
    while classes:
        cls = classes.pop()
        classes.extend(cls.__subclasses__())
        for name, attr in vars(cls).items():
            if name != keep and hasattr(attr, "cache_clear"):
                attr.cache_clear()
    cpu_vec_isa.valid_vec_isa_list.cache_clear()


def _fork_unsafe() -> str | None:
    """Why a fork of this process would not be a sound run, or None."""
    import torch

    if torch.cuda.is_initialized():
        return "CUDA is initialised in the warm worker"
    if threading.active_count() > 1:
        return f"the warm worker runs {threading.active_count() - 1} other thread(s)"
    return None


def _child(request: dict, replies) -> NoReturn:
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
    from gbfix.child.__main__ import leave, main

    leave(main(request["spec"]))


def serve() -> int:
    # Replies go to a private copy of stdout; fd 1 itself goes to stderr, so that
    # whatever an import prints cannot corrupt the protocol.
    replies = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    _preload(("torch", "torch._dynamo", "gbfix.child.__main__", "gbfix.child.hooks", "gbfix.child.compile_patch"))
    # The warm-up starts once the first run is forked (that run would have paid for
    # it too) and goes on beside the runs; a fork waits for it to end, as a thread
    # must not be copied halfway through an import.
    warm_up: threading.Thread | None = None
    running: set[int] = set()
    pending = b""
    while True:
        if running and warm_up is None:
            # daemon: a parent gone mid warm-up must not keep the worker alive until it ends
            warm_up = threading.Thread(target=_warm_up, name="gbfix-warm-up", daemon=True)
            warm_up.start()
        # Several runs may go at once: poll for ended children while waiting for requests.
        ready, _, _ = select.select([0], [], [], 0.02 if running else None)
        for pid, rc in _reap(running):
            _send(replies, {"pid": pid, "rc": rc}, running)
        if not ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:  # the parent is done: runs it left behind go with the worker
            _abandoned(running)
        pending += chunk
        while b"\n" in pending:
            line, _, pending = pending.partition(b"\n")
            request = json.loads(line)
            if warm_up is not None:
                warm_up.join()
            why = _fork_unsafe()
            if why is not None:
                _send(replies, {"refused": why}, running)
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(request, replies)
            running.add(pid)
            _send(replies, {"pid": pid}, running)


def _reap(running: set[int]) -> list[tuple[int, int]]:
    """(pid, exit code) of the children that ended; ``-signal`` for one that was killed."""
    ended = []
    for pid in list(running):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            running.discard(pid)
            ended.append((pid, os.waitstatus_to_exitcode(status)))
    return ended


def _send(replies, message: dict, running: set[int]) -> None:
    """One reply line to the parent; where it is gone (killed while the worker imported
    torch or forked its run: the pipe is closed), the worker ends with the runs it left."""
    try:
        replies.write(json.dumps(message) + "\n")
    except BrokenPipeError:
        _abandoned(running)


def _abandoned(running: set[int]) -> NoReturn:
    """The parent is gone: stop its runs and end the worker at once, with what its warm-up
    started (a compile, a thread pool): it holds nothing to save, and no parent will stop it."""
    from gbfix.launch import end_group

    for pid in running:
        _kill(pid)
    if os.getpgrp() == os.getpid():  # its own group, as gbfix starts it: not a shell's job
        end_group(os.getpid())
    os._exit(0)


def _kill(pid: int) -> None:
    from gbfix.launch import kill_group

    kill_group(pid)  # the child's group, or the child alone if it has not made one yet
    os.waitpid(pid, 0)


if __name__ == "__main__":
    sys.exit(serve())
