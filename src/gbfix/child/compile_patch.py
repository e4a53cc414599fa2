"""Patch ``torch.compile`` in the child: choose the backend, record every call's output.

Patching the function covers ``torch.compile(fn)``, ``@torch.compile(...)``
decorators and ``nn.Module.compile()`` (which calls ``torch.compile`` itself),
as long as it happens before the entry imports the user's modules.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

import torch

from gbfix.child.outputs import Snapshotter

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


class CompileRecorder:
    def __init__(self, mode: str, fullgraph: bool | None) -> None:
        # mode "eager": detection (cheap backend, never fullgraph);
        # mode "own": the program's own settings (the final check);
        # mode "force:<backend>": the program's settings on that backend (gbfix --backend).
        self.mode = mode
        self.fullgraph = fullgraph
        self.calls: list[tuple[str, Any]] = []
        self.sites: list[tuple[str, int, bool]] = []
        self._snapshot = Snapshotter()
        self._real = torch.compile

    def install(self) -> None:
        torch.compile = self.compile

    def compile(self, model=None, **kwargs):
        # The user's line that asked for compilation: for nn.Module.compile()
        # the direct caller is torch itself.
        caller = sys._getframe(1)
        while caller.f_back is not None and caller.f_code.co_filename.startswith(_TORCH_DIR):
            caller = caller.f_back
        site = (caller.f_code.co_filename, caller.f_lineno)
        if model is None:  # @torch.compile(...) with arguments: a decorator factory
            return lambda m: self._compile(m, kwargs, site)
        return self._compile(model, kwargs, site)

    def _compile(self, model, kwargs: dict[str, Any], site: tuple[str, int]):
        # Whether the program's own settings are what detection uses anyway
        # (then a run on the "own" backend would repeat a detection run).
        like_eager = kwargs.get("backend") == "eager" and not any(kwargs.get(k) for k in ("mode", "options", "fullgraph"))
        self.sites.append((*site, like_eager))
        if self.mode == "eager":
            kwargs = {k: v for k, v in kwargs.items() if k not in ("backend", "mode", "options")}
            kwargs.update(backend="eager", fullgraph=False)
        elif self.mode.startswith("force:"):
            backend = self.mode.partition(":")[2]
            if kwargs.get("backend", "inductor") != backend:  # mode / options belong to the replaced backend
                kwargs = {k: v for k, v in kwargs.items() if k not in ("mode", "options")}
            kwargs = {**kwargs, "backend": backend}
            if self.fullgraph is not None:
                kwargs["fullgraph"] = self.fullgraph
        elif self.fullgraph is not None:
            kwargs = {**kwargs, "fullgraph": self.fullgraph}
        compiled = self._real(model, **kwargs)
        name = getattr(model, "__qualname__", None) or type(model).__qualname__
        return self._wrap(compiled, name)

    def _record(self, name: str, out: Any) -> None:
        self.calls.append((name, self._snapshot(out)))

    def _wrap(self, compiled, name: str):
        recorder = self
        if isinstance(compiled, torch.nn.Module):
            # Keep the OptimizedModule (users call .parameters(), .train() ...):
            # swap in a subclass whose __call__ also records.
            base = type(compiled)

            class Recorded(base):  # type: ignore[misc, valid-type]
                def __call__(self, *args, **kwargs):
                    out = super().__call__(*args, **kwargs)
                    recorder._record(name, out)
                    return out

            Recorded.__name__ = Recorded.__qualname__ = base.__name__
            compiled.__class__ = Recorded
            return compiled

        @functools.wraps(compiled)
        def recorded(*args, **kwargs):
            out = compiled(*args, **kwargs)
            recorder._record(name, out)
            return out

        return recorded
