"""Snapshots of what compiled callables returned, and their comparison (runs inside the child)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

# Past this many bytes of recorded tensors, later tensors are kept as a
# fingerprint (shape, dtype, sum, abs-sum) instead of a full copy.
FULL_COPY_BUDGET = 256 * 1024 * 1024


class Snapshotter:
    def __init__(self, budget: int = FULL_COPY_BUDGET) -> None:
        self.budget = budget

    def __call__(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return self._tensor(obj)
        if isinstance(obj, (bool, int, float, complex, str, bytes, type(None))):
            return obj
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return {"__type__": type(obj).__qualname__, **{f.name: self(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
        if isinstance(obj, dict):
            return {"__type__": "dict", **{str(k): self(v) for k, v in obj.items()}}
        if isinstance(obj, (list, tuple)):
            return [self(v) for v in obj]
        if isinstance(obj, torch.Size):
            return list(obj)
        return {"__type__": type(obj).__qualname__}

    def _tensor(self, t: torch.Tensor) -> Any:
        t = t.detach()
        if t.is_sparse or t.layout != torch.strided or t.device.type == "meta":
            return {"__tensor_meta__": [list(t.shape), str(t.dtype)]}
        size = t.numel() * t.element_size()
        if size <= self.budget:
            self.budget -= size
            return t.to("cpu", copy=True)
        wide = t.to("cpu", torch.float64) if not t.is_complex() else t.abs().to("cpu", torch.float64)
        return {"__fingerprint__": [list(t.shape), str(t.dtype), float(wide.sum()), float(wide.abs().sum())]}


def compare(expected: Any, actual: Any, where: str = "output") -> str | None:
    """First difference between two snapshots, or None.

    Floating point is compared with ``torch.testing.assert_close`` defaults,
    everything else exactly.
    """
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)):
            return f"{where}: {type(expected).__name__} became {type(actual).__name__}"
        try:
            if expected.is_floating_point() or expected.is_complex():
                torch.testing.assert_close(actual, expected, equal_nan=True)
            elif expected.shape != actual.shape or expected.dtype != actual.dtype or not torch.equal(actual, expected):
                return f"{where}: tensor values differ"
        except AssertionError as e:
            return f"{where}: {str(e).strip().splitlines()[0]}"
        return None
    if isinstance(expected, dict) and "__fingerprint__" in expected:
        if not (isinstance(actual, dict) and "__fingerprint__" in actual):
            return f"{where}: structure differs"
        (s1, d1, *v1), (s2, d2, *v2) = expected["__fingerprint__"], actual["__fingerprint__"]
        if (s1, d1) != (s2, d2) or not all(math.isclose(a, b, rel_tol=1.3e-6, abs_tol=1e-5) for a, b in zip(v1, v2)):
            return f"{where}: tensor fingerprint differs"
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or expected.keys() != actual.keys():
            return f"{where}: structure differs"
        for k in expected:
            diff = compare(expected[k], actual[k], f"{where}[{k!r}]")
            if diff:
                return diff
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(expected) != len(actual):
            return f"{where}: length differs"
        for i, (x, a) in enumerate(zip(expected, actual)):
            diff = compare(x, a, f"{where}[{i}]")
            if diff:
                return diff
        return None
    if isinstance(expected, float) and isinstance(actual, float):
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True)
        except AssertionError:
            return f"{where}: {expected!r} became {actual!r}"
        return None
    if type(expected) is not type(actual) or expected != actual:
        return f"{where}: {expected!r} became {actual!r}"
    return None


def compare_calls(expected: list[tuple[str, Any]], actual: list[tuple[str, Any]]) -> str | None:
    """Compare the (callable, output) sequence of two runs."""
    if len(expected) != len(actual):
        return f"compiled code was called {len(actual)} times, {len(expected)} before"
    for i, ((name_e, out_e), (name_a, out_a)) in enumerate(zip(expected, actual)):
        if name_e != name_a:
            return f"call {i}: {name_a} was called where {name_e} was before"
        diff = compare(out_e, out_a, f"call {i} of {name_e}")
        if diff:
            return diff
    return None
