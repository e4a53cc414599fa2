"""item-for-size (GB0033 / GB0124): a tensor given where Python wants an int, read with
`.item()`. Static spellings here (where the read goes, what is declined); the real run,
joined with capture_scalar_outputs, in tests/test_size_item_run.py."""

from __future__ import annotations

import textwrap

import pytest

from gbfix.recipes.size_item import SizeItem
from tests.helpers import declined_at, rewrite_at


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


def test_an_arange_bound_not_shown_0_dim_has_its_dim_tested():
    # funnel's relative_pos: `pos[0]` may be a one-element 1-dim tensor, which arange refuses
    # (TypeError) and `.item()` would take: `.item()` only for a 0-dim one, the rest as it was
    out = fix(FUNNEL, "torch.arange(max_dist")
    assert out is not None
    assert (  # too long for a line: one argument a line, as black lays it out
        "    return torch.arange(\n"
        "        max_dist.item() if max_dist.dim() == 0 else max_dist,\n"
        "        (min_dist - 1).item() if min_dist.dim() == 0 else min_dist - 1,\n"
        "        -stride,\n"
        "        dtype=torch.long,\n"
        "        device=pos.device,\n"
        "    )\n"
    ) in out
    assert "operator" not in out


def test_an_arange_bound_shown_0_dim_is_read_with_item():
    source = FUNNEL.replace("pos[0] - pos[0]", "pos.min() - pos.min()").replace("pooled_pos[0] - pos[-1]", "pooled_pos.min() - pos.max()")
    out = fix(source, "torch.arange(max_dist")
    # `-stride` is an int parameter: left as it is
    assert (
        "    return torch.arange(\n"
        "        max_dist.item(),\n"
        "        (min_dist - 1).item(),\n"
        "        -stride,\n"
        "        dtype=torch.long,\n"
        "        device=pos.device,\n"
        "    )\n"
    ) in out


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


@pytest.mark.parametrize(
    "body, needle, expected",
    [
        # a name bound to tensor arithmetic
        ("n = x[0] * 2 + t[-1]\nreturn torch.arange(n)", "torch.arange(n)", "torch.arange(n.item() if n.dim() == 0 else n)"),
        # a name less a number, and a number times a name: the same dim as the name's
        (
            "n = x[0] + 1\nreturn torch.arange(n - 1, dtype=torch.long)", "torch.arange(n - 1",
            "torch.arange((n - 1).item() if n.dim() == 0 else n - 1, dtype=torch.long)",
        ),
        ("n = t[0]\nreturn torch.arange(0, 2 * n)", "torch.arange(0", "torch.arange(0, (2 * n).item() if n.dim() == 0 else 2 * n)"),
        # a number bound to a name
        ("scale = 0.5\nn = t[0]\nreturn torch.arange(n * scale)", "torch.arange(n", "torch.arange((n * scale).item() if n.dim() == 0 else n * scale)"),
        # keyword bounds
        ("n = x[-1]\nreturn torch.arange(start=0, end=n)", "torch.arange(start", "torch.arange(start=0, end=n.item() if n.dim() == 0 else n)"),
        # the source's parentheses go around the conditional
        ("n = x[-1]\nreturn torch.arange((n - 1), 5)", "torch.arange((n", "torch.arange(((n - 1).item() if n.dim() == 0 else n - 1), 5)"),
        # a name used twice as a bound: its value's dim tested where it is bound
        (
            "m = x[0]\nn = m - 1\nreturn torch.arange(n), torch.arange(n, 2 * n)", "torch.arange(n)",
            "    n = (m - 1).item() if m.dim() == 0 else m - 1\n    return torch.arange(n), torch.arange(n, 2 * n)\n",
        ),
        # ... and where it is used when the value's dim cannot be tested
        (
            "n = x[0] + t[0]\nreturn torch.arange(n), torch.arange(n, 2 * n)", "torch.arange(n)",
            "    n = x[0] + t[0]\n    return torch.arange(n.item() if n.dim() == 0 else n), torch.arange(n, 2 * n)\n",
        ),
    ],
)
def test_spellings_of_an_arange_bound_of_any_dim(body, needle, expected):
    source = "import torch\n\n\ndef f(x: torch.Tensor, t: torch.Tensor):\n" + textwrap.indent(body, "    ") + "\n"
    out = fix(source, needle)
    assert out is not None and expected in out


def test_an_attribute_arange_bound_has_its_dim_tested():
    source = """
        import torch


        class Positions(torch.nn.Module):
            def __init__(self, length):
                super().__init__()
                self.length = torch.as_tensor(length)

            def forward(self, x: torch.Tensor):
                return x + torch.arange(self.length)
    """
    out = fix(source, "torch.arange(self.length)")
    assert out is not None
    assert "        return x + torch.arange(self.length.item() if self.length.dim() == 0 else self.length)\n" in out


@pytest.mark.parametrize(
    "body, needle",
    [
        # a call's result: testing its dim would call it twice
        ("return torch.arange(g(x))", "torch.arange("),
        ("return torch.arange(t.sum(0))", "torch.arange("),
        # a subscript, not a name
        ("return torch.arange(x[0])", "torch.arange("),
        # a name with a tensor: the sum may have more dims than the name
        ("n = x[0]\nreturn torch.arange(n - t)", "torch.arange("),
    ],
)
def test_an_arange_bound_whose_dim_cannot_be_tested_is_declined(body, needle):
    source = (
        "import torch\n\n\ndef g(x) -> torch.Tensor:\n    return x * 2\n\n\n"
        "def f(x: torch.Tensor, t: torch.Tensor):\n" + textwrap.indent(body, "    ") + "\n"
    )
    assert "is an arange bound not shown to be 0-dim" in (declined_at(source, needle, SizeItem, "GB0033") or "")


def test_a_full_reduction_of_what_may_be_an_array_is_not_tested_for_its_dim():
    # `lengths` may be a numpy array: its reduction has `.item()` but no `.dim()`
    source = "import torch\n\n\ndef f(lengths, k):\n    n = lengths.max() + k\n    return torch.arange(n)\n"
    assert "is an arange bound not shown to be 0-dim" in (declined_at(source, "torch.arange(n)", SizeItem, "GB0033") or "")


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
