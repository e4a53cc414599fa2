"""Record the files the program writes, renames or removes (runs inside the child).

gbfix runs the program several times, some runs side by side: a program that
writes a checkpoint or appends to a CSV would have two runs clobber each other's
files. The parent runs such a program one run at a time, and tells the user
which files it wrote. An audit hook (PEP 578) sees every ``open`` for writing,
``os.rename``/``os.replace``, ``os.remove`` and friends, whatever library makes
the call; ``torch.save`` to a path, which opens its file in C++, is wrapped. Left out: gbfix's own run folder, ``__pycache__``, and, outside the
program's working folder, scratch space and caches (the temporary folder,
``~/.cache``: inductor's and the hub's caches live there).
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Events whose arguments name paths the call changes, and which arguments.
_PATH_EVENTS = {
    "os.rename": (0, 1),  # os.replace raises it too
    "os.remove": (0,),  # os.unlink too
    "os.rmdir": (0,),
    "os.mkdir": (0,),
    "os.truncate": (0,),
    "os.symlink": (1,),
    "os.link": (1,),
    "shutil.rmtree": (0,),
}
MAX_PATHS = 100  # enough to tell the user; a program writing thousands is told as "and more"


class WriteRecorder:
    def __init__(self, run_dir: str, cwd: str) -> None:
        home_cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        self._ours = os.path.join(os.path.realpath(run_dir), "")
        self._cwd = os.path.join(os.path.realpath(cwd), "")
        self._scratch = tuple(os.path.join(os.path.realpath(p), "") for p in (tempfile.gettempdir(), home_cache, "/dev", "/proc"))
        self.paths: dict[str, None] = {}  # in the order first written
        self.more = False

    def install(self) -> None:
        sys.addaudithook(self._hook)
        torch = sys.modules.get("torch")
        if torch is not None:  # its zip writer opens the file in C++: no audit event
            torch.save = torch.serialization.save = self._saving(torch.serialization.save)  # type: ignore[attr-defined]  # torch, patched

    def _saving(self, save):
        @functools.wraps(save)
        def recorded(obj, f, *args, **kwargs):
            self._note(f)
            return save(obj, f, *args, **kwargs)

        return recorded

    def _hook(self, event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & _WRITE_FLAGS)
            if writing:
                self._note(path)
        elif event in _PATH_EVENTS:
            for i in _PATH_EVENTS[event]:
                self._note(args[i])

    def _note(self, path: object) -> None:
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, (str, os.PathLike)):
            return  # a file descriptor: opened (and recorded) by path before
        try:
            real = os.path.realpath(path)
        except (OSError, ValueError):
            return
        inside = os.path.join(real, "")
        if inside.startswith(self._ours) or "__pycache__" in real:
            return
        if not inside.startswith(self._cwd) and inside.startswith(self._scratch):
            return
        if real not in self.paths:
            if len(self.paths) >= MAX_PATHS:
                self.more = True
                return
            self.paths[real] = None

    def result(self) -> dict:
        return {"paths": list(self.paths), "more": self.more}
