"""item-for-size (GB0033 / GB0124): a tensor given where Python wants an int, read with
`.item()`. Static spellings here (where the read goes, what is declined); the real run,
joined with capture_scalar_outputs, in tests/test_size_item_run.py."""

from __future__ import annotations

import textwrap

import pytest

from gbfix.recipes.size_item import SizeItem
from tests.helpers import rewrite_at


def fix(source: str, needle: str, code: str = "GB0033") -> str | None:
    """The recipe at the span of ``needle``, as Dynamo reports the call or subscript."""
    source = textwrap.dedent(source)
    number, line = next((i, text) for i, text in enumerate(source.splitlines(), 1) if needle in text)
    col = line.index(needle)
    return rewrite_at(source, SizeItem, number, col, col + len(needle), code)


CACHE = """
    from typing import Optional

    import torch


    class Attention(torch.nn.Module):
        def forward(self, scores: torch.Tensor, mask: torch.Tensor, cache_position: Optional[torch.LongTensor] = None):
            b, h, q, _ = scores.shape
            kv_length = cache_position[-1] + 1
            w = scores.view(b, h, q, kv_length)
            w = w + mask[:, :, :, :kv_length]
            return w.softmax(-1).view(b * h, q, kv_length)
"""


@pytest.mark.parametrize("needle, code", [("scores.view(b, h, q, kv_length)", "GB0033"), ("mask[:, :, :, :kv_length]", "GB0124")])
def test_a_name_used_only_as_a_size_is_read_where_it_is_bound(needle, code):
    # both sites (a view size, a slice bound) propose the same one-line edit
    out = fix(CACHE, needle, code)
    # `cache_position[-1]` may have more dims: converted as the size does, by __index__
    assert "        kv_length = operator.index(cache_position[-1] + 1)\n" in out
    assert out.count("operator.index") == 1
    assert "\nimport operator\n" in out


FUNNEL = """
    import torch


    def relative_pos(pos: torch.Tensor, stride: int, pooled_pos=None, shift: int = 1) -> torch.Tensor:
        if pooled_pos is None:
            pooled_pos = pos
        ref_point = pooled_pos[0] - pos[0]
        max_dist = ref_point + shift * len(pooled_pos) * stride
        min_dist = pooled_pos[0] - pos[-1]
        return torch.arange(max_dist, min_dist - 1, -stride, dtype=torch.long, device=pos.device)
"""


def test_an_arange_bound_not_shown_0_dim_is_declined():
    # funnel's relative_pos: `pos[0]` may be a one-element 1-dim tensor, which arange refuses
    # (TypeError) and `.item()` would take
    assert fix(FUNNEL, "torch.arange(max_dist") is None


def test_an_arange_bound_shown_0_dim_is_read_with_item():
    source = FUNNEL.replace("pos[0] - pos[0]", "pos.min() - pos.min()").replace("pooled_pos[0] - pos[-1]", "pooled_pos.min() - pos.max()")
    out = fix(source, "torch.arange(max_dist")
    # `-stride` is an int parameter: left as it is
    assert "    return torch.arange(max_dist.item(), (min_dist - 1).item(), -stride, dtype=torch.long, device=pos.device)\n" in out


@pytest.mark.parametrize(
    "body, needle, expected",
    [
        # a method's tuple of sizes
        ("n = x.sum(0).long()[0]\nreturn x.reshape((n, -1))", "x.reshape((n", "x.reshape((operator.index(n), -1))"),
        # a new tensor's size
        ("return x.new_zeros(t.max() + 1)", "x.new_zeros(", "x.new_zeros((t.max() + 1).item())"),  # 0-dim: .item()
        # range() over a count
        ("return [x[i] for i in range(t.sum())]", "range(t.sum())", "range(t.sum().item())"),
        # a slice's lower bound and step
        ("return x[t.argmax():]", "x[t.argmax():]", "x[operator.index(t.argmax()):]"),
    ],
)
def test_spellings_of_a_size(body, needle, expected):
    source = "import torch\n\n\ndef f(x: torch.Tensor, t: torch.Tensor):\n" + textwrap.indent(body, "    ") + "\n"
    out = fix(source, needle)
    assert out is not None and expected in out


@pytest.mark.parametrize(
    "source, needle, expected",
    [
        # a sequence mask from lengths: `lengths` unannotated, but a full reduction of anything
        # with a `.max()` (a tensor, a numpy array) has `.item()`
        (
            "import torch\n\n\ndef seq_mask(lengths):\n    return torch.arange(lengths.max())[None, :] < lengths[:, None]\n",
            "torch.arange(lengths.max())", "torch.arange(lengths.max().item())[None, :]",
        ),
        # the same length bound to a name used twice as a size
        (
            "import torch\n\n\ndef seq_mask(lengths, device=None):\n    max_len = lengths.max()\n"
            "    return torch.arange(max_len, device=device).expand(len(lengths), max_len) < lengths.unsqueeze(1)\n",
            "torch.arange(max_len, device=device)", "    max_len = lengths.max().item()\n",
        ),
    ],
)
def test_lengths_as_sizes(source, needle, expected):
    out = fix(source, needle)
    assert out is not None and expected in out


def test_a_name_also_used_otherwise_is_read_at_the_size():
    # `kv_length * 0.5` would become a Python float: the binding stays a tensor
    source = CACHE.replace("return w.softmax(-1).view(b * h, q, kv_length)", "return w.softmax(-1) * (kv_length * 0.5)")
    out = fix(source, "scores.view(b, h, q, kv_length)")
    assert "kv_length = cache_position[-1] + 1\n" in out
    assert "w = scores.view(b, h, q, operator.index(kv_length))" in out


@pytest.mark.parametrize(
    "source, needle",
    [
        # `n` may be a Python int: `.item()` would raise
        ("import torch\n\n\ndef f(x, n):\n    return x.view(n, -1)\n", "x.view(n"),
        ("import torch\n\n\ndef f(x, n: int):\n    return torch.arange(n)\n", "torch.arange(n)"),
        # torch.narrow's first argument is the tensor, not a size
        ("import torch\n\n\ndef f(x: torch.Tensor, n: int):\n    return torch.narrow(x, 0, 0, n)\n", "torch.narrow("),
        # an index (not a slice bound) stays a tensor index, which Dynamo traces
        ("import torch\n\n\ndef f(x: torch.Tensor, t: torch.Tensor):\n    return x[t]\n", "x[t]"),
    ],
)
def test_declined(source, needle):
    assert fix(source, needle) is None
