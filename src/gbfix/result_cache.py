"""Reuse the result of an earlier run on the same code: ``fix``'s verified result
(`gbfix --dry-run`, then `--apply`) and ``check``'s detection run (a pre-commit hook
on an unchanged tree).

A result is filed under a key made of what decides it: gbfix's own code, the
interpreter, torch's version, the installed packages (the modification times of
their folders), the entry, the command and its options, the environment variables
that steer torch and Python, and the bytes of the target files. It is kept with the
hashes of the other user files the program loaded (its script, modules outside the
targets) and reused only while those are unchanged. Data files the program reads
are not part of the key: `--no-cache` runs the program again.

Results are pickled, not JSON: they hold the edits' LibCST nodes and the runs'
records, which JSON would have to rebuild field by field. Unpickling runs code, so
a file is loaded only when no one else could have written it: the folder is the
user's own and writable by no one else (created mode 0700), and every file carries
an HMAC-SHA256 of its bytes under a random key kept in that folder (mode 0600). A
file that fails either check is ignored and the program runs again.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import importlib.metadata
import json
import os
import pickle
import site
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from gbfix.entry import Entry
    from gbfix.sources import SourceFile

FORMAT = 2  # bump when what a cached result holds changes shape
KEEP = 64  # results kept; the least recently used go first
_ENV_PREFIXES = ("TORCH", "PYTORCH", "CUDA", "OMP_", "MKL_", "PYTHON", "LD_")
T = TypeVar("T")
REUSED = "the program and the files it loads are unchanged since an earlier run: its {what} is reused (--no-cache runs it again)"


def directory() -> Path:
    """``$GBFIX_CACHE_DIR``, else ``$XDG_CACHE_HOME/gbfix``, else ``~/.cache/gbfix``."""
    if os.environ.get("GBFIX_CACHE_DIR"):
        return Path(os.environ["GBFIX_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gbfix"


def _private(path: Path) -> bool:
    """Owned by this user and writable by no one else."""
    st = path.stat()
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def _folder() -> Path | None:
    """The cache folder, created private; None when it is not private (then no cache)."""
    folder = directory()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        return folder if _private(folder) else None
    except OSError:
        return None


def _secret(folder: Path) -> bytes | None:
    """The folder's signing key, made on first use; None when it is not private."""
    path = folder / ".key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError:
        return None
    else:
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
    try:
        if not _private(path) or path.stat().st_mode & 0o044:
            return None
        key = path.read_bytes()
    except OSError:
        return None
    return key if len(key) == 32 else None


def _signature(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@functools.cache
def _gbfix_code() -> str:
    """gbfix's own code: a changed recipe or verifier must not reuse old results."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def package_folders() -> set[str]:
    """Where this interpreter's installed packages live."""
    paths = sysconfig.get_paths()
    return {paths["purelib"], paths["platlib"], *site.getsitepackages(), site.getusersitepackages()}


def _installed() -> list[tuple[str, int]]:
    """The package folders and when they last changed (installing or removing a package does)."""
    out = []
    for folder in sorted(package_folders()):
        try:
            out.append((folder, os.stat(folder).st_mtime_ns))
        except OSError:
            pass
    return out


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return ""


def key(entry: Entry, options: object, targets: dict[Path, SourceFile]) -> str:
    """The key of the result of running ``entry`` with ``options`` (the command's: their
    repr is part of the key) on ``targets`` as they are now."""
    fixed = [
        FORMAT, _gbfix_code(), sys.version, sys.executable, _torch_version(), _installed(),
        entry.kind, entry.target, list(entry.args), str(entry.cwd), repr(options),
        sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)),
        sorted((str(p), _digest(s.data)) for p, s in targets.items()),
    ]
    return _digest(json.dumps(fixed).encode())


def _file_digest(path: str) -> str | None:
    try:
        return _digest(Path(path).read_bytes())
    except OSError:
        return None


def load(key: str) -> object | None:
    """The result filed under ``key`` if the other files it depends on are unchanged."""
    folder = _folder()
    secret = _secret(folder) if folder else None
    if folder is None or secret is None:
        return None
    path = folder / f"{key}.pickle"
    try:
        blob = path.read_bytes()
        signature, data = blob[:32], blob[32:]
        if not _private(path) or not hmac.compare_digest(signature, _signature(secret, data)):
            return None  # not written by this user's gbfix: never unpickled
        record = pickle.loads(data)
        if record["format"] != FORMAT or any(_file_digest(f) != d for f, d in record["files"].items()):
            return None
        os.utime(path)  # recently used
        result = record["result"]
    except Exception:  # noqa: BLE001 - missing, unreadable or from another gbfix: run again
        return None
    return result


def store(key: str, result: object, loaded: Iterable[str], targets: Iterable[Path]) -> None:
    """File ``result`` under ``key``, with the hashes of the files its runs ``loaded``
    that are not ``targets`` (those are in the key).

    Best effort: a cache that cannot be written costs the next run its speed, nothing else.
    """
    files = {f: _file_digest(f) for f in sorted(set(loaded) - {str(p) for p in targets})}
    if None in files.values():
        return  # a file the program loaded is gone already: nothing to check a later run against
    folder = _folder()
    secret = _secret(folder) if folder else None
    if folder is None or secret is None:
        return  # a folder others may write to: no cache
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".", suffix=".tmp")
    except OSError:
        return
    try:
        data = pickle.dumps({"format": FORMAT, "files": files, "result": result})
        with os.fdopen(fd, "wb") as f:
            f.write(_signature(secret, data) + data)
        os.replace(tmp, folder / f"{key}.pickle")
        kept = sorted(folder.glob("*.pickle"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[KEEP:]:
            old.unlink(missing_ok=True)
    except Exception:  # noqa: BLE001 - a full disk, or a result that does not pickle
        Path(tmp).unlink(missing_ok=True)


def reuse_or_run(
    key: str | None, kind: type[T], run: Callable[[], T], loaded: Callable[[T], Iterable[str]], targets: Iterable[Path]
) -> tuple[T, bool]:
    """The ``kind`` an earlier run filed under ``key`` and True; else ``run()``'s, filed
    with the files it ``loaded``, and False. No ``key``: no cache, ``run()`` every time."""
    if key is not None and isinstance(earlier := load(key), kind):
        return earlier, True
    value = run()
    if key is not None:
        store(key, value, loaded(value), targets)
    return value, False
