"""Static tests (no torch) of sorted-range-to-argsort (sorting) and
deepcopy-container-to-clones (copying): the rules/ examples, variants, and the
cases each must decline."""

from __future__ import annotations

import ast
import re
import textwrap
import types
from pathlib import Path

import pytest

from gbfix import rules
from gbfix.records import Break, Cause, Frame, Site
from gbfix.recipes.copying import DeepcopyContainerToClones, DeepcopyToClone
from gbfix.recipes.sorting import SortedRangeToArgsort
from tests.helpers import rewrite_at

RULES = Path(__file__).resolve().parents[2] / "rules"


def at(source: str, needle: str, recipe, code: str) -> str | None:
    """Rewrite at the first occurrence of ``needle``, the span Dynamo reports."""
    source = textwrap.dedent(source)
    number, line = next((n, line) for n, line in enumerate(source.splitlines(), 1) if needle in line)
    col = line.index(needle)
    return rewrite_at(source, recipe, number, col, col + len(needle), code)


def changed(before: str, after: str | None) -> list[str]:
    """The lines of ``after`` that are not in ``before``."""
    assert after is not None, "the recipe declined"
    old = set(textwrap.dedent(before).splitlines())
    return [line.strip() for line in after.splitlines() if line not in old]


# ---- sorted-range-to-argsort -----------------------------------------------------


def test_gb0207_rule_examples():
    examples = rules.parse(RULES / "GB0207.md")
    assert [ex.after is None for ex in examples] == [False, True]
    fixed, kept = examples
    needle = "sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)"
    assert at(fixed.before, needle, SortedRangeToArgsort, "GB0207") == fixed.after
    needle = "sorted(best, key=lambda h: h.score, reverse=True)"
    assert at(kept.before, needle, SortedRangeToArgsort, "GB0207") is None


SORT = """
import torch


def f(x, t, n, descending, hyps):
    order = {expr}
    return x[order]
"""


def sort(expr: str, source: str = SORT) -> list[str] | None:
    src = textwrap.dedent(source.format(expr=expr))
    out = at(src, expr, SortedRangeToArgsort, "GB0207")
    return None if out is None else changed(src, out)


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("sorted(range(len(t)), key=lambda i: t[i])", "torch.argsort(t, stable=True)"),
        ("sorted(range(t.shape[0]), key=lambda i: t[i], reverse=True)", "torch.argsort(t, stable=True, descending=True)"),
        ("sorted(range(t.size(0)), key=t.__getitem__, reverse=False)", "torch.argsort(t, stable=True)"),
        ("sorted(range(n), key=lambda k: -t[k])", "torch.argsort(-t[:n], stable=True)"),
        ("sorted(range(n), key=lambda i: t[i], reverse=descending)", "torch.argsort(t[:n], stable=True, descending=descending)"),
    ],
)
def test_sort_rewrites(expr, expected):
    assert sort(expr) == [f"order = {expected}"]


def test_sort_rewrites_an_index_in_place_and_an_attribute_key():
    src = """
    import torch


    class Encoder(torch.nn.Module):
        def forward(self, x):
            return x[sorted(range(len(self.lengths)), key=lambda i: self.lengths[i])]
    """
    expr = "sorted(range(len(self.lengths)), key=lambda i: self.lengths[i])"
    assert changed(src, at(src, expr, SortedRangeToArgsort, "GB0207")) == [
        "return x[torch.argsort(self.lengths, stable=True)]"
    ]


def test_sort_keeps_every_use_an_index_or_len():
    src = SORT.replace("return x[order]", "y[order, :] = x[order]\n    return y[order][0], len(order)")
    assert sort("sorted(range(n), key=lambda i: t[i])", src) == ["order = torch.argsort(t[:n], stable=True)"]


@pytest.mark.parametrize(
    "use",
    [
        "return order",  # a list leaves the function
        "return x[order[:2]]",  # sliced as a list
        "return [x[i] for i in order]",  # iterated: ints, not 0-dim tensors
        "order.reverse()\n    return x[order]",
        "order = order + [0]\n    return x[order]",  # bound again
        "return x[order], order == [0, 1]",
    ],
)
def test_sort_declines_a_result_used_as_a_list(use):
    src = SORT.replace("return x[order]", use)
    assert sort("sorted(range(n), key=lambda i: t[i])", src) is None


@pytest.mark.parametrize(
    "expr",
    [
        "sorted(hyps, key=lambda h: h.score, reverse=True)",  # objects: needs concrete ints
        "sorted(range(n), key=lambda i: (t[i], i))",  # a tuple key breaks ties its own way
        "sorted(range(n), key=lambda i: t[i].item())",
        "sorted(range(n), key=lambda i: t[i] * x[i])",
        "sorted(range(n), key=lambda i: t[i][0])",
        "sorted(range(n), key=lambda i: t[i + 1])",
        "sorted(range(1, n), key=lambda i: t[i])",
        "sorted(range(n), key=lambda i: f(t)[i])",  # evaluated once per key
        "sorted(range(n), key=lambda i: t[i], reverse=not descending)",
        "sorted(range(n), key=lambda i, j=0: t[i])",
        "sorted(list(range(n)), key=lambda i: t[i])",
        "sorted(range(n))",
        "sorted(*args, key=lambda i: t[i])",
    ],
)
def test_sort_declines(expr):
    assert sort(expr) is None


def test_sort_declines_list_sort_a_shadowed_sorted_and_module_level_code():
    src = SORT.replace("    order = {expr}\n", "    order = list(range(n))\n    order.sort(key=lambda i: t[i])\n")
    assert at(src, "order.sort(key=lambda i: t[i])", SortedRangeToArgsort, "GB0207") is None
    src = "sorted = lambda *a, **k: []\n" + SORT
    assert sort("sorted(range(n), key=lambda i: t[i])", src) is None
    src = "import torch\nt = torch.ones(3)\norder = sorted(range(3), key=lambda i: t[i])\ny = t[order]\n"
    assert at(src, "sorted(range(3), key=lambda i: t[i])", SortedRangeToArgsort, "GB0207") is None


# ---- deepcopy-container-to-clones --------------------------------------------------

_HEAD = re.compile(r"^## (Example|Not fixed) on 2\.13.*$", re.MULTILINE)
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def gb0179_examples() -> list[tuple[str, list[str]]]:
    """rules/GB0179.md's sections, which the catalog test cannot run on 2.13 (the
    break is GB4198 there): (kind, python blocks)."""
    text = (RULES / "GB0179.md").read_text(encoding="utf-8")
    heads = list(_HEAD.finditer(text))
    ends = [h.start() for h in heads[1:]] + [len(text)]
    return [(h.group(1), _BLOCK.findall(text[h.end() : end])) for h, end in zip(heads, ends)]


def test_gb0179_rule_examples():
    (kind, (before, after)), (kind2, (kept,)) = gb0179_examples()
    assert (kind, kind2) == ("Example", "Not fixed")
    assert at(before, "copy.deepcopy(cache)", DeepcopyContainerToClones, "GB4198") == after
    for recipe in (DeepcopyContainerToClones, DeepcopyToClone):
        assert at(kept, "copy.deepcopy(hidden)", recipe, "GB4198") is None
    assert not rules.parse(RULES / "GB0179.md")  # nothing the catalog test would run


def inside_copy(*below: tuple[str, str]) -> bool:
    path = Path("/virtual/example.py")
    frames = (Frame(str(path), 3, 8, 24, "forward"), *(Frame(file, 1, 0, 1, fn) for file, fn in below))
    site = Site(path, 3, 8, 24, Break(causes=(Cause("GB4198", "GB4198", ""),), stack=frames))
    return DeepcopyContainerToClones._inside_copy(types.SimpleNamespace(site=site))


def test_container_reads_the_stack_dynamo_reports():
    copy_py = "/usr/lib/python3.11/copy.py"
    assert inside_copy((copy_py, "deepcopy"), (copy_py, "_deepcopy_dict"), (copy_py, "deepcopy"))
    assert inside_copy()  # GB0179 before 2.13: the stack ends at the call
    assert not inside_copy((copy_py, "deepcopy"), ("/work/lib/state.py", "__deepcopy__"))


CONTAINER = """
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.mix = Mixer(dim)

    def forward(self, x, h, mask):
        k = self.k_proj(x)
        v = self.v_proj(x)
        a = x * 2
        b = torch.cat([x, h])
        c = F.softmax(x, dim=-1)
        view = k.view(-1)
        m = self.mix(x)
{body}
        return y
"""


def container(body: str, needle: str) -> str | None:
    """The statements the rewrite changed, as ``ast.unparse`` writes them (one line)."""
    src = textwrap.dedent(CONTAINER).format(body=textwrap.indent(textwrap.dedent(body), " " * 8))
    out = at(src, needle, DeepcopyContainerToClones, "GB4198")
    return None if out is None else ast.unparse(ast.parse("\n".join(changed(src, out))))


def clone(name: str) -> str:
    return f"{name}.detach().clone().requires_grad_({name}.requires_grad)"


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("copy.deepcopy((a, b))", f"y = ({clone('a')}, {clone('b')})"),
        ("copy.deepcopy([x, c, None, 1.5])", f"y = [{clone('x')}, {clone('c')}, None, 1.5]"),
        ('copy.deepcopy({"a": a, 0: [b]})', f"y = {{'a': {clone('a')}, 0: [{clone('b')}]}}"),
        ("copy.deepcopy(((a,), b))[0]", f"y = (({clone('a')},), {clone('b')})[0]"),
    ],
)
def test_container_rewrites_a_display(expr, expected):
    assert container(f"y = {expr}", expr.removesuffix("[0]")) == expected


def test_container_rewrites_a_display_bound_before_and_lays_out_a_long_copy():
    body = """
    cache = {"k": k, "v": v, "step": 0}
    k.mul_(0.5)  # in place: the display holds the same tensor
    y = copy.deepcopy(cache)
    """
    src = textwrap.dedent(CONTAINER).format(body=textwrap.indent(textwrap.dedent(body), " " * 8))
    assert changed(src, at(src, "copy.deepcopy(cache)", DeepcopyContainerToClones, "GB4198")) == [
        "y = {",
        f'"k": {clone("k")},',
        f'"v": {clone("v")},',
        '"step": 0,',
        "}",
    ]


@pytest.mark.parametrize(
    "body, needle",
    [
        ("y = copy.deepcopy((x, h))", "copy.deepcopy((x, h))"),  # attn(x, x): one tensor twice
        ("y = copy.deepcopy([k, view])", "copy.deepcopy([k, view])"),  # a view of k
        ("y = copy.deepcopy([a, m])", "copy.deepcopy([a, m])"),  # m: any module, may return a view
        ("y = copy.deepcopy([a, a])", "copy.deepcopy([a, a])"),
        ("y = copy.deepcopy([a, *rest])", "copy.deepcopy([a, *rest])"),
        ("y = copy.deepcopy({**mask, 'a': a})", "copy.deepcopy({**mask, 'a': a})"),
        ("y = copy.deepcopy({str(a): a})", "copy.deepcopy({str(a): a})"),
        ("y = copy.deepcopy([a, b.T])", "copy.deepcopy([a, b.T])"),
        ("y = copy.deepcopy([a, self.k_proj.weight])", "copy.deepcopy([a, self.k_proj.weight])"),
        ("y = copy.deepcopy([a, b], {})", "copy.deepcopy([a, b], {})"),
        ("y = copy.deepcopy(mask)", "copy.deepcopy(mask)"),  # structure not visible
    ],
)
def test_container_declines(body, needle):
    assert container(body, needle) is None


def test_container_accepts_one_parameter_with_fresh_leaves():
    assert container("y = copy.deepcopy([x, a, m])", "copy.deepcopy([x, a, m])") is None  # m unknown
    expected = f"y = [{clone('x')}, {clone('a')}, {clone('k')}]"
    assert container("y = copy.deepcopy([x, a, k])", "copy.deepcopy([x, a, k])") == expected


@pytest.mark.parametrize(
    "body",
    [
        "hidden = [a]\nhidden.append(b)\ny = copy.deepcopy(hidden)",  # grown in place
        "hidden = [a]\nz = hidden\ny = copy.deepcopy(hidden)",  # an alias may grow it
        "hidden = [a]\na = a + 1\ny = copy.deepcopy(hidden)",  # the display holds the old a
        "hidden = [a]\nhidden = [b]\ny = copy.deepcopy(hidden)",  # bound twice
        "hidden = [a]\nif mask:\n    y = copy.deepcopy(hidden)\nelse:\n    y = None",  # another block
        "hidden = [a]; z = 1\ny = copy.deepcopy(hidden)",
        "y = copy.deepcopy(hidden)\nhidden = [a]",  # bound after
    ],
)
def test_container_declines_a_display_it_cannot_follow(body):
    assert container(body, "copy.deepcopy(hidden)") is None
