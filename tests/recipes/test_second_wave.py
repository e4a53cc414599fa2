"""Static tests (no torch) of one-hot-num-classes and masked-reduction (shapes),
deepcopy-to-clone (copying) and skip-timing (timing): the rules/ examples, variants,
and the cases each must decline."""

from __future__ import annotations

import textwrap
import types
from pathlib import Path

import pytest

from gbfix import recipes, rules
from gbfix.recipes.copying import DeepcopyToClone
from gbfix.recipes.shapes import MaskedReduction, OneHotNumClasses
from gbfix.recipes.timing import SkipTiming
from gbfix.records import Break, Cause, Frame, Site
from tests.helpers import at, changed

RULES = Path(__file__).resolve().parents[2] / "rules"


# ---- rules/ examples --------------------------------------------------------------

# Where Dynamo reports each rules/ example's break: the first of these in the example.
SITES = {
    "GB0246": (OneHotNumClasses, ("F.one_hot(target)", "F.one_hot(chosen)")),
    "GB0036": (MaskedReduction, ("err[torch.isfinite(err)]", "losses[hard]", "hidden[attention_mask.bool()]")),
    "GB4198": (DeepcopyToClone, ("copy.deepcopy(x)",)),
}


@pytest.mark.parametrize("code", sorted(SITES))
def test_rule_examples(code):
    recipe, needles = SITES[code]
    for ex in rules.parse(RULES / f"{code}.md"):
        needle = next((n for n in needles if n in ex.before), None)
        if needle is None:
            continue  # another module's recipe (tested with it)
        result = at(ex.before, needle, recipe, code)
        if ex.after is not None:
            # this module's recipe, or the one the engine falls back to (tested in test_rules)
            outs = [result] + [at(ex.before, needle, r, code) for r in recipes.candidates(code, unsafe=True)]
            assert ex.after in outs, ex.title
        elif code == "GB0036":
            assert result is None, ex.title  # declined statically
        else:
            # proposed, then rejected by the verifier: outputs differ / a new break (GB8985)
            assert result is not None, ex.title


# ---- one-hot-num-classes ----------------------------------------------------------

ONE_HOT = """
import torch
import torch.nn.functional as F
{head}

class Head(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
{init}

    def forward(self, x, labels{params}):
        y = {call}
        return y
"""


def one_hot(call="F.one_hot(labels)", init="        self.num_classes = config.num_classes", params="", head=""):
    src = ONE_HOT.format(call=call, init=init, params=params, head=head)
    out = at(src, call[: call.index(")") + 1], OneHotNumClasses, "GB0246")  # the one_hot call
    return None if out is None else changed(src, out)


def test_one_hot_takes_the_count_assigned_in_the_class():
    assert one_hot() == ["y = F.one_hot(labels, num_classes=self.num_classes)"]


def test_one_hot_takes_a_parameter_a_global_or_a_config_attribute():
    assert one_hot(init="        pass", params=", num_classes: int") == [
        "y = F.one_hot(labels, num_classes=num_classes)"
    ]
    assert one_hot(init="        pass", head="NUM_LABELS = 7") == ["y = F.one_hot(labels, num_classes=NUM_LABELS)"]
    assert one_hot(call="F.one_hot(labels) * self.config.num_experts", init="        self.config = config") == [
        "y = F.one_hot(labels, num_classes=self.config.num_experts) * self.config.num_experts"
    ]


def test_one_hot_spellings_and_an_explicit_minus_one():
    assert one_hot(call="torch.nn.functional.one_hot(labels)") == [
        "y = torch.nn.functional.one_hot(labels, num_classes=self.num_classes)"
    ]
    assert one_hot(call="F.one_hot(labels, -1)") == ["y = F.one_hot(labels, num_classes=self.num_classes)"]
    assert one_hot(call="F.one_hot(labels, num_classes=-1)") == ["y = F.one_hot(labels, num_classes=self.num_classes)"]
    src = "from torch.nn.functional import one_hot\n\n\ndef f(labels, n_classes):\n    return one_hot(labels)\n"
    assert changed(src, at(src, "one_hot(labels)", OneHotNumClasses, "GB0246")) == [
        "return one_hot(labels, num_classes=n_classes)"
    ]


@pytest.mark.parametrize(
    "kw",
    [
        {"init": "        pass"},  # no count in reach
        {"init": "        self.num_experts = 8\n        self.vocab_size = 100"},  # two different counts
        {"init": "        self.num_experts_per_tok = 2"},  # top-k, not a count
        {"call": "F.one_hot(labels, 5)"},  # already fixed width (Dynamo does not break)
        {"call": "F.one_hot(*labels)"},
    ],
)
def test_one_hot_declines(kw):
    assert one_hot(**kw) is None


def test_one_hot_declines_a_function_that_is_not_torchs():
    src = "def one_hot(x):\n    return x\n\n\ndef f(labels, num_classes):\n    return one_hot(labels)\n"
    assert at(src, "one_hot(labels)", OneHotNumClasses, "GB0246") is None


# ---- masked-reduction -------------------------------------------------------------


def masked(body: str, needle: str, params: str = "x, m, pad") -> list[str] | None:
    src = f"import torch\n\n\ndef f({params}):\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"
    out = at(src, needle, MaskedReduction, "GB0036")
    return None if out is None else changed(src, out)


@pytest.mark.parametrize(
    "body, expected",
    [
        ("return x[x > 0].sum()", "return torch.where(x > 0, x, 0).sum()"),
        ("return x[x > 0].nansum()", "return torch.where(x > 0, x, 0).nansum()"),
        ("return torch.sum(x[x != pad])", "return torch.sum(torch.where(x != pad, x, 0))"),
        ("return x[x > 0].mean()", "return torch.where(x > 0, x, 0).sum() / (x > 0).sum()"),
        ("return torch.mean(x[~x.isnan()])", "return torch.where(~x.isnan(), x, 0).sum() / (~x.isnan()).sum()"),
        # one part shaped like x is enough: a larger mask would make x[m] raise
        ("return x[(m > 0) & (x > 0)].sum()", "return torch.where((m > 0) & (x > 0), x, 0).sum()"),
        ("return x[torch.isfinite(x)].sum()", "return torch.where(torch.isfinite(x), x, 0).sum()"),
        ("return x[x.abs() > x.std()].sum()", "return torch.where(x.abs() > x.std(), x, 0).sum()"),
        ("return self.h[self.h > 0].sum()", "return torch.where(self.h > 0, self.h, 0).sum()"),
    ],
)
def test_masked_reduction_rewrites(body, expected):
    params = "self, x, m, pad" if "self" in body else "x, m, pad"
    assert masked(body, _indexing(body), params) == [expected]


def _indexing(body: str) -> str:
    """The `x[...]` of a one-line body: the span Dynamo reports."""
    start = body.index("self.h[") if "self.h[" in body else body.index("x[")
    depth = 0
    for end in range(body.index("[", start), len(body)):
        depth += {"[": 1, "]": -1}.get(body[end], 0)
        if depth == 0:
            return body[start : end + 1]
    raise AssertionError(body)


def test_masked_mean_is_parenthesised_inside_an_expression():
    assert masked("return 2 / x[x > 0].mean()", "x[x > 0]") == [
        "return 2 / (torch.where(x > 0, x, 0).sum() / (x > 0).sum())"
    ]
    assert masked("return x[x > 0].mean().item()", "x[x > 0]") == [
        "return (torch.where(x > 0, x, 0).sum() / (x > 0).sum()).item()"
    ]
    assert masked("y = (x[x > 0].mean())", "x[x > 0]") == ["y = (torch.where(x > 0, x, 0).sum() / (x > 0).sum())"]


def test_masked_reduction_through_a_named_mask():
    body = """
        loss = x * 2
        hard = loss > pad
        return loss[hard].sum()
    """
    assert masked(body, "loss[hard]") == ["return torch.where(hard, loss, 0).sum()"]


def test_masked_reduction_adds_the_torch_import():
    src = "from torch import nn\n\n\ndef f(x):\n    return x[x > 0].sum()\n"
    out = at(src, "x[x > 0]", MaskedReduction, "GB0036")
    assert out == "from torch import nn\nimport torch\n\n\ndef f(x):\n    return torch.where(x > 0, x, 0).sum()\n"


@pytest.mark.parametrize(
    "body, needle",
    [
        ("return x[m].sum()", "x[m]"),  # a parameter: neither boolean nor shaped like x, visibly
        ("return x[m & (x > 0)].sum()", "x[m & (x > 0)]"),  # an integer `m` makes this an index
        ("return x[m.bool()].mean()", "x[m.bool()]"),  # boolean, but maybe a row mask
        ("return x[x > 0].max()", "x[x > 0]"),  # empty selection raises
        ("return x[x > 0].sum(0)", "x[x > 0]"),
        ("return x[x > 0].sum(dtype=torch.float64)", "x[x > 0]"),
        ("return x[x > 0]", "x[x > 0]"),
        ("return x[x > 0].float().sum()", "x[x > 0]"),
        ("return x[0 < x < 1].sum()", "x[0 < x < 1]"),  # chained: Python `and`
        ("return x[x.argmax()].sum()", "x[x.argmax()]"),  # an integer index
        ("return x[x > torch.rand(3)].sum()", "x[x > torch.rand(3)]"),  # impure: evaluated first
        ("return x[x > pad, 0].sum()", "x[x > pad, 0]"),
        ("return x[x > 0].sum", "x[x > 0]"),
    ],
)
def test_masked_reduction_declines(body, needle):
    assert masked(body, needle) is None


def test_masked_reduction_declines_x_rebound_after_the_mask():
    body = """
        keep = x > 0
        x = x.view(-1)
        return x[keep].sum()
    """
    assert masked(body, "x[keep]") is None


def test_masked_reduction_declines_a_break_inside_the_index():
    # Dynamo reports the inner call: it is not the indexing.
    assert masked("return x[torch.nonzero(x > 0)].sum()", "torch.nonzero(x > 0)") is None


# ---- deepcopy-to-clone ------------------------------------------------------------

DEEPCOPY = """
import copy
from copy import deepcopy

import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))
        self.register_buffer("ema", torch.zeros(3))

    def forward(self, x, memo):
        h = x * 2
        w = self.weight
        state = {{"h": h}}
        y = {expr}
        return y
"""


def deepcopy(expr: str) -> list[str] | None:
    src = textwrap.dedent(DEEPCOPY.format(expr=expr))
    out = at(src, expr.removesuffix(" + 1"), DeepcopyToClone, "GB4198")
    return None if out is None else changed(src, out)


def copies_the_argument(*below: str) -> bool:
    """Whether a break whose stack goes on into these ``copy.py`` functions copies the argument itself."""
    path = Path("/virtual/example.py")
    copy_py = tuple(Frame("/usr/lib/python3.11/copy.py", 153, 20, 32, f) for f in below)
    frames = (Frame(str(path), 3, 8, 24, "forward"), *copy_py)
    site = Site(path, 3, 8, 24, Break(causes=(Cause("GB4198", "GB4198", ""),), stack=frames))
    return DeepcopyToClone._copies_the_argument(types.SimpleNamespace(site=site))


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("copy.deepcopy(x)", "y = x.detach().clone().requires_grad_(x.requires_grad)"),
        ("deepcopy(h)", "y = h.detach().clone().requires_grad_(h.requires_grad)"),
        ("copy.deepcopy(self.ema)", "y = self.ema.detach().clone().requires_grad_(self.ema.requires_grad)"),
        ("copy.deepcopy(x) + 1", "y = x.detach().clone().requires_grad_(x.requires_grad) + 1"),
    ],
)
def test_deepcopy_rewrites(expr, expected):
    assert deepcopy(expr) == [expected]


def test_deepcopy_reads_the_stack_dynamo_reports():
    assert copies_the_argument("deepcopy")  # copy.deepcopy -> Tensor.__deepcopy__
    assert not copies_the_argument("deepcopy", "_deepcopy_dict", "deepcopy")  # a dict holding tensors
    assert copies_the_argument()  # no frames below the call: the source decides


@pytest.mark.parametrize(
    "expr",
    [
        "copy.deepcopy(self.weight)",  # a Parameter: its copy is a Parameter
        "copy.deepcopy(w)",  # bound from an attribute
        "copy.deepcopy(state)",  # a dict
        "copy.deepcopy([x])",
        "copy.deepcopy(x, memo)",
        "copy.copy(x)",
        "copy.deepcopy(x * 2)",  # evaluated twice by the rewrite
    ],
)
def test_deepcopy_declines(expr):
    assert deepcopy(expr) is None


def test_deepcopy_declines_a_buffer_replaced_by_a_parameter():
    src = textwrap.dedent(DEEPCOPY.format(expr="copy.deepcopy(self.ema)")).replace(
        "        h = x * 2\n", "        h = x * 2\n        self.ema = torch.nn.Parameter(h)\n"
    )
    assert at(src, "copy.deepcopy(self.ema)", DeepcopyToClone, "GB4198") is None


# ---- skip-timing -------------------------------------------------------------------

TIMING_BEFORE = """\
import time

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.seconds = []  # per-call MLP time, for profiling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        y = self.mlp(x)
        self.seconds.append(time.perf_counter() - t0)
        return x + y
"""

TIMING_AFTER = """\
import time

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.seconds = []  # per-call MLP time, for profiling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            t0 = time.perf_counter()
        y = self.mlp(x)
        if not torch.compiler.is_compiling():
            self.seconds.append(time.perf_counter() - t0)
        return x + y
"""


@pytest.mark.parametrize("nth", [0, 1])
def test_timing_example_from_either_clock_read(nth):
    assert at(TIMING_BEFORE, "time.perf_counter()", SkipTiming, "GB0007", nth) == TIMING_AFTER


def timing(body: str, needle: str = "time.perf_counter()", nth: int = 0, head: str = "import time") -> str | None:
    src = f"{head}\nimport logging\n\nimport torch\n\nlogger = logging.getLogger(__name__)\n\n\ndef f(self, x):\n"
    src += textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"
    out = at(src, needle, SkipTiming, "GB0007", nth)
    return None if out is None else out[out.index("def f(self, x):\n") + len("def f(self, x):\n") :]


def test_timing_groups_consecutive_statements_and_keeps_comments():
    body = """
        # time the attention
        t0 = time.perf_counter()
        y = self.attn(x)
        dt = time.perf_counter() - t0
        self.stats["attn"] += dt
        logger.debug("attn took %.3f s", dt)
        return y
    """
    assert timing(body, nth=1) == (
        "    # time the attention\n"
        "    if not torch.compiler.is_compiling():\n"
        "        t0 = time.perf_counter()\n"
        "    y = self.attn(x)\n"
        "    if not torch.compiler.is_compiling():\n"
        "        dt = time.perf_counter() - t0\n"
        "        self.stats[\"attn\"] += dt\n"
        "        logger.debug(\"attn took %.3f s\", dt)\n"
        "    return y\n"
    )


def test_timing_inside_a_loop_guards_only_that_timer():
    body = """
        start = time.time()
        for i, blk in enumerate(self.blocks):
            t1 = time.perf_counter()
            x = blk(x)
            self.per_block[i].append(time.perf_counter() - t1)
        print(f"forward took {time.time() - start:.3f}s")
        return x
    """
    assert timing(body, nth=1) == (
        "    start = time.time()\n"
        "    for i, blk in enumerate(self.blocks):\n"
        "        if not torch.compiler.is_compiling():\n"
        "            t1 = time.perf_counter()\n"
        "        x = blk(x)\n"
        "        if not torch.compiler.is_compiling():\n"
        "            self.per_block[i].append(time.perf_counter() - t1)\n"
        "    print(f\"forward took {time.time() - start:.3f}s\")\n"
        "    return x\n"
    )
    outer = timing(body, needle="time.time()")
    assert outer is not None and outer.count("if not torch.compiler.is_compiling():") == 2
    assert "        t1 = time.perf_counter()" in outer  # the inner timer is another site


def test_timing_from_imported_clocks():
    body = """
        t0 = perf_counter_ns()
        x = x + 1
        self.ns += perf_counter_ns() - t0
        return x
    """
    out = timing(body, needle="perf_counter_ns()", head="from time import perf_counter_ns")
    assert out is not None and out.count("if not torch.compiler.is_compiling():") == 2


@pytest.mark.parametrize(
    "body, needle",
    [
        # the elapsed time is returned
        ("t0 = time.perf_counter()\nx = x + 1\nreturn x, time.perf_counter() - t0", "time.perf_counter()"),
        # it steers control flow
        ("t0 = time.time()\nif time.time() - t0 > 1.0:\n    x = x * 2\nreturn x", "time.time()"),
        # it feeds the computation
        ("t0 = time.time()\nx = x * (time.time() - t0)\nreturn x", "time.time()"),
        # a call that may do more than report
        ("t0 = time.time()\nself.record(time.time() - t0)\nreturn x", "time.time()"),
        # unpacking, and a clock read in a nested function
        ("t0, n = time.time(), 0\nself.t = time.time() - t0\nreturn x", "time.time()"),
        ("t0 = time.time()\ncb = lambda: time.time() - t0\nreturn x", "time.time()"),
        # not a clock: warnings.warn, time.sleep share GB0007
        ("time.sleep(0.1)\nreturn x", "time.sleep(0.1)"),
    ],
)
def test_timing_declines(body, needle):
    assert timing(body, needle) is None


def test_timing_declines_warnings_warn():
    src = "import warnings\n\n\ndef f(x):\n    warnings.warn('slow')\n    return x\n"
    assert at(src, "warnings.warn('slow')", SkipTiming, "GB0007") is None


# ---- one-hot-num-classes: the width of the tensor the one-hot meets ----------------

DICE = """
import torch
import torch.nn.functional as F


def dice(logits, target):
    probs = logits.softmax(dim=1)
    onehot = F.one_hot(target){chain}
    return (probs * onehot).sum() / (probs + onehot).sum()
"""


@pytest.mark.parametrize(
    "chain, width",
    [
        (".permute(0, 3, 1, 2).float()", "probs.shape[1]"),  # NHWC one-hot to NCHW
        (".float()", "probs.shape[-1]"),
        (".to(probs.dtype).permute(0, 2, 1)", "probs.shape[1]"),
    ],
)
def test_one_hot_width_from_the_tensor_it_meets(chain, width):
    out = at(DICE.format(chain=chain), "F.one_hot(target)", OneHotNumClasses, "GB0246")
    assert f"F.one_hot(target, num_classes={width}){chain}\n" in out


@pytest.mark.parametrize(
    "source",
    [
        DICE.format(chain=".permute(0, 3, 1, 2)").replace("    probs = logits.softmax(dim=1)\n", "")
        .replace("(probs", "(logits.softmax(dim=1)"),  # the partner is no name
        DICE.format(chain=".view(-1, 3)"),  # axes moved in a way that is not followed
        DICE.format(chain=".permute(0, k, 1, 2)"),  # not literal axes
        DICE.format(chain="").replace("    probs = logits.softmax(dim=1)\n", "").replace(
            "    return", "    probs = logits.softmax(dim=1)\n    return"
        ),  # the partner is assigned after the call
        DICE.format(chain="").replace("(probs + onehot)", "(weights + onehot)").replace(
            "def dice(logits, target)", "def dice(logits, target, weights)"
        ),  # two different partners
    ],
)
def test_one_hot_width_declines(source):
    assert at(source, "F.one_hot(target)", OneHotNumClasses, "GB0246") is None
