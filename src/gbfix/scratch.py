"""gbfix's scratch folder and files for one run: named after its process, so that a later
gbfix can remove what a killed one (SIGKILL: no clean-up of its own) left behind."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

_NAME = re.compile(r"gbfix-(\d+)-")


def prefix() -> str:
    """The start of the name of every scratch folder or file of this gbfix process."""
    return f"gbfix-{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def sweep(root: Path) -> None:
    """Remove this user's scratch folders and files in ``root`` whose gbfix process is gone."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            m = _NAME.match(entry.name)
            with contextlib.suppress(OSError):
                mine = m and entry.stat(follow_symlinks=False).st_uid == os.getuid()
                if m and mine and not _alive(int(m.group(1))):
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)


@contextlib.contextmanager
def folder() -> Iterator[Path]:
    """A fresh scratch folder, removed when the block ends."""
    root = Path(tempfile.gettempdir())
    sweep(root)
    with tempfile.TemporaryDirectory(prefix=prefix(), dir=root) as path:
        yield Path(path)
