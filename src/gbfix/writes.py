"""Writing the verified edits back: every file or none, and never around a file's permissions.

A file is written through a temporary file beside it and a rename, so a reader
never sees half a file; the new file keeps the old one's mode bits (and owner,
where gbfix may set it). Symlinked targets were resolved when read, so the
link's target is written and the link stays a link.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from gbfix.errors import GbfixError
from gbfix.sources import SourceFile, python_files


def problem(path: Path) -> str | None:
    """Why gbfix may not write ``path``, or None.

    A file without any write bit counts as read-only even for root, who could
    write it: `chmod a-w` says the file is not to be changed, as ruff and black
    read it too.
    """
    try:
        mode = path.stat().st_mode
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(path, os.W_OK):
        return "read-only"
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return "in a folder gbfix cannot write to (it writes a temporary file beside the file and renames it)"
    return None


def check_targets(paths: list[Path]) -> None:
    """Every Python file under ``paths`` may be written (checked before --apply runs anything)."""
    for root in paths:
        for path in python_files(root):
            why = problem(path.resolve())
            if why:
                raise GbfixError(f"{path}: {why}; --apply writes only files it may write: make it writable or leave it out of the targets")


def write_all(changes: list[tuple[SourceFile, bytes]]) -> list[Path]:
    """Write each source's new bytes, all or none.

    Every file is checked first (still as read, writable); then each is
    written. If a write fails midway (a full disk, a permission, Ctrl-C), the
    files already written get their old bytes back before the error is raised.
    """
    for source, _ in changes:
        why = problem(source.path)
        if why:
            raise GbfixError(f"{source.path}: {why}; nothing written")
        if source.path.read_bytes() != source.data:
            raise GbfixError(f"{source.path}: changed on disk while gbfix ran; nothing written")
    written: list[SourceFile] = []
    try:
        for source, new in changes:
            _replace(source.path, new)
            written.append(source)
    except BaseException as e:
        lost = _put_back(written)
        if not isinstance(e, OSError):
            raise
        failed = changes[len(written)][0].path
        back = f"the {len(written)} file(s) already written were put back" if written else "no other file was written"
        if lost:
            back = f"could not put back {', '.join(map(str, lost))}"
        raise GbfixError(f"{failed}: could not be written ({e.strerror or e}); {back}") from None
    return [source.path for source, _ in changes]


def _put_back(written: list[SourceFile]) -> list[Path]:
    """Restore the files' old bytes; the ones that could not be restored."""
    lost = []
    for source in reversed(written):
        try:
            _replace(source.path, source.data)
        except OSError:
            lost.append(source.path)
    return lost


def _replace(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically, keeping its mode bits and owner."""
    st = path.stat()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".gbfix")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        if (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
            try:
                os.chown(tmp, st.st_uid, st.st_gid)
            except PermissionError:
                pass  # not ours to give away: the file becomes the writer's, as with any editor
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
