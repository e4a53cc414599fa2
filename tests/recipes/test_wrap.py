"""Static tests (no torch) of wrap-custom-op and wrap-leaf-function (wrap): the
rules/ examples, the fake derived from observed calls, annotations, and the
cases each must decline."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from gbfix import rules
from gbfix.locate import ParsedFile
from gbfix.recipes.base import SiteContext
from gbfix.recipes.wrap import RECIPES, WrapCustomOp, WrapLeafFunction, WrapNonstrictTrace
from gbfix.records import Break, Cause, Frame, ObservedCall, Site, ValueSpec
from gbfix.sources import SourceFile
from tests.helpers import ALL_CAPABILITIES, rewrite_at

RULES = Path(__file__).resolve().parents[2] / "rules"


def T(*shape: int, dtype: str = "torch.float32", grad: bool = False, device: str = "cpu") -> ValueSpec:
    return ValueSpec("tensor", shape=shape, dtype=dtype, device=device, requires_grad=grad)


def V(value) -> ValueSpec:
    kind = "none" if value is None else type(value).__name__
    return ValueSpec(kind, value=value)


MODULE = ValueSpec("module", type_name="Block")


def call(result: ValueSpec, **args: ValueSpec) -> ObservedCall:
    return ObservedCall(tuple(args.items()), result)


def wrap(source: str, calls, recipe=WrapCustomOp, at: str = "BREAK", code: str = "GB0007") -> str | None:
    """Rewrite with the break on the line marked ``# BREAK`` (the whole line's
    statement) and the calls observed for the def enclosing it."""
    source = textwrap.dedent(source)
    lines = source.splitlines()
    line = next(n for n, text in enumerate(lines, 1) if text.rstrip().endswith(f"# {at}"))
    text = lines[line - 1]
    col = len(text) - len(text.lstrip())
    end = len(text[: text.index("#")].rstrip())
    first = [n for n, t in enumerate(lines[:line], 1) if t.lstrip().startswith(("def ", "async def "))][-1]
    while lines[first - 2].lstrip().startswith("@"):
        first -= 1  # the key is the def's first line, decorators included
    observed = {first: tuple(calls)} if calls is not None else None
    return rewrite_at(source, recipe, line, col, end, code, observed=observed)


def _example(code: str, title: str) -> rules.RuleExample:
    return next(e for e in rules.parse(RULES / f"{code}.md") if e.title.startswith(title))


def _site(source: str, needle: str) -> tuple[int, int, int]:
    for n, text in enumerate(source.splitlines(), 1):
        if needle in text:
            col = text.index(needle)
            return n, col, col + len(needle)
    raise AssertionError(needle)


# ---- the rules/ examples -------------------------------------------------------------


def test_gb0007_seeded_noise_example():
    ex = _example("GB0007", "reproducible noise")
    calls = tuple(call(T(2, 4), like=T(2, 4), seed=V(s)) for s in range(3))
    line, col, end = _site(ex.before, "torch.manual_seed(seed)")
    assert rewrite_at(ex.before, WrapCustomOp, line, col, end, "GB0007", observed={4: calls}) == ex.after


def test_gb0142_method_in_training_example():
    ex = _example("GB0142", "seeded noise in a method")
    calls = tuple(call(T(2, 4, grad=True), self=MODULE, h=T(2, 4, grad=True), step=V(s)) for s in range(3))
    line, col, end = _site(ex.before, "with torch.random.fork_rng():")
    end = col + len("with torch.random.fork_rng():") - 1
    observed = {10: calls}
    # the custom op takes neither a method nor a gradient; the leaf function takes both
    assert rewrite_at(ex.before, WrapCustomOp, line, col, end, "GB0142", observed=observed) is None
    assert rewrite_at(ex.before, WrapLeafFunction, line, col, end, "GB0142", observed=observed) == ex.after


def test_gb0156_audit_buffer_example():
    ex = _example("GB0156", "an audit log")
    calls = tuple(call(T(n, 3), x=T(n, 3)) for n in (2, 5, 5))
    line, col, end = _site(ex.before, 'audit.write(f"normalize {tuple(x.shape)}\\n")')
    assert rewrite_at(ex.before, WrapCustomOp, line, col, end, "GB0156", observed={8: calls}) == ex.after


# ---- wrap-custom-op --------------------------------------------------------------------

NUMPY_HELPER = """\
import numpy as np
import torch


def gamma_curve(x, gamma):
    levels = x.detach().cpu().numpy()
    out = np.interp(levels, np.linspace(0.0, 1.0, 17), np.linspace(0.0, 1.0, 17) ** gamma)  # BREAK
    return torch.from_numpy(out).to(x.dtype)


@torch.compile
def render(img):
    return gamma_curve(img, 2.2) * 255
"""


def test_numpy_helper_gets_annotations_and_a_batch_free_fake():
    calls = [call(T(n, 3), x=T(n, 3), gamma=V(2.2)) for n in (2, 2, 3)]
    out = wrap(NUMPY_HELPER, calls, code="GB0294")
    assert out is not None
    assert '@torch.library.custom_op(f"gbfix::gamma_curve_{__name__.replace(\'.\', \'_\')}", mutates_args=())' in out
    assert "def gamma_curve(x: torch.Tensor, gamma: float) -> torch.Tensor:" in out
    assert "@gamma_curve.register_fake\ndef _gamma_curve_fake(x, gamma):" in out
    assert "return torch.empty((x.shape[0], x.shape[1]), dtype=x.dtype, device=x.device)" in out
    # the fake follows the def, two blank lines apart, and the rest is untouched
    assert "\n\n\n@gamma_curve.register_fake" in out
    assert out.endswith("@torch.compile\ndef render(img):\n    return gamma_curve(img, 2.2) * 255\n")


def test_dims_from_other_arguments_ints_and_constants():
    source = """\
    import torch
    import zlib


    def pool(x, table, k):
        key = zlib.crc32(b"pool")  # BREAK
        return x[:, :k].sum(-1), table[:k].sum(0).expand(x.shape[0], 5, table.shape[1]).clone()
    """
    calls = [
        call(ValueSpec("tuple", items=(T(b), T(b, 5, 8))), x=T(b, 10), table=T(7, 8), k=V(k))
        for b, k in ((2, 3), (4, 6))
    ]
    out = wrap(source, calls)
    assert "def pool(x: torch.Tensor, table: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:" in out
    assert (
        "    return (\n"
        "        torch.empty((x.shape[0],), dtype=x.dtype, device=x.device),\n"
        "        torch.empty((x.shape[0], 5, table.shape[1]), dtype=x.dtype, device=x.device),\n"
        "    )\n"
    ) in out


def test_int_argument_predicts_a_dim_and_integer_dtype_stays_constant():
    source = """\
    import torch
    import zlib


    def hashed_ids(tokens, n):
        return torch.tensor([zlib.crc32(bytes([t])) % 97 for t in range(n)])  # BREAK
    """
    calls = [call(T(n, dtype="torch.int64"), tokens=T(2, 5, dtype="torch.int64"), n=V(n)) for n in (3, 4)]
    out = wrap(source, calls)
    assert "return torch.empty((n,), dtype=torch.int64, device=tokens.device)" in out


def test_zero_dim_output_and_a_constant_device_without_tensor_arguments():
    source = """\
    import torch
    import zlib


    def checksum(name):
        return torch.tensor(zlib.crc32(name.encode()))  # BREAK
    """
    out = wrap(source, [call(T(dtype="torch.int64"), name=V("layer1"))])
    assert "def checksum(name: str) -> torch.Tensor:" in out
    assert 'return torch.empty((), dtype=torch.int64, device="cpu")' in out


def test_existing_annotations_kept_and_optional_none():
    source = """\
    from typing import Optional

    import torch
    from torch import Tensor


    def noisy(x: Tensor, mask: Optional[torch.Tensor] = None, bias=None, *, seed: int = 0) -> Tensor:
        torch.manual_seed(seed)  # BREAK
        return torch.randn_like(x)
    """
    calls = [call(T(2, 3), x=T(2, 3), mask=V(None), bias=V(None), seed=V(1))]
    out = wrap(source, calls)
    # the header grew past 100 characters: one parameter a line
    assert (
        "def noisy(\n    x: Tensor,\n    mask: Optional[torch.Tensor] = None,\n"
        "    bias: torch.Tensor | None = None,\n    *,\n    seed: int = 0,\n) -> Tensor:\n" in out
    )
    assert "def _noisy_fake(x, mask=None, bias=None, *, seed=0):" in out


def test_private_name_op_and_fake():
    source = """\
    import torch


    def __rng_noise(x):
        torch.manual_seed(0)  # BREAK
        return torch.randn_like(x)
    """
    assert wrap(source, [call(T(3), x=T(3))]) is None  # a mangled name inside classes: declined
    out = wrap(source.replace("__rng_noise", "_rng_noise"), [call(T(3), x=T(3))])
    assert 'gbfix::rng_noise_{__name__' in out and "def _rng_noise_fake(x):" in out


def test_mixed_optional_tensor():
    source = """\
    import torch


    def f(x, mask=None):
        torch.manual_seed(0)  # BREAK
        return torch.randn_like(x)
    """
    calls = [call(T(3), x=T(3), mask=V(None)), call(T(3), x=T(3), mask=T(3, dtype="torch.bool"))]
    assert "def f(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:" in wrap(source, calls)


SEEDED = """\
import torch


def seeded_noise(like, seed):
    torch.manual_seed(seed)  # BREAK
    return torch.randn_like(like)


@torch.compile
def step(x, i):
    return x + seeded_noise(x, i)
"""


@pytest.mark.parametrize(
    "calls, why",
    [
        (None, "not observed yet"),
        ([], "never called"),
        ([call(T(2, 4), like=T(2, 4, grad=True), seed=V(0))], "a tensor argument requires grad"),
        ([call(T(2, 4, grad=True), like=T(2, 4), seed=V(0))], "the result requires grad"),
        ([call(V(3), like=T(2, 4), seed=V(0))], "returns an int"),
        ([call(V(None), like=T(2, 4), seed=V(0))], "returns None"),
        ([call(T(2, 4), like=T(2, 4), seed=V(0)), call(T(2, 4), like=T(2, 4), seed=V(1.5))], "int then float"),
        ([call(T(2, 4), like=T(2, 4), seed=ValueSpec("other", type_name="np.int64"))], "an unknown object"),
        ([call(T(5), like=T(2, 4), seed=V(0)), call(T(7), like=T(2, 4), seed=V(1))], "a dim nothing predicts"),
        ([call(T(2, 4), like=T(2, 4), seed=V(0)), call(T(2, 4, 1), like=T(2, 4), seed=V(1))], "the rank changes"),
        (
            [call(T(2), like=T(2, 4), seed=V(0)), call(T(2, dtype="torch.float16"), like=T(2, 4), seed=V(1))],
            "the dtype changes",
        ),
        ([call(T(2, 4), like=ValueSpec("tuple", items=(V(1), V(2))), seed=V(0))], "a tuple would become a list"),
        ([call(T(2, 4), seed=V(0))], "arguments that do not match the signature"),
    ],
)
def test_custom_op_declines_observations(calls, why):
    assert wrap(SEEDED, calls) is None, why


def test_seeded_accepted_baseline():
    out = wrap(SEEDED, [call(T(2, 4), like=T(2, 4), seed=V(s)) for s in (0, 1)])
    assert out is not None and "def seeded_noise(like: torch.Tensor, seed: int) -> torch.Tensor:" in out
    # a local named like a module-level variable of the script is still a fresh tensor
    shadowed = _seeded(BODY, "    out = torch.randn_like(like)\n    return out", "out = step(torch.ones(2, 4), 0)\n")
    assert wrap(shadowed, [call(T(2, 4), like=T(2, 4), seed=V(s)) for s in (0, 1)]) is not None


def _seeded(old: str, new: str, extra: str = "") -> str:
    assert old in SEEDED
    return SEEDED.replace(old, new) + extra


DEF = "def seeded_noise(like, seed):"
BODY = "    return torch.randn_like(like)"
SEED = "    torch.manual_seed(seed)  # BREAK"


@pytest.mark.parametrize(
    "source, why",
    [
        (_seeded(DEF, "@functools.cache\n" + DEF), "decorated"),
        (_seeded(DEF, "def seeded_noise(like, *seed):"), "*args"),
        (_seeded(DEF, "def seeded_noise(like, **seed):"), "**kwargs"),
        (_seeded(DEF, "def seeded_noise(like, /, seed):"), "positional-only"),
        (_seeded(DEF, "async " + DEF), "async"),
        (_seeded(BODY, "    yield torch.randn_like(like)"), "a generator"),
        (_seeded(BODY, "    return like"), "returns its argument"),
        (_seeded(BODY, "    return like.view(-1)"), "returns a view"),
        (_seeded(BODY, "    return TABLE[0]", "TABLE = []\n"), "returns a global"),
        (_seeded(BODY, "    like.add_(1)\n    return like * 2"), "in place"),
        (_seeded(BODY, "    like[0] = 1\n    return like * 2"), "item assignment"),
        (_seeded(BODY, "    like += 1\n    return like * 2"), "+= on a tensor"),
        (_seeded(BODY, "    h = like.view(-1)\n    h.zero_()\n    return h * 2"), "in place through a view"),
        (_seeded(BODY, "    return torch.mul(like, 2, out=like)"), "out="),
        (_seeded(SEED, "    global N\n" + SEED), "global"),
        (_seeded(BODY, "    if torch.compiler.is_compiling():\n        return like * 0\n" + BODY), "is_compiling"),
        (
            _seeded(BODY, '    warnings.warn("old", stacklevel=2)\n    return like * 2').replace(
                "import torch\n", "import warnings\nimport torch\n"
            ),
            "a warning pointing at the caller",
        ),
        (_seeded("    return x + seeded_noise(x, i)", "    seeded_noise(x, i)\n    return x"), "result discarded"),
        (_seeded(BODY, BODY, "\n\nseeded_noise = torch.no_grad()(seeded_noise)\n"), "rebound"),
        (_seeded(BODY, BODY, "\n\ndef _seeded_noise_fake():\n    pass\n"), "the fake's name is taken"),
        (_seeded(BODY, BODY, "\n\ncompiled = torch.compile(seeded_noise)\n"), "the compiled function itself"),
        (_seeded(DEF, "def seeded_noise(like, seed: float):"), "an annotation that disagrees"),
        (_seeded(DEF, "def seeded_noise(like, seed=(1,)):"), "a default the schema lacks"),
        (_seeded(DEF, 'def seeded_noise(like, seed) -> "Tensor":'), "a string return annotation"),
    ],
    ids=lambda v: v if isinstance(v, str) and "\n" not in v else "",
)
def test_custom_op_declines_source(source, why):
    assert wrap(source, [call(T(2, 4), like=T(2, 4), seed=V(s)) for s in (0, 1)]) is None, why


def test_declines_outside_a_module_level_function():
    nested = """\
    import torch


    def outer(x):
        def inner(y):
            torch.manual_seed(0)  # BREAK
            return torch.randn_like(y)
        return inner(x)
    """
    assert wrap(nested, [call(T(2), y=T(2))]) is None
    assert wrap(nested, [call(T(2), y=T(2))], WrapLeafFunction) is None
    lam = """\
    import torch


    def outer(x):
        f = lambda: torch.manual_seed(0)
        return x * 2 + f()
    """
    lam = textwrap.dedent(lam)
    line, col, end = _site(lam, "torch.manual_seed(0)")
    assert rewrite_at(lam, WrapCustomOp, line, col, end, "GB0007", observed={4: (call(T(2), x=T(2)),)}) is None
    at_module = """\
    import torch

    torch.manual_seed(0)  # BREAK
    """
    assert rewrite_at(at_module, WrapCustomOp, 3, 0, 20, "GB0007") is None


def test_capability_required():
    calls = [call(T(2, 4), like=T(2, 4), seed=V(0))]
    source = textwrap.dedent(SEEDED)
    line, col, end = _site(source, "torch.manual_seed(seed)")
    assert rewrite_at(source, WrapCustomOp, line, col, end, "GB0007", frozenset({"leaf_function"}), {4: calls}) is None


def test_observe_names_the_function_before_any_observation():
    from gbfix.locate import ParsedFile
    from gbfix.recipes.base import SiteContext
    from gbfix.records import Break, Cause, Frame, Site
    from gbfix.sources import SourceFile
    from tests.helpers import ALL_CAPABILITIES

    parsed = ParsedFile(SourceFile(Path("/virtual/x.py"), SEEDED.encode(), SEEDED, "utf-8"))
    brk = Break((Cause("GB0007", "GB0007", ""),), (Frame("/virtual/x.py", 5, 4, 27, "seeded_noise"),))
    ctx = SiteContext(Site(Path("/virtual/x.py"), 5, 4, 27, brk), parsed.node_at(5, 4, 27), parsed, ALL_CAPABILITIES)
    fn = WrapCustomOp().observe(ctx)
    assert fn is not None and fn.name.value == "seeded_noise"
    assert WrapCustomOp().propose(ctx) is None  # nothing observed yet
    # called straight from module-level code: the break's frame is the one Dynamo compiled
    module_level = Frame("/virtual/x.py", 12, 0, 9, "<module>")
    callers = (module_level, Frame("/usr/lib/torch/nn/module.py", 1, 0, 1, "_call_impl"))
    for caller in callers:
        entered = Site(ctx.site.path, 5, 4, 27, Break(brk.causes, (caller, *brk.stack)))
        assert WrapCustomOp().observe(SiteContext(entered, ctx.node, parsed, ALL_CAPABILITIES)) is None
    compiled_caller = Frame("/virtual/x.py", 11, 4, 30, "step")
    inlined = Site(ctx.site.path, 5, 4, 27, Break(brk.causes, (compiled_caller, *brk.stack)))
    assert WrapCustomOp().observe(SiteContext(inlined, ctx.node, parsed, ALL_CAPABILITIES)) is fn
    decorated = SEEDED.replace("def seeded_noise", "@torch.no_grad()\ndef seeded_noise")
    parsed = ParsedFile(SourceFile(Path("/virtual/x.py"), decorated.encode(), decorated, "utf-8"))
    ctx = SiteContext(ctx.site, parsed.node_at(6, 4, 27), parsed, ALL_CAPABILITIES)
    assert WrapCustomOp().observe(ctx) is None


# ---- wrap-leaf-function ----------------------------------------------------------------

BLOCK = """\
import threading

import torch
import torch.nn as nn

_lock = threading.Lock()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def stats(self, h):
        with _lock:  # BREAK
            out = self.proj(h)
        return out.mean(-1), out.amax(-1)

    def forward(self, x):
        mean, peak = self.stats(x)
        return mean + peak
"""


def test_leaf_method_with_module_and_gradient():
    calls = [call(ValueSpec("tuple", items=(T(b, grad=True), T(b, grad=True))), self=MODULE, h=T(b, 4)) for b in (2, 3)]
    out = wrap(BLOCK, calls, WrapLeafFunction, code="GB0142")
    assert "    @torch._dynamo.decorators.leaf_function\n    def stats(self, h):\n" in out
    assert (
        "\n\n    @stats.register_fake\n    def _stats_fake(self, h):\n"
        "        # Added by gbfix: the shapes, dtypes and devices of what stats returned in 2 uncompiled calls.\n"
        "        return (\n"
        "            torch.empty((h.shape[0],), dtype=h.dtype, device=h.device),\n"
        "            torch.empty((h.shape[0],), dtype=h.dtype, device=h.device),\n"
        "        )\n\n    def forward" in out
    )
    assert wrap(BLOCK, calls, WrapCustomOp, code="GB0142") is None  # a method


def _block(old: str, new: str) -> str:
    assert old in BLOCK
    return BLOCK.replace(old, new)


OUT = "            out = self.proj(h)"


@pytest.mark.parametrize(
    "source, why",
    [
        (_block(OUT, OUT + "\n            self.last = out"), "sets self.x"),
        (_block(OUT, OUT + "\n            self.proj.weight.mul_(0.5)"), "in place on a parameter"),
        (_block(OUT, OUT + "\n            nn.init.zeros_(self.proj.bias)"), "an in-place init on a parameter"),
        (_block(OUT, OUT + "\n            self.register_buffer('b', out)"), "register_buffer"),
        (_block(OUT, "            for layer in [self.proj]:\n                layer.weight.data = h"), "through a loop"),
        (_block("return out.mean(-1), out.amax(-1)", "return self.proj.weight, out"), "returns a parameter"),
    ],
    ids=lambda v: v if isinstance(v, str) and "\n" not in v else "",
)
def test_leaf_declines_module_state(source, why):
    calls = [call(ValueSpec("tuple", items=(T(2), T(2))), self=MODULE, h=T(2, 4))]
    assert wrap(source, calls, WrapLeafFunction, code="GB0142") is None, why


def test_leaf_declines_forward_and_decorated_classes_and_escaped_gradients():
    calls = [call(T(2), self=MODULE, x=T(2, 4))]
    forward = """\
    import torch


    class M(torch.nn.Module):
        def forward(self, x):
            torch.manual_seed(0)  # BREAK
            return x.sum(-1)
    """
    assert wrap(forward, calls, WrapLeafFunction) is None
    decorated = forward.replace("    class M", "    @dataclass\n    class M").replace("def forward", "def helper")
    assert wrap(decorated, calls, WrapLeafFunction) is None
    assert wrap(forward.replace("def forward", "def helper"), calls, WrapLeafFunction) is not None
    function = """\
    import torch

    W = torch.nn.Parameter(torch.ones(4))


    def scale(x):
        torch.manual_seed(0)  # BREAK
        return x * W
    """
    escaped = [call(T(2, 4, grad=True), x=T(2, 4))]
    assert wrap(function, escaped, WrapLeafFunction) is None
    assert wrap(function, [call(T(2, 4, grad=True), x=T(2, 4, grad=True))], WrapLeafFunction) is not None


def test_leaf_takes_what_the_custom_op_cannot():
    source = """\
    import torch


    def noise(x, shape):
        torch.manual_seed(0)  # BREAK
        return torch.randn(shape) + x.sum()
    """
    calls = [call(T(2, 3), x=T(1), shape=ValueSpec("tuple", items=(V(2), V(3))))]
    assert wrap(source, calls) is None
    out = wrap(source, calls, WrapLeafFunction)
    assert "def _noise_fake(x, shape):\n" in out and "return torch.empty((2, 3), dtype=x.dtype, device=x.device)" in out


# ---- wrap-custom-op with gradients: the recompute backward ------------------------------

GRAD = ALL_CAPABILITIES | {"custom_op_autograd"}


def _observed_at(source: str, line_text: str) -> int:
    """The first line of the def holding ``line_text`` (decorators included)."""
    lines = source.splitlines()
    at = next(n for n, t in enumerate(lines, 1) if line_text in t)
    return [n for n, t in enumerate(lines[:at], 1) if t.startswith("def ")][-1]


def test_gb0007_milestone_schedule_example():
    ex = _example("GB0007", "a milestone schedule")
    w = T(4, 4, grad=True)
    calls = tuple(call(T(3, 4, grad=True), x=T(3, 4), weight=w, step=V(s)) for s in range(5))
    line, col, end = _site(ex.before, "bisect.bisect_right(MILESTONES, step)")
    first = _observed_at(ex.before, "bisect.bisect_right")
    assert rewrite_at(ex.before, WrapCustomOp, line, col, end, "GB0007", GRAD, {first: calls}) == ex.after
    # the int step changes every call: a nonstrict trace would recompile each time
    assert rewrite_at(ex.before, WrapNonstrictTrace, line, col, end, "GB0007", GRAD, {first: calls}) is None
    # without the guard that turns autograd back on inside an op, gradients are declined
    assert rewrite_at(ex.before, WrapCustomOp, line, col, end, "GB0007", ALL_CAPABILITIES, {first: calls}) is None


def grad_wrap(source: str, calls, recipe=WrapCustomOp, code: str = "GB0007") -> str | None:
    source = textwrap.dedent(source)
    lines = source.splitlines()
    line = next(n for n, text in enumerate(lines, 1) if text.rstrip().endswith("# BREAK"))
    text = lines[line - 1]
    col, end = len(text) - len(text.lstrip()), len(text[: text.index("#")].rstrip())
    return rewrite_at(source, recipe, line, col, end, code, GRAD, {_observed_at(source, "# BREAK"): tuple(calls)})


POOLED = """\
import zlib

import torch


def pooled(h, ids, salt):
    rows = [zlib.crc32(f"{salt}:{i}".encode()) % h.shape[0] for i in ids.tolist()]  # BREAK
    picked = h.index_select(0, torch.tensor(rows))
    return picked.mean(0), torch.sigmoid(picked).amax(0)


@torch.compile
def step(h, ids):
    a, b = pooled(h * 2, ids, "v1")
    return (a * b).sum()
"""


def _pooled_calls(**changes):
    args = dict(h=T(6, 3, grad=True), ids=T(3, dtype="torch.int64"), salt=V("v1"))
    args.update(changes)
    return [call(ValueSpec("tuple", items=(T(3, grad=True), T(3, grad=True))), **args)]


def test_recompute_backward_for_a_tuple_with_an_int_tensor_and_a_string():
    out = grad_wrap(POOLED, _pooled_calls())
    assert "        inputs = [t.detach().requires_grad_(n) for t, n in zip((h,), needs_grad)]\n" in out
    assert "        (h,) = inputs\n        results = list(pooled._init_fn(h, ids, salt))\n" in out
    # the int tensor is saved with the float one, the string stays on ctx; only h gets a gradient
    assert (
        "def _pooled_setup(ctx, inputs, output):\n"
        "    h, ids, salt = inputs\n"
        "    ctx.save_for_backward(h, ids)\n"
        "    ctx.salt = salt\n"
    ) in out
    assert (
        "def _pooled_backward(ctx, *grads):\n"
        "    h, ids = ctx.saved_tensors\n"
        "    needs_grad = [ctx.needs_input_grad[i] for i in (0,)]\n"
        "    grads = _pooled_grad(list(grads), needs_grad, h, ids, ctx.salt)\n"
        "    return grads[0], None, None\n"
    ) in out
    assert "def _pooled_grad_fake(grad_outputs, needs_grad, h, ids, salt):\n    return [h.new_empty(h.shape)]\n" in out
    assert out.count("pooled.register_autograd(_pooled_backward, setup_context=_pooled_setup)\n") == 1
    compile(out, "pooled.py", "exec")


def _pooled(old: str, new: str, extra: str = "") -> str:
    assert old in POOLED
    return POOLED.replace(old, new) + extra


PICK = "    picked = h.index_select(0, torch.tensor(rows))"


@pytest.mark.parametrize(
    "source, why",
    [
        (_pooled(PICK, PICK + "\n    print(rows)"), "prints: it would print again in backward"),
        (_pooled(PICK, PICK + '\n    warnings.warn("x")', "import warnings\n"), "warns"),
        (_pooled(PICK, PICK + "\n    log.info(rows)", "import logging\nlog = logging.getLogger()\n"), "logs"),
        (_pooled(PICK, PICK + "\n    torch.manual_seed(0)"), "seeds the global generator"),
        (_pooled(PICK, "    picked = h.index_select(0, torch.tensor(rows)) + torch.randn(3)"), "draws noise"),
        (_pooled(PICK, "    picked = F.dropout(h.index_select(0, torch.tensor(rows)), 0.1)", "import torch.nn.functional as F\n"), "dropout"),
        (_pooled(PICK, PICK + "\n    picked = picked + torch.empty_like(picked).normal_()"), "an in-place RNG method"),
        (_pooled(PICK, PICK + "\n    picked = picked * SCALE", "SCALE = torch.nn.Parameter(torch.ones(3))\n"), "a global parameter"),
        (_pooled(PICK, PICK + "\n    picked = picked * SCALE", "SCALE = 2.0\nSCALE = 3.0\n"), "a global bound twice"),
        (_pooled(PICK, PICK + "\n    picked = picked * helper(picked)", "def helper(t):\n    return t\n"), "a user function"),
        (_pooled(PICK, PICK + "\n    AUDIT.write(salt)", "import io\nAUDIT = io.StringIO()\n"), "a global buffer"),
        (_pooled(PICK, PICK + "\n    t0 = time.perf_counter()", "import time\n"), "a clock"),
        (_pooled(PICK, PICK + "\n    CACHE[salt] = rows", "CACHE = {}\n"), "writes a global"),
        (_pooled("def pooled(h, ids, salt):", "def pooled(h, ids, grads):").replace("{salt}", "{grads}"), "a reserved name"),
        (_pooled("def pooled(h, ids, salt):", "def pooled(h, ids, needs_input_grad):").replace("{salt}", "{needs_input_grad}"), "a ctx attribute"),
        (_pooled(PICK, PICK, "\n\ndef _pooled_setup():\n    pass\n"), "the setup's name is taken"),
    ],
    ids=lambda v: v if isinstance(v, str) and "\n" not in v else "",
)
def test_recompute_backward_declines_what_would_differ(source, why):
    names = re.search(r"def pooled\((.*)\):", source).group(1).split(", ")
    specs = [T(6, 3, grad=True), T(3, dtype="torch.int64"), V("v1")]
    result = ValueSpec("tuple", items=(T(3, grad=True), T(3, grad=True)))
    assert grad_wrap(source, [call(result, **dict(zip(names, specs)))]) is None, why
    # without gradients nothing runs twice: the op alone is fine
    plain = [T(6, 3), T(3, dtype="torch.int64"), V("v1")]
    assert grad_wrap(source, [call(ValueSpec("tuple", items=(T(3), T(3))), **dict(zip(names, plain)))]) is not None


SDPA = """\
import torch
import torch.nn.functional as F


def attend(q, k, v):
    torch.manual_seed(0)  # BREAK
    return F.scaled_dot_product_attention(q, k, v, dropout_p=0.0)
"""


def test_recompute_backward_takes_pure_calls_only():
    grads = [call(T(2, 4, grad=True), q=T(2, 4, grad=True), k=T(2, 4), v=T(2, 4))]
    # the seed is an effect on the global generator: not again in backward
    assert grad_wrap(SDPA, grads) is None
    pure = SDPA.replace("    torch.manual_seed(0)  # BREAK\n", "    key = zlib.crc32(b'attend')  # BREAK\n")
    pure = "import zlib\n" + pure
    assert grad_wrap(pure, grads) is not None
    assert grad_wrap(pure.replace("dropout_p=0.0", "dropout_p=0.1"), grads) is None  # draws a dropout mask
    assert grad_wrap(pure.replace("dropout_p=0.0", "dropout_p=p"), grads) is None


def test_recompute_backward_on_numpy_and_constant_globals():
    source = NUMPY_HELPER.replace("np.linspace(0.0, 1.0, 17)", "XP").replace("import torch\n", "import torch\n\nXP = np.linspace(0.0, 1.0, 17)\n")
    source = source.replace("return torch.from_numpy(out).to(x.dtype)", "return x * torch.from_numpy(out).to(x.dtype)")
    calls = [call(T(n, 3, grad=True), x=T(n, 3, grad=True), gamma=V(2.2)) for n in (2, 3)]
    out = grad_wrap(source, calls, code="GB0294")
    assert out is not None and "results = [gamma_curve._init_fn(x, gamma)]" in out
    # a global array that something changes is not a constant
    assert grad_wrap(source + "\nXP.sort()\n", calls, code="GB0294") is None
    assert grad_wrap(source.replace("np.linspace(0.0, 1.0, 17)\n", "np.random.rand(17)\n"), calls, code="GB0294") is None
    # reading the tensor's data is fine for an op, not for a trace on fake tensors
    assert grad_wrap(source, calls, WrapNonstrictTrace, code="GB0294") is None


@pytest.mark.parametrize(
    "result, args, why",
    [
        (T(3, dtype="torch.int64"), dict(x=T(3, grad=True)), "an integer output eager leaves without a gradient"),
        (T(3), dict(x=T(3, grad=True)), "a float output that eager detached"),
        (T(3, grad=True), dict(x=ValueSpec("list", items=(T(3, grad=True),))), "a gradient into a list"),
        (T(3, grad=True), dict(x=T(3, dtype="torch.float16", grad=True), k=V(2.0)), ""),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_recompute_backward_observations(result, args, why):
    source = """\
    import zlib

    import torch


    def scale(x, k=2.0):
        key = zlib.crc32(b"scale")  # BREAK
        return x * k
    """
    args.setdefault("k", V(2.0))
    out = grad_wrap(source, [call(result, **args)])
    assert (out is None) == bool(why), why


def test_recompute_backward_declines_keyword_only_parameters():
    source = """\
    import zlib

    import torch


    def scale(x, *, k=2.0):
        key = zlib.crc32(b"scale")  # BREAK
        return x * k
    """
    assert grad_wrap(source, [call(T(3, grad=True), x=T(3, grad=True), k=V(2.0))]) is None
    assert grad_wrap(source, [call(T(3), x=T(3), k=V(2.0))]) is not None


def test_numpy_in_place_methods_write_into_the_tensor():
    source = """\
    import numpy as np
    import torch


    def ranks(x):
        levels = x.numpy()
        levels.sort()  # BREAK
        return torch.from_numpy(np.argsort(levels)).clone()
    """
    calls = [call(T(4, dtype="torch.int64"), x=T(4))]
    assert wrap(source, calls, code="GB0294") is None  # `levels` shares x's memory
    sorted_copy = source.replace("        levels.sort()  # BREAK\n", "        vals, idx = x.sort()  # BREAK\n")
    assert wrap(sorted_copy, calls, code="GB0294") is not None


# ---- wrap-nonstrict-trace --------------------------------------------------------------


def test_gb0007_feature_name_hash_example():
    ex = _example("GB0007", "a stable hash of a feature name")
    table = T(16, 4, grad=True)
    calls = tuple(call(T(2, 4, grad=True), h=T(2, 4, grad=True), table=table, name=V(n)) for n in ("age", "country") * 3)
    line, col, end = _site(ex.before, "zlib.crc32(name.encode())")
    first = _observed_at(ex.before, "zlib.crc32")
    assert rewrite_at(ex.before, WrapNonstrictTrace, line, col, end, "GB0007", observed={first: calls}) == ex.after
    # preferred: it keeps the tensor code traced, where the others make it opaque
    assert RECIPES[0] is WrapNonstrictTrace
    assert rewrite_at(ex.before, WrapNonstrictTrace, line, col, end, "GB0007", frozenset({"custom_op"}), {first: calls}) is None


NAMED = """\
import zlib

import torch


def feature_bias(h, table, name, k):
    row = zlib.crc32(name.encode()) % table.shape[0]  # BREAK
    return h * k + table[row]
"""


def _named_calls(ks=(1, 1), names=("a", "b")):
    return [call(T(2, 4), h=T(2, 4), table=T(16, 4), name=V(n), k=V(k)) for n, k in zip(names, ks)]


def test_nonstrict_trace_decorates_only():
    out = grad_wrap(NAMED, _named_calls(), WrapNonstrictTrace)
    assert out == NAMED.replace("def feature_bias", "@torch._dynamo.nonstrict_trace\ndef feature_bias")


@pytest.mark.parametrize(
    "old, new, calls, why",
    [
        ("", "", _named_calls(ks=(1, 2)), "an int that changes: a recompile per value"),
        ("", "", _named_calls(ks=(0.5, 0.25)), "a float that changes: a recompile per value"),
        ("    return h * k", "    return h * h.sum().item() * k", _named_calls(), "reads a tensor's data"),
        ("    return h * k", "    return h * torch.tensor(h.tolist()) * k", _named_calls(), "reads a tensor's data"),
        ("    return h * k", "    print(name)\n    return h * k", _named_calls(), "prints once per compile"),
        ("    return h * k", "    return torch.randn_like(h) * k", _named_calls(), "noise frozen into the graph"),
        ("    return h * k", "    return h * STEP * k", _named_calls(), "a global that changes"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.count(" ") > 1 else "",
)
def test_nonstrict_trace_declines(old, new, calls, why):
    source = NAMED.replace(old, new) + ("STEP = 0\n\n\ndef tick():\n    global STEP\n    STEP += 1\n" if "STEP" in new else "")
    assert grad_wrap(source, calls, WrapNonstrictTrace) is None, why


def test_nonstrict_trace_takes_names_that_change_and_constant_globals():
    assert grad_wrap(NAMED, _named_calls(names=("age", "country", "zip"), ks=(1, 1, 1)), WrapNonstrictTrace)
    source = NAMED.replace("    return h * k", "    return h * SCALE * k") + "\nSCALE = 0.5\n"
    assert grad_wrap(source, _named_calls(), WrapNonstrictTrace) is not None


def test_a_decline_says_why():
    """``Recipe.propose`` gives None and keeps the reason a recipe raised ``Decline`` with."""
    source = _seeded(SEED, "    global N\n" + SEED)
    line, col, end = _site(source, "torch.manual_seed")
    parsed = ParsedFile(SourceFile(Path("/virtual/example.py"), source.encode(), source, "utf-8"))
    brk = Break(causes=(Cause("GB0007", "GB0007", ""),), stack=(Frame("/virtual/example.py", line, col, end, "f"),))
    site = Site(Path("/virtual/example.py"), line, col, end, brk)
    recipe = WrapCustomOp()
    ctx = SiteContext(site, parsed.node_at(line, col, end), parsed, ALL_CAPABILITIES, {})
    assert recipe.propose(ctx) is None
    assert recipe.declined == "rebinds a global"
