"""Static tests for item-to-tensor (GB0124) and remove-graph-break / remove-skip-frame
(GB0025 / GB4297): the rules/ examples, variants, and the cases each must decline."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gbfix import recipes, rules
from gbfix.recipes.explicit_break import RemoveGraphBreak, RemoveSkipFrame
from gbfix.recipes.scalar import AssertItemToTensor, ItemToTensor, TolistToTensors
from tests.helpers import rewrite_at

RULES = Path(__file__).resolve().parents[2] / "rules"


def at(source: str, needle: str, recipe=ItemToTensor, code: str = "GB0124") -> str | None:
    """Rewrite at the first occurrence of `needle`: the span Dynamo reports for the call."""
    source = textwrap.dedent(source)
    for number, line in enumerate(source.splitlines(), 1):
        col = line.find(needle)
        if col >= 0:
            return rewrite_at(source, recipe, number, col, col + len(needle), code)
    raise AssertionError(f"{needle!r} not in source")


def fn(body: str, params: str = "x: torch.Tensor, t: torch.Tensor") -> str:
    """A module with one function `f(params)` whose body is `body`."""
    return f"import torch\n\n\ndef f({params}):\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"


# ---- rules/ examples ----

# Where Dynamo reports each rule example's break: the first of these in the example.
RULE_SITES = {
    "GB0124": ("self.temperature.item()", "x.abs().max().item()", "int(mask.sum())", "(labels != -100).sum().item()"),
    "GB0025": ("torch._dynamo.graph_break(",),
    "GB4297": ("torch._dynamo.skip_frame(",),
    "GB0033": ("lengths.tolist()",),
}


@pytest.mark.parametrize("code", ["GB0124", "GB0025", "GB4297", "GB0033"])
def test_rule_examples(code):
    """Each example's after-block is what one of the code's recipes writes at the
    site (which one the engine keeps is the verifier's call, tested in test_rules)."""
    examples = [ex for ex in rules.parse(RULES / f"{code}.md") if ex.after is not None]
    checked = 0
    for ex in examples:
        needle = next((n for n in RULE_SITES[code] if n in ex.before), None)
        if needle is None:
            continue  # another module's recipe (tested with it)
        outs = [at(ex.before, needle, recipe, code) for recipe in recipes.candidates(code, unsafe=True)]
        assert ex.after in outs, ex.title
        checked += 1
    assert checked


# ---- item-to-tensor: rewrites ----


def test_inline_reduction_needs_no_reshape_or_clone():
    out = at(fn("return x * w.sum().item()", "x: torch.Tensor, w: torch.Tensor"), "w.sum().item()")
    assert "return x * w.sum().detach()\n" in out


def test_float_of_annotated_tensor():
    out = at(fn("return x - float(t)"), "float(t)")
    assert "return x - t.detach().reshape(())\n" in out


def test_int_of_integer_tensor_only():
    out = at(fn("n = int((m > 0).sum())\nreturn x * n", "x: torch.Tensor, m: torch.Tensor"), "int((m > 0).sum())")
    assert "n = (m > 0).sum().detach()\n" in out
    # int() of a tensor of unknown dtype would truncate: keep it
    assert at(fn("n = int(t)\nreturn x * n"), "int(t)") is None


def test_parameter_of_shape_one_is_reshaped():
    src = """
    import torch
    import torch.nn as nn


    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.alpha = nn.Parameter(torch.ones(1))
            self.proj = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = self.alpha.item()
            return self.proj(x) * a
    """
    # the use's statement calls a module first, which could update the parameter: snapshot it
    assert "a = self.alpha.detach().reshape(()).clone()\n" in at(src, "self.alpha.item()")


def test_scalar_buffer_is_zero_dim_and_submodule_output_is_a_tensor():
    src = """
    import torch
    import torch.nn as nn


    class Head(nn.Module):
        def __init__(self, temperature: float = 1.0):
            super().__init__()
            self.proj = nn.Linear(4, 4)
            self.register_buffer("temperature", torch.tensor(temperature))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            scale = self.temperature.item()
            logits = self.proj(x)
            return logits / scale
    """
    # a statement with a module call runs between the read and the use: snapshot the buffer
    assert "scale = self.temperature.detach().clone()\n" in at(src, "self.temperature.item()")


def test_user_module_and_function_annotated_to_return_tensors():
    src = """
    import torch
    import torch.nn as nn


    def norm(x: torch.Tensor) -> torch.Tensor:
        return x / x.norm()


    class Block(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()
            self.register_buffer("gain", torch.tensor(2.0))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.block(x) * self.gain.item() + norm(x) * self.gain.item()
    """
    out = at(src, "self.gain.item()")
    assert "self.block(x) * self.gain.detach() + norm(x) * self.gain.item()" in out
    src2 = textwrap.dedent(src).replace("self.block(x) * self.gain.item() + ", "")
    assert "return norm(x) * self.gain.detach()\n" in at(src2, "self.gain.item()")


def test_clone_when_the_source_may_change_before_a_use():
    body = """
    s = t.item()
    for _ in range(3):
        x = x * s
        t.add_(1)
    return x
    """
    assert "s = t.detach().reshape(()).clone()\n" in at(fn(body), "t.item()")


def test_no_clone_when_the_next_statement_uses_it_and_is_pure():
    body = """
    s = t.item()
    y = torch.softmax(x / s, dim=-1)
    return y
    """
    assert "s = t.detach().reshape(())\n" in at(fn(body), "t.item()")


def test_literal_arithmetic_runs_in_float64():
    out = at(fn("return x / (t.item() + 1e-6)"), "t.item()")
    assert "return x / (t.detach().reshape(()).double() + 1e-6)\n" in out
    out = at(fn("s = (t.item() - 1) / 4\nreturn x - s"), "t.item()")
    assert "s = (t.detach().reshape(()).double() - 1) / 4\n" in out


def test_negation_needs_a_float_read():
    body = "lo = t.float().item()\nreturn x.clamp(-lo, lo)"
    assert "lo = t.float().detach().reshape(()).double()\n" in at(fn(body), "t.float().item()")
    # a Python int 0 negated is +0, float64 -0: x / -s would flip infinities
    assert at(fn("lo = t.item()\nreturn x.clamp(-lo, lo)"), "t.item()") is None


@pytest.mark.parametrize(
    "use",
    [
        "x = x // s",
        "x = x % s",
        "x = s - x",
        "x = s * x",
        "x = x.clamp(max=s)",
        "x = torch.clamp(x, 0.0, s)",
        "x = x.masked_fill(x > 0, s)",
        "x = torch.where(x > 0, x, s)",
        "x = x + s + s",
    ],
)
def test_tensor_uses(use):
    assert "s = t.detach().reshape(())\n" in at(fn(f"s = t.item()\n{use}\nreturn x"), "t.item()")


def test_in_place_use_snapshots_the_source():
    # `x` could share memory with `t`: an in-place update must not change the value it applies
    assert "s = t.detach().reshape(()).clone()\n" in at(fn("s = t.item()\nx *= s\nreturn x"), "t.item()")
    assert "x *= t.detach().reshape(()).clone()\n" in at(fn("x *= t.item()\nreturn x"), "t.item()")
    assert "x *= t.sum().detach()\n" in at(fn("x *= t.sum().item()\nreturn x"), "t.sum().item()")


def test_unannotated_parameter_used_as_a_tensor():
    out = at(fn("return x.unsqueeze(0) * t.item()", "x, t"), "t.item()")
    assert "return x.unsqueeze(0) * t.detach().reshape(())\n" in out


def test_matmul_and_masked_fill_show_tensors():
    body = """
    scores = q @ k.transpose(-2, -1)
    scores = scores.masked_fill(mask, float("-inf"))
    return scores / t.item()
    """
    assert "return scores / t.detach().reshape(())\n" in at(fn(body, "q, k, mask, t"), "t.item()")


@pytest.mark.parametrize(
    "body, read, expected",
    [
        (  # a count in a local, divided into a loss
            "loss = torch.nn.functional.cross_entropy(x, y, reduction='sum')\nn = (y != -100).sum().item()\nreturn loss / n",
            "(y != -100).sum().item()",
            "n = (y != -100).sum().detach()\n",
        ),
        (  # inline, with int() of an integer tensor
            "loss = x.float().mean()\nreturn loss * int(y.long().sum())",
            "int(y.long().sum())",
            "return loss * y.long().sum().detach()\n",
        ),
        (  # an integer tensor of any shape: reshaped as .item() would check
            "return x.sum(dim=0).mean() / y.long().item()",
            "y.long().item()",
            "return x.sum(dim=0).mean() / y.long().detach().reshape(())\n",
        ),
        (  # a clamp bound on a 0-dim loss
            "return torch.nn.functional.mse_loss(x, x).clamp(max=(y > 0).sum().item())",
            "(y > 0).sum().item()",
            "return torch.nn.functional.mse_loss(x, x).clamp(max=(y > 0).sum().detach())\n",
        ),
    ],
)
def test_integer_read_with_a_zero_dim_floating_partner(body, read, expected):
    assert expected in at(fn(body, "x: torch.Tensor, y: torch.Tensor"), read)


@pytest.mark.parametrize(
    "body, read",
    [
        ("return x.float().mean() / y.float().sum().item()", "y.float().sum().item()"),  # a float read: float64 vs float32
        ("return x.float().mean() / ((y > 0).sum().item() + 1)", "(y > 0).sum().item()"),  # literal arithmetic: .double()
        ("n = (y > 0).sum().item()\nreturn x.float().mean() / n + x * (n + 1)", "(y > 0).sum().item()"),  # one use chained
        ("return x.sum() / (y > 0).sum().item()", "(y > 0).sum().item()"),  # x's dtype not shown
        ("return x.long().sum() / (y > 0).sum().item()", "(y > 0).sum().item()"),  # an integer partner
    ],
)
def test_zero_dim_partner_declines(body, read):
    assert at(fn(body, "x: torch.Tensor, y: torch.Tensor"), read) is None


@pytest.mark.parametrize(
    "body, read, expected",
    [
        ("return x.masked_fill(x > t.item(), 0.0)", "t.item()", "return x.masked_fill(x > t.detach().reshape(()), 0.0)\n"),
        ("thr = t.max().item()\nkeep = thr <= x\nreturn x * keep", "t.max().item()", "thr = t.max().detach()\n"),
        ("return torch.where(x != float(t), x, 0.0)", "float(t)", "return torch.where(x != t.detach().reshape(()), x, 0.0)\n"),
        ("return (x >= t.item() - 0.5).float()", "t.item()", "return (x >= t.detach().reshape(()).double() - 0.5).float()\n"),
    ],
)
def test_comparison_with_a_tensor(body, read, expected):
    assert expected in at(fn(body), read)


@pytest.mark.parametrize(
    "body",
    [
        "return x.long() > t.item()",  # an integer partner compares in another dtype
        "return 0 < t.item() < x",  # a chain calls bool()
        "return x.sum() > t.item()",  # 0-dim partner of an unknown dtype
        "s = t.item()\nreturn x if s > 0 else -x",  # compared with a literal: Python control flow
    ],
)
def test_comparison_declines(body):
    assert at(fn(body), "t.item()") is None


@pytest.mark.parametrize(
    "body, read, expected",
    [
        ("return x * (t.item() * scale)", "t.item()", "return x * (t.detach().reshape(()).double() * scale)\n"),
        ("return x - (n + t.item())", "t.item()", "return x - (n + t.detach().reshape(()).double())\n"),
        ("return x * (t.long().item() * scale)", "t.long().item()", "return x * (t.long().detach().reshape(()).double() * scale)\n"),
        (
            "s = t.float().sum().item() * n + 1e-6\nreturn x / s",
            "t.float().sum().item()",
            "s = t.float().sum().detach().double() * n + 1e-6\n",
        ),
    ],
)
def test_arithmetic_with_number_parameters(body, read, expected):
    assert expected in at(fn(body, "x: torch.Tensor, t: torch.Tensor, scale: float, n: int"), read)


@pytest.mark.parametrize(
    "body, read",
    [
        ("return x * (t.item() / n)", "t.item()"),  # n == 0 raises ZeroDivisionError in Python
        ("return x * (t.long().item() * n)", "t.long().item()"),  # int 0 * -n is 0, float64 gives -0.0
        ("return x * (t.item() * m)", "t.item()"),  # m is not annotated
        ("return x * (t.item() ** n)", "t.item()"),
    ],
)
def test_arithmetic_with_number_parameters_declines(body, read):
    assert at(fn(body, "x: torch.Tensor, t: torch.Tensor, scale: float, n: int, m"), read) is None


@pytest.mark.parametrize(
    "body, read, expected",
    [
        ("return x + torch.full((3,), t.item())", "t.item()", "return x + torch.full((3,), t.detach().reshape(()))\n"),
        ("m = t.max().item()\nreturn torch.full(x.shape, m, dtype=x.dtype)", "t.max().item()", "m = t.max().detach()\n"),
        ("return torch.full(size=(2,), fill_value=int(t.long().sum()))", "int(t.long().sum())", "fill_value=t.long().sum().detach()"),
        ("y = x.clone()\ny.fill_(t.item())\nreturn y", "t.item()", "y.fill_(t.detach().reshape(()))\n"),  # read as the call runs: no snapshot
    ],
)
def test_fill_values(body, read, expected):
    assert expected in at(fn(body), read)


@pytest.mark.parametrize(
    "body",
    [
        "return torch.full((3,), t.long().item() + 1)",  # .double() would make an int fill a float
        "return x.new_full((3,), t.item())",  # Dynamo breaks on a tensor fill here
        "return torch.full_like(x, t.item())",
        "return torch.full((int(t.item()),), 2.0)",  # a size
    ],
)
def test_fill_declines(body):
    assert at(fn(body), "t.item()" if "t.item()" in body else "t.long().item()") is None


def test_loss_normalize_fixture():
    source = (RULES.parent / "tests" / "fixtures" / "realworld" / "loss_normalize" / "losses.py").read_text()
    out = at(source, "(labels != ignore_index).sum().item()")
    assert "    num_tokens = (labels != ignore_index).sum().detach()\n    return loss_sum / num_tokens\n" in out


# ---- tolist-to-tensors ----


def test_gb0109_rule_example():
    (ex,) = rules.parse(RULES / "GB0109.md")
    assert at(ex.before, "logits.softmax(-1).tolist()", TolistToTensors, "GB0109") == ex.after


TOLIST_PARAMS = "x: torch.Tensor, t: torch.Tensor, experts: list[torch.Tensor], heads: tuple[torch.Tensor, ...]"


@pytest.mark.parametrize(
    "body, expected",
    [
        (  # a for loop over the list
            "ws = t.softmax(-1).tolist()\nfor w in ws:\n    x = x + w * x.flip(0)\nreturn x",
            "ws = t.softmax(-1).detach().unbind(0)",
        ),
        (  # zipped with a tuple of tensors in a list comprehension, and its length
            "ws = t.tolist()\nouts = [h * w for w, h in zip(ws, heads)]\nreturn torch.stack(outs) / len(ws)",
            "ws = t.detach().unbind(0)",
        ),
        (  # indexed, with literal arithmetic: float64 like Python's floats
            "ws = t.float().tolist()\nreturn x * (ws[0] + 1e-6) - x.clamp(max=ws[1])",
            "ws = t.float().detach().double().unbind(0)",
        ),
        (  # enumerated
            "ws = t.tolist()\nfor i, w in enumerate(ws):\n    x = x.roll(i, 0) + w * x\nreturn x",
            "ws = t.detach().unbind(0)",
        ),
        (  # an integer tensor's list (GB0033), zipped in a for statement
            "counts = (t > 0).long().sum(0).tolist()\ny = x\nfor c, e in zip(counts, experts):\n    y = y + e * c\nreturn y",
            "counts = (t > 0).long().sum(0).detach().unbind(0)",
        ),
    ],
)
def test_tolist_rewrites(body, expected):
    src = fn(body, TOLIST_PARAMS)
    read = next(line.strip().split(" = ", 1)[1] for line in src.splitlines() if ".tolist()" in line)
    assert f"    {expected}\n" in at(src, read, TolistToTensors, "GB0109")


@pytest.mark.parametrize(
    "body",
    [
        "ws = t.tolist()\nreturn ws",  # returned as a list
        "ws = t.tolist()\nprint(ws)\nreturn x",
        "ws = t.tolist()\nreturn x * ws[0], ws[1:]",  # sliced
        "ws = t.tolist()\nfor w in ws:\n    if w > 0:\n        x = x * w\nreturn x",  # Python control flow
        "ws = t.tolist()\nreturn x[ws[0]]",  # an index
        "ws = t.tolist()\nws = ws + [1.0]\nreturn x * ws[0]",  # bound twice
        "ws = t.tolist()\nw = 0.0\nfor w in ws:\n    x = x * w\nreturn x",  # the loop target is bound elsewhere
        "ws = t.tolist()\nreturn sum(w * e for w, *e in zip(ws, experts))",
        "ws = t.tolist()\nreturn sum(w * e for w, e in zip(ws, experts, strict=True))",
        "ws = t.tolist()\nreturn sum(w * e for w, e in zip(ws, x))",  # x's elements may be 0-dim
        "ws = t.tolist()\nfor i, w in enumerate(ws):\n    x = x[: int(w)]\nreturn x",  # a slice bound
        "ws = t.tolist()\nfor i, w in enumerate(ws, 1):\n    x = x * w\nreturn x",
        "return x * t.tolist()[0]",  # not bound to a name
        "ws = x.shape.numel()\nws = t.tolist()\nreturn x * ws[0]",
    ],
)
def test_tolist_declines(body):
    assert at(fn(body, TOLIST_PARAMS), "t.tolist()", TolistToTensors, "GB0109") is None


# ---- assert-item-to-tensor ----


@pytest.mark.parametrize(
    "body, read, expected",
    [
        ("assert t.max().item() < n, 'out of range'", "t.max().item()", "assert t.max().double() < n, 'out of range'"),
        ("assert 0 <= t.min().item()", "t.min().item()", "assert 0 <= t.min().double()"),
        ("assert float(t) != 0.5, 'bad' ' value'", "float(t)", "assert t.double() != 0.5, 'bad' ' value'"),
        ("assert (x - t).abs().max().item() <= self.tol", "(x - t).abs().max().item()", "assert (x - t).abs().max().double() <= self.tol"),
        ("assert int(t.long().sum()) == n", "int(t.long().sum())", "assert t.long().sum().double() == n"),
    ],
)
def test_assert_rewrites(body, read, expected):
    out = at(fn(f"{body}\nreturn x", "self, x: torch.Tensor, t: torch.Tensor, n: int"), read, AssertItemToTensor)
    assert f"    {expected}\n" in out


@pytest.mark.parametrize(
    "body",
    [
        "assert t.max().item() < n, f'{n} too small'",  # Dynamo breaks on a formatted message
        "assert t.max().item() < n, msg",
        "assert t.max().item() < x.max()",  # a tensor on the other side: its dtype would count
        "assert 0 <= t.max().item() < n",  # a chain calls bool() on the first part
        "assert t.max().item() < n and n > 0",
        "assert t.max().item() is not None",
        "assert t.max().item()",  # no comparison
        "ok = t.max().item() < n\nassert ok",
        "if t.max().item() < n:\n    raise AssertionError('x')",  # a branch, not an assert
    ],
)
def test_assert_declines(body):
    src = fn(f"{body}\nreturn x", "self, x: torch.Tensor, t: torch.Tensor, n: int, msg: str")
    assert at(src, "t.max().item()", AssertItemToTensor) is None


def test_assert_recipe_is_unsafe_and_after_item_to_tensor():
    assert AssertItemToTensor.safety == "unsafe" and AssertItemToTensor.codes == ("GB0124",)
    assert recipes.candidates("GB0124", unsafe=False).count(AssertItemToTensor) == 0
    # item-to-tensor leaves the assert alone: a comparison with a number is Python control flow
    assert at(fn("assert t.max().item() < n\nreturn x", "x: torch.Tensor, t: torch.Tensor, n: int"), "t.max().item()") is None


# ---- item-to-tensor: declines ----


@pytest.mark.parametrize(
    "body",
    [
        "s = t.item()\nif s > 0:\n    x = x * s\nreturn x",  # Python control flow
        "s = t.item()\nreturn x * s, s",  # returned
        "s = t.item()\nprint(f'{s:.3f}')\nreturn x * s",  # formatted
        "s = t.item()\nself.last = s\nreturn x * s",  # stored
        "s = t.item()\nreturn x[: int(s)]",  # an index
        "s = t.item()\nreturn x.new_full((2,), s)",  # a fill value outside the known functions
        "s = t.item()\nfor _ in range(s):\n    x = x * 2\nreturn x",  # a range bound
        "s = t.item()\ns = s * 2\nreturn x * s",  # bound twice
        "s = t.item()\ndel s\nreturn x",  # deleted
        "s: float = t.item()\nreturn x * s",  # annotated assignment
        "a = b = t.item()\nreturn x * a",  # several targets
        "return x ** t.item()",  # pow special-cases Python exponents
        "return t.item() / x",  # Python runs it as x.reciprocal() * s
        "return x * (1.0 / t.item())",  # ZeroDivisionError in Python, inf as a tensor
        "return x * (t.item() / 0)",
        "return x * float(t.item())",  # the read feeds a call
        "return x.sum() / t.item()",  # 0-dim partner: the tensor's dtype would count
        "return torch.nn.functional.mse_loss(x, x) * t.item()",  # a loss is 0-dim
        "return x[0] * t.item()",  # may be 0-dim
        "return x.long() + t.item()",  # integer partner: promotion would differ
        "return (x > 0) * t.item()",  # bool partner
        "return self.proj(x) * t.item()",  # not shown to be a tensor
        "return math.sqrt(2.0) * t.item()",  # a Python float
    ],
)
def test_declines(body):
    assert at(fn(body, "self, x: torch.Tensor, t: torch.Tensor"), "t.item()") is None


def test_declines_float_of_something_not_shown_to_be_a_tensor():
    # on another call `t` may be a plain float, which has no .detach()
    assert at(fn("return x * float(t)", "x: torch.Tensor, t"), "float(t)") is None


def test_declines_shadowed_float():
    assert at(fn("float = lambda v: 2.0\nreturn x * float(t)"), "float(t)") is None


def test_declines_unannotated_parameter_rebound():
    # x has two bindings, so a use of x as a tensor cannot vouch for the parameter
    assert at(fn("x = x * w.sum().item()\nreturn x", "x, w: torch.Tensor"), "w.sum().item()") is None


def test_parameter_shown_a_tensor_before_it_is_rebound():
    # `x.abs()` reads the argument itself (first statement, no loop): x holds a tensor there
    out = at(fn("s = x.abs().max().item()\ny = x * s\nx = x + 1\nreturn y, x", "x"), "x.abs().max().item()")
    assert "s = x.abs().max().detach()\n" in out


@pytest.mark.parametrize(
    "body",
    [
        "x = x + 1\ns = x.abs().max().item()\nreturn x * s",  # the evidence reads the new binding
        "for _ in range(2):\n    s = x.abs().max().item()\n    x = x * s\nreturn x",  # a loop: the 2nd pass reads it too
    ],
    ids=["after-rebinding", "in-a-loop"],
)
def test_declines_parameter_evidence_after_a_rebinding(body):
    assert at(fn(body, "x"), "x.abs().max().item()") is None


def test_declines_module_level_name():
    src = """
    import torch
    s = torch.ones(()).item()
    y = torch.ones(3) * s
    """
    assert at(src, "torch.ones(()).item()") is None


# ---- remove-graph-break / remove-skip-frame ----


def test_removes_the_line_with_its_leading_comment():
    src = fn("x = x + 1\n# split here\ntorch._dynamo.graph_break()  # why\nreturn x * 2", "x")
    out = at(src, "torch._dynamo.graph_break()", RemoveGraphBreak, "GB0025")
    assert out == fn("x = x + 1\nreturn x * 2", "x")


def test_only_statement_becomes_pass():
    src = fn("if x.dim() > 1:\n    # why\n    torch._dynamo.graph_break()  # note\nreturn x", "x")
    out = at(src, "torch._dynamo.graph_break()", RemoveGraphBreak, "GB0025")
    assert out == fn("if x.dim() > 1:\n    # why\n    pass\nreturn x", "x")
    src = fn("if x.dim() > 1: torch._dynamo.graph_break()\nreturn x", "x")
    out = at(src, "torch._dynamo.graph_break()", RemoveGraphBreak, "GB0025")
    assert out == fn("if x.dim() > 1: pass\nreturn x", "x")


def test_semicolons():
    src = fn("x = x + 1; torch._dynamo.graph_break()\nreturn x", "x")
    assert at(src, "torch._dynamo.graph_break()", RemoveGraphBreak, "GB0025") == fn("x = x + 1\nreturn x", "x")
    src = fn("torch._dynamo.graph_break(); x = x + 1\nreturn x", "x")
    assert at(src, "torch._dynamo.graph_break()", RemoveGraphBreak, "GB0025") == fn("x = x + 1\nreturn x", "x")


@pytest.mark.parametrize(
    "imports, call",
    [
        ("import torch._dynamo as dynamo", 'dynamo.graph_break(msg="here")'),
        ("from torch._dynamo import graph_break", "graph_break()"),
        ("from torch._dynamo import graph_break as gb", 'gb(f"step {x}")'),
        ("from torch._dynamo.decorators import graph_break", "graph_break('a' 'b')"),
    ],
)
def test_spellings(imports, call):
    src = f"{imports}\n\n\ndef f(x):\n    {call}\n    return x\n"
    assert at(src, call, RemoveGraphBreak, "GB0025") == f"{imports}\n\n\ndef f(x):\n    return x\n"


@pytest.mark.parametrize(
    "body",
    [
        "torch._dynamo.graph_break(msg=describe(x))\nreturn x",  # the message runs code
        "torch._dynamo.graph_break(f'{x!r}')\nreturn x",  # a conversion runs code
        "torch._dynamo.graph_break(*args)\nreturn x",
        "y = torch._dynamo.graph_break()\nreturn x",  # not a bare statement
        "torch._dynamo.graph_break() or x\nreturn x",
    ],
)
def test_graph_break_declines(body):
    assert at(fn(body, "x, args=()"), "torch._dynamo.graph_break(", RemoveGraphBreak, "GB0025") is None


def test_declines_shadowed_torch_and_the_other_function():
    brk, skip = "torch._dynamo.graph_break()", "torch._dynamo.skip_frame()"
    assert at(fn(f"{brk}\nreturn x", "x, torch"), brk, RemoveGraphBreak, "GB0025") is None
    assert at(fn(f"{skip}\nreturn x", "x"), skip, RemoveGraphBreak, "GB0025") is None
    assert at(fn(f"{brk}\nreturn x", "x"), brk, RemoveSkipFrame, "GB4297") is None


def test_skip_frame():
    src = fn("torch._dynamo.skip_frame('debug')\nreturn x", "x")
    assert at(src, "torch._dynamo.skip_frame('debug')", RemoveSkipFrame, "GB4297") == fn("return x", "x")


def test_recipe_metadata():
    assert ItemToTensor.safety == "safe" and ItemToTensor.codes == ("GB0124",)
    assert RemoveGraphBreak.safety == RemoveSkipFrame.safety == "unsafe"
    assert (RemoveGraphBreak.codes, RemoveSkipFrame.codes) == (("GB0025",), ("GB4297",))


def _declined(source: str, needle: str) -> str | None:
    """Why item-to-tensor declines at the first `needle` (None: silently)."""
    from tests.helpers import declined_at

    return declined_at(source, needle, ItemToTensor, "GB0124")


@pytest.mark.parametrize(
    "body, passed",
    [
        # the blind probe's augment step: the value goes to a helper of another module
        ("lam = t.item()\nout, y = mixup(x, y, lam)\nreturn out, y", "`lam` is passed to `mixup(...)`"),
        ("return scale(x, t.item())", "the value is passed to `scale(...)`"),  # inline
        ("return self.rescale(x, eps=t.item() + 1e-6)", "the value is passed to `self.rescale(...)`"),  # through literal arithmetic
    ],
)
def test_declines_a_value_passed_to_another_function_saying_so(body, passed):
    why = _declined(fn(body, "self, x: torch.Tensor, y, t: torch.Tensor"), "t.item()")
    assert why is not None and why.startswith(f"{passed}, whose uses of it are not followed"), why
    assert "keep it a 0-dim tensor by hand" in why


@pytest.mark.parametrize(
    "body",
    [
        "s = t.item()\nreturn x.new_full((2,), s)",  # a tensor method: a use it judges itself
        "s = t.item()\nreturn x[: int(s)]",  # a builtin's argument
        "s = t.item()\nif s > 0:\n    x = x * 2\nreturn x",  # no call
    ],
)
def test_other_declines_do_not_blame_a_call(body):
    assert "is passed to" not in (_declined(fn(body), "t.item()") or "")


# ---- max/min of the read and a literal: a clamp ----


@pytest.mark.parametrize(
    "body, read, expected",
    [
        # a count that divides, kept an integer tensor (1 is exact in any dtype)
        ("return x / max(t.item(), 1)", "t.item()", "return x / t.detach().reshape(()).clamp(min=1)\n"),
        ("return x / max(int(m.long().sum()), 1)", "int(m.long().sum())", "return x / m.long().sum().detach().clamp(min=1)\n"),
        # a float literal: in float64, as Python compares
        (
            "s = max(t.abs().max().item(), 1.0)\nreturn x.clamp(-s, s) / s",
            "t.abs().max().item()",
            "s = t.abs().max().detach().double().clamp(min=1.0)\n",
        ),
        # arithmetic inside, and a min
        ("return x * min(t.item() * 2, 1.5)", "t.item()", "return x * (t.detach().reshape(()).double() * 2).clamp(max=1.5)\n"),
    ],
)
def test_max_min_with_a_literal_become_clamps(body, read, expected):
    assert expected in at(fn(body, "x: torch.Tensor, t: torch.Tensor, m: torch.Tensor, k: float"), read)


@pytest.mark.parametrize(
    "body, read",
    [
        ("return x / max(1, t.item())", "t.item()"),  # the literal first: max(1, nan) is 1, clamp gives nan
        ("return x / max(t.item(), 0)", "t.item()"),  # max(-0.0, 0) is -0.0
        ("return x / max(t.item(), k)", "t.item()"),  # k may be nan or 0
        ("return x / max(t.item(), 1, 2)", "t.item()"),
        ("max = lambda a, b: a\nreturn x / max(t.item(), 1)", "t.item()"),  # not the builtin
        ("s = max(t.item(), 1)\nprint(s)\nreturn x / s", "t.item()"),  # a use no tensor op takes
    ],
)
def test_max_min_declines(body, read):
    assert at(fn(body, "x: torch.Tensor, t: torch.Tensor, m: torch.Tensor, k: float"), read) is None


@pytest.mark.parametrize(
    "body, read, expected",
    [
        # the read rebinds the name it reads (Imagen's dynamic threshold)
        (
            "s = torch.quantile(t.abs(), 0.9)\ns = max(s.max().item(), 1.0)\nreturn x.clamp(-s, s) / s",
            "s.max().item()",
            "s = s.max().detach().double().clamp(min=1.0)\n",
        ),
        ("n = t.sum(0)\nn = n.sum().item()\nreturn x / n", "n.sum().item()", "n = n.sum().detach()\n"),
    ],
)
def test_a_read_that_rebinds_its_name(body, read, expected):
    assert expected in at(fn(body), read)


@pytest.mark.parametrize(
    "body, read",
    [
        ("s = t.sum().item()\ns = 2.0\nreturn x / s", "t.sum().item()"),  # bound again after the read
        ("for _ in range(2):\n    s = t.abs()\n    s = s.sum().item()\n    x = x / s\nreturn x", "s.sum().item()"),  # a loop
    ],
)
def test_a_read_that_rebinds_its_name_declines(body, read):
    assert at(fn(body), read) is None
