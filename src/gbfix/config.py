"""``[tool.gbfix]`` in the nearest pyproject.toml, and the settings it resolves to with the flags.

Every key is optional; a command-line flag overrides the key (``--select`` replaces
``select``, it does not add to it). An unknown key or a bad value is a one-line error.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from gbfix.errors import GbfixError
from gbfix.suppress import ALL, parse_selectors

BACKENDS = ("own", "eager", "inductor")
DEFAULT_TIMEOUT = 900.0

# key -> (default, the flag that overrides it); in the order `gbfix config` prints them
DEFAULTS: dict[str, tuple[Any, str]] = {
    "entry": (None, "--entry"),
    "targets": ((".",), "PATHS"),
    "select": ((ALL,), "--select"),
    "ignore": ((), "--ignore"),
    "unsafe-fixes": (False, "--unsafe-fixes"),
    "fullgraph": (False, "--fullgraph"),
    "zero-recompiles": (False, "--zero-recompiles"),
    "backend": ("own", "--backend"),
    "timeout": (DEFAULT_TIMEOUT, "--timeout"),
}
KEYS = set(DEFAULTS)


@dataclass(frozen=True)
class Config:
    """The ``[tool.gbfix]`` table as written; None for a key that is not set."""

    root: Path  # the directory holding pyproject.toml; a config entry runs there, targets are relative to it
    entry: str | None = None
    timeout: float | None = None
    unsafe_fixes: bool | None = None
    fullgraph: bool | None = None
    zero_recompiles: bool | None = None
    backend: str | None = None
    targets: tuple[str, ...] | None = None
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] | None = None

    @property
    def path(self) -> Path:
        return self.root / "pyproject.toml"

    def get(self, key: str) -> Any:
        return getattr(self, key.replace("-", "_"))


def find_config(start: Path) -> Config | None:
    here = start.resolve()
    for directory in [here, *here.parents] if here.is_dir() else list(here.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return _load(candidate)
    return None


def _load(path: Path) -> Config | None:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise GbfixError(f"{path}: invalid TOML: {e}") from None
    section = data.get("tool", {}).get("gbfix")
    if section is None:
        return None
    if not isinstance(section, dict):
        raise GbfixError(f"{path}: [tool.gbfix] must be a table")
    unknown = set(section) - KEYS
    if unknown:
        raise GbfixError(f"{path}: unknown key(s) in [tool.gbfix]: {', '.join(sorted(unknown))} (known: {', '.join(DEFAULTS)})")
    values = {key.replace("-", "_"): _check(path, key, value) for key, value in section.items()}
    return Config(root=path.parent, **values)


def _check(path: Path, key: str, value: Any) -> Any:
    def bad(expected: str) -> GbfixError:
        return GbfixError(f"{path}: [tool.gbfix] {key}: expected {expected}, got {value!r}")

    if key == "entry":
        if not isinstance(value, str) or not value.strip():
            raise bad("a command string like \"python train.py\"")
        return value
    if key == "timeout":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise bad("a positive number of seconds")
        return float(value)
    if key in ("unsafe-fixes", "fullgraph", "zero-recompiles"):
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if key == "backend":
        if value not in BACKENDS:
            raise bad('"own", "eager" or "inductor"')
        return value
    if key == "targets":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
            raise bad("a non-empty list of paths like [\"src\"]")
        return tuple(value)
    # select / ignore
    if not isinstance(value, list):
        raise bad("a list of codes like [\"GB0059\", \"GB01\"]")
    try:
        return parse_selectors(value)
    except ValueError as e:
        raise GbfixError(f"{path}: [tool.gbfix] {key}: {e}") from None


@dataclass(frozen=True)
class Setting:
    value: Any
    source: str  # "default" | "pyproject" | "flag"
    origin: str  # "default", the pyproject.toml's path, or the flag (--ignore, PATHS)


@dataclass(frozen=True)
class Settings:
    """Each key's value and where it came from: a flag, [tool.gbfix], or the default."""

    config: Config | None
    values: dict[str, Setting]

    def __getitem__(self, key: str) -> Any:
        return self.values[key].value

    def targets(self) -> list[Path]:
        """The paths to work on: PATHS as given, else config targets (relative to its folder), else '.'."""
        setting = self.values["targets"]
        if setting.source != "pyproject":
            return [Path(t) for t in setting.value]
        assert self.config is not None
        return [_near(self.config.root / t) for t in setting.value]


def resolve(paths: tuple[Path, ...] | list[Path], flags: dict[str, Any], cwd: Path | None = None) -> Settings:
    """Settings from the flags (None: not given), the nearest config and the defaults.

    The config is the one nearest the first PATH, or the current folder without PATHS.
    ``flags`` has a key per option (``"unsafe-fixes"``...); ``targets`` come from ``paths``.
    """
    cwd = cwd or Path.cwd()
    config = find_config(Path(paths[0]) if paths else cwd)
    given = {**flags, "targets": tuple(str(p) for p in paths) or None}
    values = {}
    for key, (default, flag) in DEFAULTS.items():
        if given.get(key) is not None:
            negated = given[key] is False  # --no-unsafe-fixes, --no-fullgraph, --no-zero-recompiles
            values[key] = Setting(given[key], "flag", f"--no-{key}" if negated else flag)
        elif config is not None and config.get(key) is not None:
            values[key] = Setting(config.get(key), "pyproject", display(config.path, cwd))
        else:
            values[key] = Setting(default, "default", "default")
    return Settings(config, values)


def display(path: Path, cwd: Path) -> str:
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") and len(rel.split(os.sep)) > 3 else rel


def _near(path: Path) -> Path:
    """A config target as a path relative to the current folder when it is under it (for messages)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path
