"""GB codes from the *installed* torch's graph_break_registry.json, read without importing torch."""

from __future__ import annotations

import importlib.util
import json
import re
from functools import lru_cache
from pathlib import Path

_DOCS_CODE = re.compile(r"/gb/(gb\d{4})\.html", re.IGNORECASE)


def torch_dir() -> Path | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@lru_cache(maxsize=1)
def registry() -> dict[str, list[dict]]:
    """``{"GB0059": [{"Gb_type", "Context", "Explanation", "Hints"}, ...]}``; empty if absent."""
    root = torch_dir()
    path = root / "_dynamo" / "graph_break_registry.json" if root else None
    if path is None or not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _by_type() -> dict[str, str]:
    # A code lists its current gb_type first and renamed (older) ones after;
    # a current name wins over an old name that another code once used.
    current = {versions[0]["Gb_type"]: code for code, versions in sorted(registry().items())}
    older = {
        v["Gb_type"]: code for code, versions in sorted(registry().items()) for v in versions[1:]
    }
    return {**older, **current}


def code_for(gb_type: str, message: str = "") -> str | None:
    """The GB code of a break: by gb_type in the installed registry, else from the docs URL."""
    code = _by_type().get(gb_type)
    if code is None:
        m = _DOCS_CODE.search(message)
        code = m.group(1).upper() if m else None
    return code


def entry(code: str) -> dict | None:
    versions = registry().get(code.upper())
    return versions[0] if versions else None
