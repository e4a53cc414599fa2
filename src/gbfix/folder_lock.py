"""One gbfix run at a time per program folder.

Two gbfix runs on the same tree would run the program side by side (its checkpoint
or log written by both) and race to write the same targets. The second run to
start says so and stops. The lock is an ``flock`` on a file in gbfix's cache
folder, keyed by the entry's folder, held until the process ends (the kernel drops
it however the process ends); where no lock can be taken (no cache folder, no
``fcntl``), runs go on unlocked.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from gbfix import result_cache
from gbfix.errors import GbfixError

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None  # type: ignore[assignment]

_held: dict[Path, int] = {}  # folder -> the open lock file: kept open for the process's life


def hold(folder: Path) -> None:
    """Take the lock for runs of a program in ``folder``; GbfixError if another gbfix holds it."""
    folder = folder.resolve()
    if fcntl is None or folder in _held:
        return
    locks = result_cache.directory() / "locks"
    name = hashlib.sha256(str(folder).encode()).hexdigest()[:16] + ".lock"
    try:
        locks.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(locks / name, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise GbfixError(
            f"another gbfix run (pid {other}) is running the program in {folder}: two would race on its files; wait for it to end"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    _held[folder] = fd
