"""What gbfix runs: the entry command, resolved from the flag, the config or the target itself."""

from __future__ import annotations

import ast
import os
import shlex
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gbfix.config import find_config
from gbfix.errors import GbfixError

HOW = "name it with --entry 'script.py ARGS' | 'python -m pkg.mod ARGS' | 'pytest ARGS', or set entry in [tool.gbfix]"


@dataclass(frozen=True)
class Entry:
    kind: Literal["script", "module", "pytest"]
    target: str  # script path, module name, or "pytest"
    args: tuple[str, ...]
    cwd: Path
    text: str  # as the user wrote it, for messages

    def to_json(self) -> dict:
        return {"kind": self.kind, "target": self.target, "args": list(self.args)}

    def own_file(self, targets: Collection[Path]) -> Path | None:
        """The file the program starts in (a script, or the module run with -m), when it is a target."""
        if self.kind == "script":
            candidates = [Path(self.target)]
        elif self.kind == "module":
            base = self.cwd.joinpath(*self.target.split("."))
            candidates = [base.with_suffix(".py"), base / "__main__.py"]
        else:
            return None
        found = [p for p in map(_real, candidates) if p in targets]
        return found[0] if found else None


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def parse(command: str, cwd: Path) -> Entry:
    try:
        words = shlex.split(command)
    except ValueError as e:
        raise GbfixError(f"cannot parse entry {command!r}: {e}") from None
    if not words:
        raise GbfixError(f"empty entry; {HOW}")
    head, rest = words[0], words[1:]
    if Path(head).name.startswith("python"):
        if rest[:1] == ["-m"] and len(rest) >= 2:
            module, args = rest[1], rest[2:]
            if module == "pytest":
                return Entry("pytest", "pytest", tuple(args), cwd, command)
            return Entry("module", module, tuple(args), cwd, command)
        if not rest or rest[0].startswith("-"):
            raise GbfixError(f"unsupported entry {command!r}; {HOW}")
        head, rest = rest[0], rest[1:]
    if Path(head).name in ("pytest", "py.test"):
        return Entry("pytest", "pytest", tuple(rest), cwd, command)
    if head.endswith(".py"):
        script = (cwd / head).resolve()
        if not script.is_file():
            raise GbfixError(f"entry script not found: {head}")
        return Entry("script", str(script), tuple(rest), cwd, command)
    raise GbfixError(f"unsupported entry {command!r}; {HOW}")


def _has_main_block(path: Path) -> bool:
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        return False
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test):
            return True
    return False


def resolve(command: str | None, paths: list[Path], cwd: Path) -> Entry:
    """--entry, else [tool.gbfix] entry, else a single target script with a __main__ block."""
    if command:
        return parse(command, cwd)
    config = find_config(paths[0] if paths else cwd)
    if config and config.entry:
        return parse(config.entry, config.root)
    if len(paths) == 1 and paths[0].suffix == ".py" and _has_main_block(paths[0]):
        return Entry("script", str(paths[0].resolve()), (), cwd, str(paths[0]))
    raise GbfixError(f"no entry to run; {HOW}")
