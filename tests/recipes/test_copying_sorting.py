"""Static tests (no torch) of sorted-range-to-argsort, sort-by-key and pick-by-key (sorting) and
deepcopy-container-to-clones (copying): the rules/ examples, variants, and the
cases each must decline; and the pick helpers run against the builtins."""

from __future__ import annotations

import ast
import re
import textwrap
import types
from pathlib import Path

import pytest

from gbfix import rules
from gbfix.recipes import sorting
from gbfix.recipes.copying import DeepcopyContainerToClones, DeepcopyToClone
from gbfix.recipes.sorting import PickByKey, SortByKey, SortedRangeToArgsort
from gbfix.records import Break, Cause, Frame, Site
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
    assert [ex.after is None for ex in examples] == [False, False, True]
    fixed, tensors, kept = examples
    needle = "sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)"
    assert at(fixed.before, needle, SortedRangeToArgsort, "GB0207") == fixed.after
    assert at(fixed.before, needle, SortByKey, "GB0207") is None
    needle = "outs.sort(key=lambda o: o.amax(), reverse=True)"
    assert at(tensors.before, needle, SortByKey, "GB0207") == tensors.after
    needle = "sorted(best, key=lambda h: h.score, reverse=True)"
    for recipe in (SortedRangeToArgsort, SortByKey):
        assert at(kept.before, needle, recipe, "GB0207") is None


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


# ---- sort-by-key -----------------------------------------------------------------


def sort_by_key(body: str, needle: str) -> list[str] | None:
    src = textwrap.dedent(PICK).replace("{body}", body.replace("\n", "\n        "))
    out = at(src, needle, SortByKey, "GB0207")
    if out is None:
        return None
    assert "def gbfix_pickable(xs):" in out and "def gbfix_sorted_by_key(xs, key, reverse=False):" in out
    ast.parse(out)
    helpers = {line.strip() for line in (sorting._PICKABLE.code + sorting._SORTED.code).splitlines()}
    return [line for line in changed(src, out) if line not in helpers]


FAST = "gbfix_sorted_by_key"


@pytest.mark.parametrize(
    "body, needle, expected",
    [
        (  # sorted, a lambda key, stacked
            "return torch.stack(sorted(xs, key=lambda t: t.sum()))",
            "sorted(xs, key=lambda t: t.sum())",
            [f"return torch.stack(({FAST}(xs, key=lambda t: t.sum()) if gbfix_pickable(xs) else sorted(xs, key=lambda t: t.sum())))"],
        ),
        (  # a named key, reversed, the first element read
            "return x * sorted(self.cands, key=score, reverse=True)[0]",
            "sorted(self.cands, key=score, reverse=True)",
            [f"return x * ({FAST}(self.cands, key=score, reverse=True) if gbfix_pickable(self.cands) else sorted(self.cands, key=score, reverse=True))[0]"],
        ),
        (  # in a local: sliced into torch.cat, its length
            "ranked = sorted(xs, key=score)\nreturn torch.cat(ranked[:2]) / len(ranked)",
            "sorted(xs, key=score)",
            [f"ranked = ({FAST}(xs, key=score) if gbfix_pickable(xs) else sorted(xs, key=score))"],
        ),
        (  # iterated by a loop and by a comprehension
            "for y in sorted(xs, key=score):\n    x = x + y\nreturn [y * 2 for y in sorted(self.cands, key=score)], x",
            "sorted(xs, key=score)",
            [f"for y in ({FAST}(xs, key=score) if gbfix_pickable(xs) else sorted(xs, key=score)):"],
        ),
        (  # list.sort of a comprehension
            "ys = [x * i for i in range(3)]\nys.sort(key=lambda t: -t.norm())\nreturn torch.stack(ys)",
            "ys.sort(key=lambda t: -t.norm())",
            ["if gbfix_pickable(ys):", f"ys[:] = {FAST}(ys, key=lambda t: -t.norm())", "else:", "ys.sort(key=lambda t: -t.norm())"],
        ),
        (  # list.sort of list(...), read before and after
            "ys = list(xs)\nlo = ys[0].sum()\nys.sort(key=score, reverse=True)\nreturn ys[0] + ys[-1] + lo",
            "ys.sort(key=score, reverse=True)",
            ["if gbfix_pickable(ys):", f"ys[:] = {FAST}(ys, key=score, reverse=True)", "else:", "ys.sort(key=score, reverse=True)"],
        ),
    ],
)
def test_sort_by_key_rewrites(body, needle, expected):
    assert sort_by_key(body, needle) == expected


@pytest.mark.parametrize(
    "body, needle",
    [
        ("return sorted(xs, key=score)", "sorted(xs, key=score)"),  # returned: the caller gets copies
        ("ys = sorted(xs, key=score)\nfor y in ys:\n    self.seen.append(y)\nreturn x", "sorted(xs, key=score)"),  # elements stored
        ("y = x\nfor y in sorted(xs, key=score):\n    x = x + y\nreturn x", "sorted(xs, key=score)"),  # y bound elsewhere
        ("ys = sorted(xs, key=score)\nys.append(x)\nreturn torch.stack(ys)", "sorted(xs, key=score)"),
        ("ys = sorted(xs, key=score)\nys[0].add_(1)\nreturn torch.stack(ys)", "sorted(xs, key=score)"),
        ("self.ranked = sorted(xs, key=score)\nreturn x", "sorted(xs, key=score)"),
        ("return torch.stack(sorted(list(xs), key=score))", "sorted(list(xs), key=score)"),  # read twice
        ("return torch.stack(sorted(xs))", "sorted(xs)"),  # no key
        ("return x[sorted(range(len(xs)), key=lambda i: xs[i].sum())]", "sorted(range(len(xs)), key=lambda i: xs[i].sum())"),
        ("xs.sort(key=score)\nreturn torch.stack(xs)", "xs.sort(key=score)"),  # the caller's list
        ("ys = [x, x * 2]\nys.sort(key=score)\nreturn ys", "ys.sort(key=score)"),  # returned
        ("ys = [x, x * 2]\nys.sort(key=score)\nys.append(x)\nreturn torch.stack(ys)", "ys.sort(key=score)"),
        ("ys = [x, x * 2]\nzs = ys\nys.sort(key=score)\nreturn zs", "ys.sort(key=score)"),  # an alias returned
        ("ys = [x, x * 2]\nys.sort(key=score); x = x + 1\nreturn torch.stack(ys)", "ys.sort(key=score)"),
        ("ys = sorted(xs, key=score, cmp=None)\nreturn ys[0]", "sorted(xs, key=score, cmp=None)"),
    ],
)
def test_sort_by_key_declines(body, needle):
    assert sort_by_key(body, needle) is None


def test_sorted_helper_agrees_with_the_builtin():
    """Ties, +-inf and -0.0 keys in float32, float16, int64 and as Python floats, both
    directions: the same tensors in the same order (the same objects for Python keys)."""
    import random

    h = _pick_helpers()
    torch = h.torch
    rng = random.Random(1)
    pool = [0.0, 1.0, -1.0, float("inf"), float("-inf"), -0.0, 2.0]
    for _ in range(400):
        n = rng.randint(1, 8)
        kind = rng.choice([torch.float32, torch.float16, torch.int64, None])
        values = [float(rng.randint(-2, 2)) if kind is torch.int64 else rng.choice(pool) for _ in range(n)]
        xs = [torch.full((2,), float(i)) for i in range(n)]
        keys = {id(x): v if kind is None else torch.tensor(v, dtype=kind) for x, v in zip(xs, values)}
        for reverse in (False, True):
            want = sorted(xs, key=lambda x: keys[id(x)], reverse=reverse)
            got = h.sorted(xs, key=lambda x: keys[id(x)], reverse=reverse)
            assert [int(t[0]) for t in got] == [int(t[0]) for t in want], (kind, values, reverse)
            assert all((a is b) == (kind is None) for a, b in zip(got, want))


# ---- pick-by-key -----------------------------------------------------------------


def test_gb0193_rule_examples():
    fixed, kept = rules.parse(RULES / "GB0193.md")
    assert kept.after is None
    assert at(fixed.before, "max(candidates, key=lambda c: self.critic(c).sum())", PickByKey, "GB0193") == fixed.after
    # the answer is an object: proposed (nothing in the source says it is not a tensor);
    # the run decides, where the builtin still breaks on that line
    assert at(kept.before, "max(scored, key=lambda h: h.score)", PickByKey, "GB0193") is not None


PICK = """
import torch
from torch import nn


def score(t):
    return t.norm()


class Chooser(nn.Module):
    def forward(self, x, xs):
        {body}
"""


def pick(body: str, needle: str) -> list[str] | None:
    src = textwrap.dedent(PICK).replace("{body}", body.replace("\n", "\n        "))
    out = at(src, needle, PickByKey, "GB0193")
    if out is None:
        return None
    assert "def gbfix_pickable(xs):" in out and "def gbfix_pick_by_key(pick, xs, key):" in out
    ast.parse(out)
    helpers = {line.strip() for line in (sorting._PICKABLE.code + sorting._PICK.code).splitlines()}
    return [line for line in changed(src, out) if line not in helpers]


@pytest.mark.parametrize(
    "body, needle, expected",
    [
        (  # a lambda key, the result in a local
            "best = max(xs, key=lambda t: t.sum())\nreturn x + best",
            "max(xs, key=lambda t: t.sum())",
            "best = (gbfix_pick_by_key(max, xs, key=lambda t: t.sum()) if gbfix_pickable(xs) else max(xs, key=lambda t: t.sum()))",
        ),
        (  # added in place to another tensor
            "x += max(xs, key=score)\nreturn x",
            "max(xs, key=score)",
            "x += (gbfix_pick_by_key(max, xs, key=score) if gbfix_pickable(xs) else max(xs, key=score))",
        ),
        (  # a named key, min, inline
            "return x * min(xs, key=score)",
            "min(xs, key=score)",
            "return x * (gbfix_pick_by_key(min, xs, key=score) if gbfix_pickable(xs) else min(xs, key=score))",
        ),
        (  # an attribute list, read through a view and a torch function
            "best = max(self.cands, key=score)\ny = torch.cat([best.view(-1), x])\nreturn y.sum()",
            "max(self.cands, key=score)",
            "best = (gbfix_pick_by_key(max, self.cands, key=score) if gbfix_pickable(self.cands) else max(self.cands, key=score))",
        ),
        (  # a method's result and a comparison
            "return (min(xs, key=lambda t: t.abs().max()).softmax(-1) > 0.5).float()",
            "min(xs, key=lambda t: t.abs().max())",
            "return ((gbfix_pick_by_key(min, xs, key=lambda t: t.abs().max()) if gbfix_pickable(xs) else min(xs, key=lambda t: t.abs().max())).softmax(-1) > 0.5).float()",
        ),
    ],
)
def test_pick_rewrites(body, needle, expected):
    assert pick(body, needle) == [expected]


@pytest.mark.parametrize(
    "body",
    [
        "return max(xs, key=score)",  # returned: the caller would get a copy
        "self.best = max(xs, key=score)\nreturn x",  # stored
        "best = max(xs, key=score)\nbest.add_(1)\nreturn x + best",  # mutated in place
        "best = max(xs, key=score)\nbest.view(-1).zero_()\nreturn x + best",  # mutated through a view
        "best = max(xs, key=score)\nbest[0] = 1\nreturn x + best",  # item assignment
        "best = max(xs, key=score)\nreturn x + helper(best)",  # user code sees it
        "best = max(xs, key=score)\nreturn x + best, best is xs[0]",  # identity
        "best = max(xs, key=score)\nbest = best * 2\nreturn x + best",  # bound twice
        "return x + max(xs, key=score, default=x)",  # default=
        "return x + max(xs[0], xs[1], key=score)",  # several positional arguments
        "return x + max(list(xs), key=score)",  # not a name: evaluated twice
        "return x + max(*xs, key=score)",
        "torch.add(x, max(xs, key=score), out=x)\nreturn x",  # out=
        "return x + max(xs)",  # no key: no GB0193 to answer
    ],
)
def test_pick_declines(body):
    needle = next(n for n in ("max(", "min(") if n in body)
    src = textwrap.dedent(PICK).replace("{body}", body.replace("\n", "\n        "))
    line = next(ln for ln in src.splitlines() if needle in ln)
    call = line[line.index(needle):]
    depth, end = 0, 0
    for i, ch in enumerate(call):  # the call's own span, as Dynamo reports it
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and ch == ")":
            end = i + 1
            break
    assert at(src, call[:end], PickByKey, "GB0193") is None


def test_pick_declines_a_shadowed_builtin_and_a_taken_helper_name():
    body = "return x * max(xs, key=score)"
    src = textwrap.dedent(PICK).replace("{body}", body)
    assert at("max = lambda *a, **k: None\n" + src, "max(xs, key=score)", PickByKey, "GB0193") is None
    assert at(src + "\ngbfix_pickable = None\n", "max(xs, key=score)", PickByKey, "GB0193") is None


def _pick_helpers() -> types.SimpleNamespace:
    """The helpers as the recipes write them, defined for a run."""
    torch = pytest.importorskip("torch")
    space: dict = {"torch": torch}
    exec(sorting._PICKABLE.code + "\n" + sorting._PICK.code + "\n" + sorting._SORTED.code, space)
    return types.SimpleNamespace(
        torch=torch, pickable=space["gbfix_pickable"], pick=space["gbfix_pick_by_key"], sorted=space["gbfix_sorted_by_key"]
    )


def test_pick_helpers_agree_with_the_builtins():
    """Ties, NaN, +-inf and -0.0 keys in float32, float16, int64 and as Python floats:
    the same element (the same object for Python keys), for max and min."""
    import random

    h = _pick_helpers()
    torch = h.torch
    rng = random.Random(0)
    pool = [0.0, 1.0, -1.0, float("nan"), float("inf"), float("-inf"), -0.0, 2.0]
    for _ in range(500):
        n = rng.randint(1, 6)
        kind = rng.choice([torch.float32, torch.float16, torch.int64, None])
        values = [float(rng.randint(-2, 2)) if kind is torch.int64 else rng.choice(pool) for _ in range(n)]
        xs = [torch.full((2,), float(i)) for i in range(n)]
        keys = {id(x): v if kind is None else torch.tensor(v, dtype=kind) for x, v in zip(xs, values)}
        assert h.pickable(xs)
        for builtin in (max, min):
            want = builtin(xs, key=lambda x: keys[id(x)])
            got = h.pick(builtin, xs, key=lambda x: keys[id(x)])
            assert torch.equal(got, want), (builtin, kind, values)
            assert (got is want) == (kind is None)


def test_pickable_only_for_alike_tensors_without_autograd():
    h = _pick_helpers()
    torch = h.torch
    leaf = torch.ones(2, requires_grad=True)
    assert h.pickable((torch.ones(2), torch.zeros(2)))
    assert not h.pickable([])
    assert not h.pickable(iter([torch.ones(2)]))  # an iterator would be used up
    assert not h.pickable([torch.ones(2), torch.ones(3)])
    assert not h.pickable([torch.ones(2), torch.ones(2, dtype=torch.float64)])
    assert not h.pickable([torch.ones(2, 2).t()])  # not contiguous: the copy's strides would differ
    assert not h.pickable([torch.ones(2), leaf])
    with torch.no_grad():
        assert h.pickable([torch.ones(2), leaf])


# ---- deepcopy-container-to-clones --------------------------------------------------

_HEAD = re.compile(r"^###? (Example|Not fixed) on 2\.13.*$", re.MULTILINE)  # ### in the per-recipe layout
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
