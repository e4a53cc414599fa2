"""lint's cache: each project file's facts, and what each file's compile calls reach.

One JSON file per project in gbfix's private cache folder (the one the run results use);
it holds only facts, nothing in it runs. A file's facts are kept with its modification
time and size and hold while both match. What a file's compile calls reach is kept with
the (mtime, size) of every file read to find it, and the project's list of files: it
holds while none of those changed. So a commit that touches a model file re-reads only
the compile calls whose code reached (or looked at) that file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from gbfix.lint.facts import Facts, Parsed, scan
from gbfix.lint.reach import Compiled, Reach, Reached

FORMAT = 2  # bump when what an entry holds changes shape
_RACY_NS = 2_000_000_000  # a file changed this recently may change again within its mtime's resolution


class LintCache:
    """One project's cache, read when lint starts and written back (if changed) when it ends."""

    def __init__(self, path: Path | None, files: tuple[Path, ...]):
        self._path = path
        self._names = {str(f) for f in files}
        self._digest = hashlib.sha256("\0".join(sorted(self._names)).encode()).hexdigest()
        self._files: dict[str, list] = {}  # path -> [mtime_ns, size, facts]
        self._reaches: dict[str, dict] = {}  # path of the compiling file -> {"digest", "stats", "reach"}
        self._changed = False
        self._facts: dict[Path, Facts | None] = {}
        if path is not None:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                if data["format"] == FORMAT:
                    self._files, self._reaches = dict(data["files"]), dict(data["reaches"])
            except (OSError, ValueError, KeyError, TypeError):
                pass  # no cache yet, or a damaged one: start afresh

    @classmethod
    def of(cls, key: str, files: tuple[Path, ...]) -> LintCache:
        """The cache of the project ``key`` names; in memory only under GBFIX_NO_CACHE."""
        if os.environ.get("GBFIX_NO_CACHE", "").lower() not in ("", "0", "false", "no", "off"):
            return cls(None, files)
        from gbfix.result_cache import _folder

        folder = _folder()
        name = hashlib.sha256(key.encode()).hexdigest()[:24]
        return cls(folder / "lint" / f"{name}.json" if folder is not None else None, files)

    # -- facts ------------------------------------------------------------------------------

    def facts(self, path: Path) -> Facts | None:
        """The file's facts; None when it cannot be read (gone, or not a file)."""
        if path not in self._facts:
            self._facts[path] = self._read_facts(path)
        return self._facts[path]

    def _read_facts(self, path: Path) -> Facts | None:
        try:
            st = path.stat()
            entry = self._files.get(str(path))
            if entry is not None and entry[:2] == [st.st_mtime_ns, st.st_size]:
                facts = _facts_from_json(entry[2])
                if facts is not None:
                    return facts
            facts = scan(path.read_bytes())
        except OSError:
            return None
        self._remember(path, st, facts)
        return facts

    def parsed(self, path: Path, parsed: Parsed) -> None:
        """Record what parsing ``path`` found."""
        facts = self.facts(path)
        if facts is None or facts.parsed == parsed:
            return
        self._facts[path] = facts = Facts(facts.may_compile, facts.mentions_config, parsed)
        try:
            self._remember(path, path.stat(), facts)
        except OSError:
            pass

    def _remember(self, path: Path, st: os.stat_result, facts: Facts) -> None:
        if self._path is not None and not _racy(st):
            self._files[str(path)] = [st.st_mtime_ns, st.st_size, asdict(facts)]
            self._changed = True

    # -- reaches ----------------------------------------------------------------------------

    def reach(self, path: Path) -> Reach | None:
        """What ``path``'s compile calls reach, if nothing it was found from has changed."""
        entry = self._reaches.get(str(path))
        try:
            if entry is None or entry["digest"] != self._digest:
                return None
            for name, stat in entry["stats"].items():
                st = os.stat(name)
                if stat != [st.st_mtime_ns, st.st_size]:
                    return None
            r = entry["reach"]
            return Reach(
                tuple(Compiled(**c) for c in r["regions"]), tuple(Reached(**x) for x in r["reached"]), tuple(r["files"]),
            )
        except (OSError, KeyError, TypeError, AttributeError):
            return None

    def remember_reach(self, path: Path, reach: Reach) -> None:
        if self._path is None:
            return
        stats = {}
        for name in reach.files:
            try:
                st = os.stat(name)
            except OSError:
                return
            if _racy(st):
                return
            stats[name] = [st.st_mtime_ns, st.st_size]
        self._reaches[str(path)] = {"digest": self._digest, "stats": stats, "reach": asdict(reach)}
        self._changed = True

    def save(self) -> None:
        """Write the cache back if anything changed (atomically: a reader sees the old or the new)."""
        if self._path is None or not self._changed:
            return
        # entries of files no longer in the project go (renamed, deleted): the cache does not grow
        files = {k: v for k, v in self._files.items() if k in self._names}
        reaches = {k: v for k, v in self._reaches.items() if k in self._names}
        try:
            self._path.parent.mkdir(mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self._path.parent, prefix=".", suffix=".tmp")
        except OSError:
            return  # a cache that cannot be written only costs time
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"format": FORMAT, "files": files, "reaches": reaches}, f, separators=(",", ":"))
            os.replace(tmp, self._path)
        except OSError:
            Path(tmp).unlink(missing_ok=True)


def _racy(st: os.stat_result) -> bool:
    return time.time_ns() - st.st_mtime_ns < _RACY_NS


def _facts_from_json(d: dict) -> Facts | None:
    try:
        p = d["parsed"]
        parsed = None if p is None else Parsed(tuple(p["error"]) if p["error"] else None, bool(p["compiles"]), tuple(p["config"]))
        return Facts(bool(d["may_compile"]), bool(d["mentions_config"]), parsed)
    except (KeyError, TypeError, ValueError):
        return None  # a damaged entry: read the file again
