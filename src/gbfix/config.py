"""``[tool.gbfix]`` in the nearest pyproject.toml."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from gbfix.errors import GbfixError

KEYS = {"entry", "timeout", "unsafe-fixes"}


@dataclass(frozen=True)
class Config:
    root: Path  # the directory holding pyproject.toml; a config entry runs there
    entry: str | None = None
    timeout: float | None = None
    unsafe_fixes: bool = False


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
    unknown = set(section) - KEYS
    if unknown:
        raise GbfixError(f"{path}: unknown key(s) in [tool.gbfix]: {', '.join(sorted(unknown))}")
    return Config(
        root=path.parent,
        entry=section.get("entry"),
        timeout=section.get("timeout"),
        unsafe_fixes=bool(section.get("unsafe-fixes", False)),
    )
