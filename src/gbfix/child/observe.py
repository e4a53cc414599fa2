"""Record the calls of chosen user functions (runs inside the child).

A wrapper recipe turns a user function into an opaque op whose fake
implementation must predict its outputs' shapes and dtypes; it derives them
from what real calls looked like. The functions are picked by file and first
line of their code object (decorators included), so every reference to them
is seen, however it was imported. A trace hook, not a wrapper: nothing in
the user's module changes.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
from typing import Any

MAX_CALLS = 16  # per function: enough to tell constant dims from input-derived ones


def describe(value: Any, depth: int = 0) -> dict[str, Any]:
    """A JSON-ready ValueSpec (see gbfix.records) of one value."""
    import torch

    if isinstance(value, torch.Tensor):
        return {
            "kind": "tensor",
            "shape": list(value.shape),
            "dtype": str(value.dtype),
            "device": str(value.device),
            "requires_grad": bool(value.requires_grad),
        }
    if isinstance(value, bool):
        return {"kind": "bool", "value": value}
    if isinstance(value, (int, float, str)):
        return {"kind": type(value).__name__, "value": value}
    if value is None:
        return {"kind": "none"}
    if isinstance(value, (tuple, list)) and depth < 3:
        return {"kind": type(value).__name__, "items": [describe(v, depth + 1) for v in value[:64]]}
    if isinstance(value, torch.nn.Module):
        return {"kind": "module", "type_name": type(value).__qualname__}
    return {"kind": "other", "type_name": f"{type(value).__module__}.{type(value).__qualname__}"}


class CallObserver:
    def __init__(self, targets: list[dict[str, Any]]) -> None:
        self._targets = {(os.path.realpath(t["file"]), int(t["line"])) for t in targets}
        self.calls: dict[tuple[str, int], list[dict[str, Any]]] = {key: [] for key in self._targets}
        self._files = {f for f, _ in self._targets}

    def _key(self, frame) -> tuple[str, int] | None:
        code = frame.f_code
        if code.co_filename not in self._files and os.path.realpath(code.co_filename) not in self._files:
            return None
        key = (os.path.realpath(code.co_filename), code.co_firstlineno)
        return key if key in self._targets else None

    def _trace(self, frame, event: str, arg: Any):
        """Global trace function: sees every Python call; traces only the targets'."""
        if event != "call" or frame.f_code.co_flags & inspect.CO_GENERATOR:
            return None
        key = self._key(frame)
        if key is None or len(self.calls[key]) >= MAX_CALLS:
            return None
        info = inspect.getargvalues(frame)
        names = list(info.args) + ([info.varargs] if info.varargs else []) + ([info.keywords] if info.keywords else [])
        args = [[n, describe(info.locals[n])] for n in names]

        def local(frame, event: str, arg: Any):
            if event == "return":
                self.calls[key].append({"args": args, "result": describe(arg)})
            return local

        return local

    def install(self) -> None:
        # A trace hook, not a profile hook: no events for C calls, and line
        # events only inside the observed functions.
        if self._targets:
            sys.settrace(self._trace)
            threading.settrace(self._trace)

    def results(self) -> list[dict[str, Any]]:
        return [{"file": f, "line": ln, "calls": calls} for (f, ln), calls in self.calls.items()]
