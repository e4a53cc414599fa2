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


def write_all(changes: list[tuple[SourceFile | Path, bytes]]) -> list[Path]:
    """Write each source's new bytes, all or none; a bare path is a new file
    (a package's generated module), created only where no file is.

    Every file is checked first (still as read, writable; a new one's folder
    writable and the name free); then each is written. If a write fails midway
    (a full disk, a permission, Ctrl-C), the files already written get their
    old bytes back, and the new ones are removed, before the error is raised.
    """
    for target, _ in changes:
        why = _new_problem(target) if isinstance(target, Path) else _problem_of(target)
        if why:
            path = target if isinstance(target, Path) else target.path
            raise GbfixError(f"{path}: {why}; nothing written")
    written: list[SourceFile | Path] = []
    try:
        for target, new in changes:
            if isinstance(target, Path):
                _create(target, new)
            else:
                _replace(target.path, new)
            written.append(target)
    except BaseException as e:
        lost = _put_back(written)
        if not isinstance(e, OSError):
            raise
        failed = _path(changes[len(written)][0])
        back = f"the {len(written)} file(s) already written were put back" if written else "no other file was written"
        if lost:
            back = f"could not put back {', '.join(map(str, lost))}"
        raise GbfixError(f"{failed}: could not be written ({e.strerror or e}); {back}") from None
    return [_path(target) for target, _ in changes]


def _path(target: SourceFile | Path) -> Path:
    return target if isinstance(target, Path) else target.path


def _problem_of(source: SourceFile) -> str | None:
    why = problem(source.path)
    if why is None and source.path.read_bytes() != source.data:
        why = "changed on disk while gbfix ran"
    return why


def _new_problem(path: Path) -> str | None:
    """Why a new file may not be created at ``path``, or None."""
    if os.path.lexists(path):
        return "appeared on disk while gbfix ran"
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return "in a folder gbfix cannot write to"
    return None


def _put_back(written: list[SourceFile | Path]) -> list[Path]:
    """Restore the files' old bytes and remove the new files; the ones that could not be."""
    lost = []
    for target in reversed(written):
        try:
            if isinstance(target, Path):
                os.unlink(target)
            else:
                _replace(target.path, target.data)
        except OSError:
            lost.append(_path(target))
    return lost


def _create(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data`` atomically (a temporary file linked into place,
    which fails if the name was taken meanwhile), readable as the umask allows."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".gbfix")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.link(tmp, path)
    finally:
        os.unlink(tmp)


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
