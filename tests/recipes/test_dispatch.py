"""Static tests (no torch) of masked-assign-to-where and modulelist-index-to-stack
(dispatch): the rules/ examples, the real-world cases, variants, and the cases
each must decline."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gbfix import rules
from gbfix.recipes.dispatch import MaskedAssignToWhere, ModuleListIndexToStack
from tests.helpers import rewrite_at

ROOT = Path(__file__).resolve().parents[2]
REALWORLD = ROOT / "tests" / "fixtures" / "realworld"


def at(source: str, needle: str, recipe, code: str, nth: int = 0) -> str | None:
    """Rewrite at the nth occurrence of ``needle``, the span Dynamo reports."""
    source = textwrap.dedent(source)
    hits = [(n, col) for n, line in enumerate(source.splitlines(), 1) for col in _find(line, needle)]
    number, col = hits[nth]
    return rewrite_at(source, recipe, number, col, col + len(needle), code)


def _find(line: str, needle: str) -> list[int]:
    return [i for i in range(len(line)) if line.startswith(needle, i)]


def changed(before: str, after: str | None) -> list[str]:
    """The lines of ``after`` that are not in ``before``."""
    assert after is not None, "the recipe declined"
    old = set(textwrap.dedent(before).splitlines())
    return [line.strip() for line in after.splitlines() if line not in old]


def masked(src: str, needle: str = "x[m]", nth: int = 0) -> str | None:
    return at(src, needle, MaskedAssignToWhere, "GB0036", nth)


def indexed(src: str, needle: str) -> str | None:
    return at(src, needle, ModuleListIndexToStack, "GB0124")


# ---- rules/ examples and real-world cases ---------------------------------------------

# The span Dynamo reports in each of this module's rules/ examples.
SITES = {"GB0036": ("hidden[mask]", MaskedAssignToWhere), "GB0124": ("self.heads[task]", ModuleListIndexToStack)}


@pytest.mark.parametrize("code", sorted(SITES))
def test_rule_examples(code):
    needle, recipe = SITES[code]
    examples = [ex for ex in rules.parse(ROOT / "rules" / f"{code}.md") if needle in ex.before]
    assert examples
    for ex in examples:
        assert at(ex.before, needle, recipe, code) == ex.after, ex.title


def test_the_other_examples_on_these_pages_are_not_ours():
    # The masked-reduction and item-to-tensor sites on the same pages: no subscript assignment / module call.
    for code, needle in (("GB0036", "err[torch.isfinite(err)]"), ("GB0036", "losses[hard]"), ("GB0124", "int(mask.sum())")):
        ex = next(e for e in rules.parse(ROOT / "rules" / f"{code}.md") if needle in e.before)
        recipe = SITES[code][1]
        assert at(ex.before, needle, recipe, code) is None, ex.title


def test_switch_transformers_layer():
    src = (REALWORLD / "moe_switch_masks" / "layer.py").read_text()
    out = masked(src, "hidden_states[token_indices]")
    assert changed(src, out) == [
        "next_states = torch.where(token_indices[..., None], expert(hidden_states).to(next_states.dtype), next_states)"
    ]


def test_multilingual_adapters_and_heads():
    src = (REALWORLD / "modulelist_tensor_index" / "model.py").read_text()
    once = indexed(src, "self.adapters[lang_id]")
    assert changed(src, once) == ["h = torch.stack([m(h) for m in self.adapters])[lang_id]"]
    twice = indexed(once, "self.heads[lang_id]")
    assert changed(once, twice) == ["return torch.stack([m(h) for m in self.heads])[lang_id]"]


# ---- masked-assign-to-where: rewrites -------------------------------------------------

MOE = """
import torch


def moe(x, choice, experts, probs):
    out = {init}
    for i, expert in enumerate(experts):
        m = choice == i
        {line}
    return {ret}
"""


def moe(line: str, init: str = "torch.zeros_like(x)", ret: str = "out") -> str:
    return MOE.format(init=init, line=line, ret=ret)


def test_every_masked_operand_is_unmasked():
    src = moe("out[m] = expert(x[m]) * probs[m][:, None]")
    assert changed(src, masked(src)) == ["out = torch.where(m[..., None], expert(x) * probs[:, None], out)"]


def test_the_target_itself_on_the_right():
    src = moe("out[m] = torch.tanh(out[m]) + x[m]")
    assert changed(src, masked(src, "out[m]", 1)) == ["out = torch.where(m[..., None], torch.tanh(out) + x, out)"]


def test_site_on_the_target_subscript():
    src = moe("out[m] = expert(x[m])")
    assert changed(src, masked(src, "out[m]")) == ["out = torch.where(m[..., None], expert(x), out)"]


def test_parenthesised_selection_keeps_its_parentheses():
    src = moe("out[m] = (x[m]) * 2")
    assert changed(src, masked(src)) == ["out = torch.where(m[..., None], (x) * 2, out)"]


@pytest.mark.parametrize(
    "init",
    ["x.clone()", "x.detach().clone()", "torch.zeros(x.shape)", "x.new_zeros(x.shape)", "x * 0", "x.clone().to(x.dtype)"],
)
def test_fresh_buffers(init):
    src = moe("out[m] = expert(x[m])", init=init)
    assert masked(src) is not None


def test_annotated_fresh_buffer():
    src = moe("out[m] = expert(x[m])").replace("out = torch.zeros_like(x)", "out: torch.Tensor = torch.zeros_like(x)")
    assert masked(src) is not None


@pytest.mark.parametrize(
    "ret", ["out", "out.view(-1)", "[out, x]", "out.reshape(2, -1).sum(0)", "probs * out", "out.shape"]
)
def test_any_use_after_the_loop(ret):
    # after the loop every reference is to the final tensor
    assert masked(moe("out[m] = expert(x[m])", ret=ret)) is not None


def test_harmless_uses_inside_the_loop():
    src = """
    import torch


    def moe(x, choice, experts):
        out = torch.zeros_like(x)
        for i, expert in enumerate(experts):
            m = choice == i
            out[m] = expert(x[m]).to(out.dtype)
            out[0] = out.size(0) * 0
            out += 0
            y = out * 2 + (out > 0)
        return out
    """
    assert masked(src) is not None


# ---- masked-assign-to-where: declined -------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "out[m] += expert(x[m])",  # augmented: not handled
        "out[m] = expert(x[m], m.sum())",  # the mask used otherwise
        "out[m] = expert(x[m]) * m[:, None]",
        "out[m] = expert(x[~m])",  # another mask
        "out[~m] = expert(x[~m])",  # the mask is not a name
        "out[i, m] = expert(x[m])",  # more than the mask
        "out[m] = 0",  # nothing selected on the right
        "out[m] = y[m] = expert(x[m])",  # two targets
        "out.data[m] = expert(x[m])",  # not a name
    ],
)
def test_declined_statements(line):
    assert masked(moe(line), "x[" if "x[" in line else "out") is None


@pytest.mark.parametrize(
    "init",
    ["x", "x.view(-1, 4)", "x[0]", "x.to(torch.float32)", "x.contiguous()", "cache[0]", "foo(x)", "x.transpose(0, 1)"],
)
def test_declined_buffers_that_may_alias(init):
    assert masked(moe("out[m] = expert(x[m])", init=init)) is None


def test_declined_parameter_target():
    src = """
    import torch


    def moe(out, x, choice, experts):
        for i, expert in enumerate(experts):
            m = choice == i
            out[m] = expert(x[m])
        return out
    """
    assert masked(src) is None


def test_declined_attribute_target():
    src = """
    import torch


    class M(torch.nn.Module):
        def forward(self, x, m):
            self.buf[m] = self.expert(x[m])
            return self.buf
    """
    assert masked(src) is None


@pytest.mark.parametrize(
    "body",
    [
        "outs = [out]\nfor i, e in enumerate(experts):\n    m = c == i\n    out[m] = e(x[m])\nreturn outs",
        "view = out.view(-1)\nfor i, e in enumerate(experts):\n    m = c == i\n    out[m] = e(x[m])\nreturn view",
        "for i, e in enumerate(experts):\n    m = c == i\n    out[m] = e(x[m])\n    saved.append(out)\nreturn out",
        "for i, e in enumerate(experts):\n    saved.append(out[:1])\n    m = c == i\n    out[m] = e(x[m])\nreturn out",
        "get = lambda: out\nm = c == 0\nout[m] = experts[0](x[m])\nreturn get()",
        "m = c == 0\nout[m] = experts[0](x[m])\nreturn [out for _ in range(2)]",
        "global out\nm = c == 0\nout[m] = experts[0](x[m])",
        "for i, e in enumerate(experts):\n    m = c == i\n    out[m] = e(x[m])\n    out = out.T\nreturn out",
        "for out in outs:\n    m = c == 0\n    out[m] = experts[0](x[m])",
    ],
)
def test_declined_aliases(body):
    src = "import torch\n\n\ndef f(x, c, experts, saved, outs):\n    out = torch.zeros_like(x)\n"
    src += textwrap.indent(body, "    ") + "\n"
    assert masked(src) is None


def test_declined_global_buffer():
    src = """
    import torch

    out = torch.zeros(4, 8)


    def f(x, m, expert):
        out[m] = expert(x[m])
    """
    assert masked(src) is None


def test_declined_outside_a_function():
    src = """
    import torch

    out = torch.zeros(4, 8)
    out[m] = expert(x[m])
    """
    assert masked(src) is None


def test_declined_other_sites_on_the_line():
    # the break is a mask reduction, not the selection feeding the assignment
    src = moe("out[m] = expert(x[m]) + x[x > 0].sum()")
    assert masked(src, "x[x > 0]") is None


# ---- modulelist-index-to-stack: rewrites ------------------------------------------------

HEADS = """
import torch


class Heads(torch.nn.Module):
    def forward(self, h, task, mask=None):
        return {call}
"""


def test_keyword_arguments_and_literals_are_kept():
    src = HEADS.format(call="self.heads[task](h, mask=mask, scale=2.0)")
    assert changed(src, indexed(src, "self.heads[task]")) == [
        "return torch.stack([m(h, mask=mask, scale=2.0) for m in self.heads])[task]"
    ]


def test_loop_variable_avoids_the_argument_names():
    src = HEADS.format(call="self.heads[task](m)").replace("h, task", "m, task")
    assert changed(src, indexed(src, "self.heads[task]")) == [
        "return torch.stack([module(m) for module in self.heads])[task]"
    ]


def test_attribute_and_constant_subscript_index():
    src = HEADS.format(call="self.heads[batch.task](h) + self.heads[ids[0]](h)").replace("task,", "batch, ids,")
    assert changed(src, indexed(src, "self.heads[batch.task]")) == [
        "return torch.stack([m(h) for m in self.heads])[batch.task] + self.heads[ids[0]](h)"
    ]
    assert changed(src, indexed(src, "self.heads[ids[0]]")) == [
        "return self.heads[batch.task](h) + torch.stack([m(h) for m in self.heads])[ids[0]]"
    ]


def test_plain_function_and_parenthesised_call():
    src = """
    import torch


    def pick(layers, i, x):
        return (layers[i](x)).relu()
    """
    assert changed(src, indexed(src, "layers[i]")) == ["return (torch.stack([m(x) for m in layers])[i]).relu()"]


def test_adds_the_torch_import():
    src = "def pick(layers, i, x):\n    return layers[i](x)\n"
    out = indexed(src, "layers[i]")
    assert out is not None and out.startswith("import torch\n")


# ---- modulelist-index-to-stack: declined -------------------------------------------------


@pytest.mark.parametrize(
    "call, needle",
    [
        ("self.heads[task](*h)", "self.heads[task]"),  # starred
        ("self.heads[task](**h)", "self.heads[task]"),
        ("self.heads[task](self.norm(h))", "self.heads[task]"),  # evaluated once per module
        ("self.heads[task](h + 1)", "self.heads[task]"),
        ("self.heads[task.long()](h)", "self.heads[task.long()]"),  # the index is a call
        ("self.heads[0](h)", "self.heads[0]"),  # an int
        ("self.heads[-1](h)", "self.heads[-1]"),
        ("self.heads[task:](h)", "self.heads[task:]"),  # a slice
        ("self.heads[task][0](h)", "self.heads[task]"),  # not called directly
        ("f(self.heads[task])", "self.heads[task]"),
        ("self.heads[task](h)", "self.heads[task](h)"),  # the span is the whole call: a break inside it
        ("self.build()[task](h)", "self.build()[task]"),  # the container is a call
    ],
)
def test_declined_calls(call, needle):
    assert indexed(HEADS.format(call=call), needle) is None


@pytest.mark.parametrize("loop", ["for i in range(3):", "for i, _ in enumerate(self.layers):"])
def test_declined_int_counters(loop):
    src = f"""
    import torch


    class Stack(torch.nn.Module):
        def forward(self, x):
            {loop}
                x = self.layers[i](x)
            return x
    """
    assert indexed(src, "self.layers[i]") is None


def test_declined_in_a_class_body():
    src = """
    import torch


    class Table:
        layers = [torch.nn.Linear(2, 2)]
        i = torch.tensor(0)
        out = layers[i](torch.ones(2))
    """
    assert indexed(src, "layers[i]") is None


def test_recipes_are_unsafe_and_documented():
    for recipe, code in ((MaskedAssignToWhere, "GB0036"), (ModuleListIndexToStack, "GB0124")):
        assert recipe.safety == "unsafe" and recipe.codes == (code,) and recipe.rule == code
