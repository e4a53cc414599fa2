"""GB0170 recipes, applied statically at hand-made sites placed where Dynamo 2.13 puts them:
on the `if` test, or on the whole `if` (from `if` to the end of the next line) when
the body returns or raises."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from gbfix.locate import ParsedFile
from gbfix.recipes.base import SiteContext
from gbfix.recipes.branch import (
    RECIPES,
    WHERE,
    BranchDropShortcut,
    BranchToCheck,
    BranchToCond,
    BranchToGeneralPath,
    BranchToWhere,
    BranchToWhereUnchecked,
)
from gbfix.recipes.layout import add_helpers
from gbfix.records import Break, Cause, Frame, Site
from gbfix.rules import RuleExample, parse
from gbfix.sources import SourceFile
from tests.helpers import ALL_CAPABILITIES, rewrite_at, site_context

RULE = Path(__file__).resolve().parents[2] / "rules" / "GB0170.md"


def site(source: str, fragment: str, whole_if: bool = False) -> tuple[int, int, int]:
    """(line, col, end_col) of the first ``fragment``; with ``whole_if`` the span
    Dynamo gives an `if` whose body returns or raises."""
    lines = textwrap.dedent(source).splitlines()
    for i, line in enumerate(lines, 1):
        col = line.find(fragment)
        if col >= 0:
            return (i, col, len(lines[i])) if whole_if else (i, col, col + len(fragment))
    raise AssertionError(f"{fragment!r} not in source")


def body(text: str) -> str:
    """A test source as a module that imports torch (so the rewrite adds no import)."""
    text = textwrap.dedent(text).lstrip("\n")
    return text if "import torch" in text else "import torch\n\n" + text


def fix(source: str, recipe, fragment: str, whole_if: bool = False, **kw) -> str | None:
    source = body(source)
    return rewrite_at(source, recipe, *site(source, fragment, whole_if), "GB0170", **kw)


# ---------------------------------------------------------------- the rules/ catalog


def _example(title: str) -> RuleExample:
    return next(e for e in parse(RULE) if e.title.startswith(title))


def test_rule_file_shape():
    text = RULE.read_text()
    for recipe in RECIPES:
        assert recipe.rule == "GB0170" and recipe.codes == ("GB0170",)
        assert f"\n## {recipe.name}\n" in text  # a section of its own
    examples = parse(RULE)
    assert any(e.after is None for e in examples)  # a Not fixed case
    assert {e.recipe for e in examples} >= {r.name for r in RECIPES} - {"branch-to-cond"}  # its example is the second step of a branch-to-where one


def test_rule_example_where_then_cond():
    example = _example("clamp on a data-dependent test")
    step = fix(example.before, BranchToWhere, "hidden.abs().max() > clip")
    assert step is not None
    assert fix(step, BranchToCond, "if (mask == 0).all():", whole_if=True) == example.after


def test_rule_example_check():
    example = _example("NaN guard on the loss")
    assert fix(example.before, BranchToCheck, "if torch.isnan(loss):", whole_if=True) == example.after


def test_rule_not_fixed():
    (source,) = [e.before for e in parse(RULE) if e.after is None and e.title == "the branch updates module state"]
    for recipe in RECIPES:
        assert fix(source, recipe, "x.sum() > 0") is None
        assert fix(source, recipe, "if x.sum() > 0:", whole_if=True) is None


# ---------------------------------------------------------------- branch-to-where

WHERE_CASES = {
    "if/else, one-line suite": (
        """
        def f(x, t):
            if x.mean() > t: y = x * 2
            else: y = -x
            return y
        """,
        "x.mean() > t",
        """
        def f(x, t):
            y = torch.where(x.mean() > t, x * 2, -x)
            return y
        """,
    ),
    "conditional expression": (
        """
        def f(x):
            return (x - x.mean()) if x.std() > 1e-3 else x
        """,
        "x.std() > 1e-3",
        """
        def f(x):
            return torch.where(x.std() > 1e-3, x - x.mean(), x)
        """,
    ),
    "python prefix stays an if": (
        """
        class M:
            def forward(self, x, t: float):
                if self.training and x.mean() > t:
                    x = x.clamp(min=-t, max=t)
                return x
        """,
        "x.mean() > t",
        """
        class M:
            def forward(self, x, t: float):
                if self.training:
                    x = torch.where(x.mean() > t, x.clamp(min=-t, max=t), x)
                return x
        """,
    ),
    "not and and become logical ops": (
        """
        def f(x, y):
            if not torch.isfinite(x).all() and y.sum() > 0:
                x = torch.nan_to_num(x, nan=0.0)
            return x
        """,
        "not torch.isfinite(x).all()",
        """
        def f(x, y):
            x = torch.where(
                torch.logical_and(torch.logical_not(torch.isfinite(x).all()), y.sum() > 0),
                torch.nan_to_num(x, nan=0.0),
                x,
            )
            return x
        """,
    ),
    "elif becomes else": (
        """
        def f(x):
            if x.sum() > 100:
                x = x - 1
            # too small
            elif x.sum() < -100:  # rare
                x = x + 1
            return x
        """,
        "x.sum() < -100",
        """
        def f(x):
            if x.sum() > 100:
                x = x - 1
            # too small
            else:
                # rare
                x = torch.where(x.sum() < -100, x + 1, x)
            return x
        """,
    ),
    "nested where from an elif folds": (
        """
        def f(x):
            if x.sum() > 100:
                x = x - 1
            else:
                x = torch.where(x.sum() < -100, x + 1, x)
            return x
        """,
        "x.sum() > 100",
        """
        def f(x):
            x = torch.where(x.sum() > 100, x - 1, torch.where(x.sum() < -100, x + 1, x))
            return x
        """,
    ),
    "elif chain folds into nested wheres": (
        """
        def f(x, lo: float, hi: float):
            if x.mean() > hi:
                x = x - hi
            elif x.mean() < lo:
                x = x - lo
            else:
                x = x * 1.0
            return x
        """,
        "x.mean() > hi",
        """
        def f(x, lo: float, hi: float):
            x = torch.where(x.mean() > hi, x - hi, torch.where(x.mean() < lo, x - lo, x * 1.0))
            return x
        """,
    ),
    "comments are kept": (
        """
        def f(x):
            # keep the activations bounded
            if x.abs().max() > 10.0:  # rare
                # scale down
                x = x * 0.1  # by ten
            return x
        """,
        "x.abs().max() > 10.0",
        """
        def f(x):
            # keep the activations bounded
            # rare
            # scale down
            x = torch.where(x.abs().max() > 10.0, x * 0.1, x)  # by ten
            return x
        """,
    ),
    "gradient-clipping scale with eps": (
        """
        def f(g, max_norm=1.0):
            norm = g.norm()
            if norm > max_norm:
                g = g * (max_norm / (norm + 1e-6))
            return g
        """,
        "norm > max_norm",
        """
        def f(g, max_norm=1.0):
            norm = g.norm()
            g = torch.where(norm > max_norm, g * (max_norm / (norm + 1e-6)), g)
            return g
        """,
    ),
    "long call is laid out one argument a line": (
        """
        def f(hidden_states, attention_scores, threshold: float):
            if attention_scores.abs().amax() > threshold:
                hidden_states = hidden_states.clamp(-threshold, threshold) * 0.5
            return hidden_states
        """,
        "attention_scores.abs().amax() > threshold",
        """
        def f(hidden_states, attention_scores, threshold: float):
            hidden_states = torch.where(
                attention_scores.abs().amax() > threshold,
                hidden_states.clamp(-threshold, threshold) * 0.5,
                hidden_states,
            )
            return hidden_states
        """,
    ),
    "loop target is bound": (
        """
        def f(xs):
            out = []
            for x in xs:
                if x.max() > 1:
                    x = x.clamp_max(1)
                out.append(x)
            return out
        """,
        "x.max() > 1",
        """
        def f(xs):
            out = []
            for x in xs:
                x = torch.where(x.max() > 1, x.clamp_max(1), x)
                out.append(x)
            return out
        """,
    ),
    # a chained comparison is an `and` of its pairs, the middle (pure) read twice
    "chained comparison": (
        """
        def f(x, lo, hi):
            if lo <= x.mean() <= hi:
                x = x * 2
            return x
        """,
        "lo <= x.mean() <= hi",
        """
        def f(x, lo, hi):
            x = torch.where(torch.logical_and(lo <= x.mean(), x.mean() <= hi), x * 2, x)
            return x
        """,
    ),
    "chained comparison in a conditional expression": (
        """
        def f(x, t):
            return x.abs() if 0 < t.max() < 1 else x
        """,
        "0 < t.max() < 1",
        """
        def f(x, t):
            return torch.where(torch.logical_and(0 < t.max(), t.max() < 1), x.abs(), x)
        """,
    ),
    # arms of the input's shape and dtype that are not elementwise: flip, roll, cumsum, softmax
    "random flip in a transform's __call__": (
        """
        class Flip:
            def __init__(self, p):
                self.p = p

            def __call__(self, img):
                crop = img * 2
                if torch.rand(1) < self.p:
                    crop = crop.flip(-1)
                return crop
        """,
        "torch.rand(1) < self.p",
        """
        class Flip:
            def __init__(self, p):
                self.p = p

            def __call__(self, img):
                crop = img * 2
                crop = torch.where(torch.rand(1) < self.p, crop.flip(-1), crop)
                return crop
        """,
    ),
    "roll or cumsum, if/else": (
        """
        def f(x):
            if x.mean() > 0:
                x = x.roll(1, -1)
            else:
                x = x.cumsum(dim=-1)
            return x
        """,
        "x.mean() > 0",
        """
        def f(x):
            x = torch.where(x.mean() > 0, x.roll(1, -1), x.cumsum(dim=-1))
            return x
        """,
    ),
    "softmax in a conditional expression": (
        """
        def f(scores, t):
            return scores.softmax(-1) if t.max() > 0 else scores.log_softmax(-1)
        """,
        "t.max() > 0",
        """
        def f(scores, t):
            return torch.where(t.max() > 0, scores.softmax(-1), scores.log_softmax(-1))
        """,
    ),
}


@pytest.mark.parametrize("case", WHERE_CASES)
def test_where(case):
    source, fragment, expected = WHERE_CASES[case]
    assert fix(source, BranchToWhere, fragment) == body(expected)


WHERE_DECLINES = {
    "print in the arm": ("if x.sum() > 0:\n        print(x)\n        x = x * 2", "x.sum() > 0"),
    "state update in the arm": ("if x.sum() > 0:\n        self.count += 1", "x.sum() > 0"),
    "attribute target": ("if x.sum() > 0:\n        self.x = x * 2", "x.sum() > 0"),
    "in-place method in the arm": ("if x.sum() > 0:\n        x = x.mul_(2)", "x.sum() > 0"),
    "random arm": ("if x.sum() > 0:\n        x = x + torch.rand_like(x)", "x.sum() > 0"),
    "division by data": ("if n > 0:\n        x = x / n", "n > 0"),
    "log of data": ("if x.min() > 0:\n        x = x.log()", "x.min() > 0"),
    "python number arm": ("if x.sum() > 0:\n        x = 0.0", "x.sum() > 0"),
    "target not bound": ("if x.sum() > 0:\n        z = x * 2", "x.sum() > 0"),
    "target bound only conditionally": ("if n:\n        z = x\n    if x.sum() > 0:\n        z = x * 2", "x.sum() > 0"),
    "else assigns another name": ("if x.sum() > 0:\n        x = x * 2\n    else:\n        n = n * 2", "x.sum() > 0"),
    "chained comparison with an impure middle": ("if 0 < x.sum().item() < 10:\n        x = x * 2", "0 < x.sum().item() < 10"),
    "no sign x is a tensor": ("if n.sum() > 0:\n        x = x * 2", "n.sum() > 0"),
    "later in-place update": ("if x.sum() > 0:\n        x = x * 2\n    x.add_(1)", "x.sum() > 0"),
    "later augmented assignment": ("if x.sum() > 0:\n        x = x.abs()\n    x += n", "x.sum() > 0"),
    "elif with a python test": ("if x.sum() > 0:\n        x = x * 2\n    elif flag:\n        x = -x", "x.sum() > 0"),
    "elif with an impure test": ("if x.sum() > 0:\n        x = x * 2\n    elif print(x):\n        x = -x", "x.sum() > 0"),
    "elif assigns another name": ("if x.sum() > 0:\n        x = x * 2\n    elif n.sum() > 0:\n        n = -x", "x.sum() > 0"),
    "call on self in the arm": ("if x.sum() > 0:\n        x = self.norm(x)", "x.sum() > 0"),
    "singular derivative, shape not shown": ("if x.sum() > 0:\n        x = x.t().log()", "x.sum() > 0"),
}


def with_where(text: str) -> str:
    """``text`` with the checked select (gbfix_where) defined after its imports, as the recipe adds it."""
    module = add_helpers(cst.parse_module(body(text)), {WHERE.name: WHERE.code})
    return module.code


# Arms not shown to be of one tensor's shape and dtype: the select is checked while
# tracing (gbfix_where), so a broadcast or a promotion runs the branch as written.
CHECKED_CASES = {
    "a threshold that may be a tensor (unannotated parameter)": (
        """
        def f(g, max_norm):
            norm = g.norm()
            if norm > max_norm:
                g = g * (max_norm / (norm + 1e-6))
            return g
        """,
        "norm > max_norm",
        """
        def f(g, max_norm):
            norm = g.norm()
            g = gbfix_where(norm > max_norm, g * (max_norm / (norm + 1e-6)), g)
            return g
        """,
    ),
    "another tensor in the arm (it may broadcast x)": (
        """
        def f(x, y):
            if x.sum() > 0:
                x = x * 2
                y = y.abs() + x
            return x, y
        """,
        "x.sum() > 0",
        """
        def f(x, y):
            pred = x.sum() > 0
            x = torch.where(pred, x * 2, x)
            y = gbfix_where(pred, y.abs() + x, y)
            return x, y
        """,
    ),
    "a constructor of its own shape": ("def f(x):\n    if x.sum() > 0:\n        x = torch.zeros(3)\n    return x\n", "x.sum() > 0", "def f(x):\n    x = gbfix_where(x.sum() > 0, torch.zeros(3), x)\n    return x\n"),
    "a cast": ("def f(x):\n    if x.sum() > 0:\n        x = x.float()\n    return x\n", "x.sum() > 0", "def f(x):\n    x = gbfix_where(x.sum() > 0, x.float(), x)\n    return x\n"),
    "a transpose (method)": (
        """
        class M:
            def forward(self, x):
                if x.sum() > 0:
                    x = x.t()
                return x
        """,
        "x.sum() > 0",
        """
        class M:
            def forward(self, x):
                x = gbfix_where(x.sum() > 0, x.t(), x)
                return x
        """,
    ),
    "an elif chain of unannotated bounds folds into checked selects": (
        """
        def f(x, lo, hi):
            if x.mean() > hi:
                x = x - hi
            elif x.mean() < lo:
                x = x - lo
            return x
        """,
        "x.mean() > hi",
        """
        def f(x, lo, hi):
            x = gbfix_where(x.mean() > hi, x - hi, gbfix_where(x.mean() < lo, x - lo, x))
            return x
        """,
    ),
    "a mean over the rows a mask keeps: the divisor is selected, not the quotient": (
        """
        def f(loss, mask):
            n = mask.sum()
            if n > 0:
                loss = loss / n
            return loss
        """,
        "n > 0",
        """
        def f(loss, mask):
            n = mask.sum()
            pred = n > 0
            loss = gbfix_where(pred, loss / torch.where(pred, n, 1), loss)
            return loss
        """,
    ),
    "a division under a Python name test keeps its name": (
        """
        def f(x, flag):
            big = x.abs().max() > 1
            if big:
                x = x / x.abs().max()
            return x
        """,
        "if big",
        """
        def f(x, flag):
            big = x.abs().max() > 1
            x = gbfix_where(big, x / torch.where(big, x.abs().max(), 1), x)
            return x
        """,
    ),
    "a conditional expression whose arm divides: the divisor is selected": (
        """
        def lm_loss(logits, labels):
            loss_sum = F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")
            num = (labels != -100).sum()
            return loss_sum / num if num > 0 else loss_sum * 0.0
        """,
        "num > 0",
        """
        def lm_loss(logits, labels):
            loss_sum = F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")
            num = (labels != -100).sum()
            return gbfix_where(num > 0, loss_sum / torch.where(num > 0, num, 1), loss_sum * 0.0)
        """,
    ),
    "a conditional expression with a projection": (
        "def f(h, w):\n    return h @ w if h.abs().amax() > 1 else h\n",
        "h.abs().amax() > 1",
        "def f(h, w):\n    return gbfix_where(h.abs().amax() > 1, h @ w, h)\n",
    ),
    "an if/else whose arm divides by a count: the divisor is selected": (
        """
        def f(loss, valid):
            if valid.any():
                loss = (loss * valid).sum() / valid.sum()
            else:
                loss = loss.sum() * 0.0
            return loss
        """,
        "valid.any()",
        """
        def f(loss, valid):
            loss = gbfix_where(
                valid.any(),
                (loss * valid).sum() / torch.where(valid.any(), valid.sum(), 1),
                loss.sum() * 0.0,
            )
            return loss
        """,
    ),
    "a method's if/else under a Python part, dividing by a norm": (
        """
        class Clip:
            def scale(self, grad, norm):
                grad = grad.detach()
                if self.training and norm > self.max_norm:
                    grad = grad * self.max_norm / norm
                else:
                    grad = grad.clone()
                return grad
        """,
        "norm > self.max_norm",
        """
        class Clip:
            def scale(self, grad, norm):
                grad = grad.detach()
                if self.training:
                    grad = gbfix_where(
                        norm > self.max_norm,
                        grad * self.max_norm / torch.where(norm > self.max_norm, norm, 1),
                        grad.clone(),
                    )
                else:
                    grad = grad.clone()
                return grad
        """,
    ),
    # ones_like(mask) never requires grad: torch.where would where mask did (a float mask
    # with grad), so the select is the checked one
    "mask fallback": (
        """
        def f(mask):
            if mask.sum() == 0:
                mask = torch.ones_like(mask)
            return mask
        """,
        "mask.sum() == 0",
        """
        def f(mask):
            mask = gbfix_where(mask.sum() == 0, torch.ones_like(mask), mask)
            return mask
        """,
    ),
    "a conditional expression whose other arm divides: its divisor is selected": (
        "def f(x, n):\n    return x.sum() * 0 if n == 0 else x.sum() / n\n",
        "n == 0",
        "def f(x, n):\n    return gbfix_where(n == 0, x.sum() * 0, x.sum() / torch.where(n == 0, 1, n))\n",
    ),
    "a temporary dividing by what the test finds zero (CFG rescale): its divisor is selected": (
        """
        def rescale_cfg(out, cond, rescale: float):
            std_pos, std_cfg = cond.std(), out.std()
            if std_cfg > 0:
                factor = std_pos / std_cfg
                out = rescale * (out * factor) + (1 - rescale) * out
            return out
        """,
        "std_cfg > 0",
        """
        def rescale_cfg(out, cond, rescale: float):
            std_pos, std_cfg = cond.std(), out.std()
            pred = std_cfg > 0
            factor = std_pos / torch.where(pred, std_cfg, 1)
            out = gbfix_where(pred, rescale * (out * factor) + (1 - rescale) * out, out)
            return out
        """,
    ),
    "a padding bias in a temporary, cast and viewed": (
        """
        def f(scores, attention_mask):
            if (attention_mask == 0).any():
                pad = (1.0 - attention_mask[:, None, None, :].float()) * -1e4
                scores = scores + pad
            return scores
        """,
        "(attention_mask == 0).any()",
        """
        def f(scores, attention_mask):
            pad = (1.0 - attention_mask[:, None, None, :].float()) * -1e4
            scores = gbfix_where((attention_mask == 0).any(), scores + pad, scores)
            return scores
        """,
    ),
    "a static part stays an if; the temporary reads a dtype's limits": (
        """
        def f(h, attention_mask):
            if attention_mask is not None and not attention_mask.all():
                pad = (1.0 - attention_mask.to(h.dtype)) * torch.finfo(h.dtype).min
                h = h + pad
            return h
        """,
        "not attention_mask.all()",
        """
        def f(h, attention_mask):
            if attention_mask is not None:
                pad = (1.0 - attention_mask.to(h.dtype)) * torch.finfo(h.dtype).min
                h = gbfix_where(torch.logical_not(attention_mask.all()), h + pad, h)
            return h
        """,
    ),
}


@pytest.mark.parametrize("case", CHECKED_CASES)
def test_where_checked(case):
    source, fragment, expected = CHECKED_CASES[case]
    assert fix(source, BranchToWhere, fragment) == with_where(expected)


# Names shown to be numbers keep the plain torch.where.
NUMBER_EVIDENCE = {
    "annotated parameter": ("def f(x, t: float):", "t"),
    "parameter with a number default": ("def f(x, t=0.5):", "t"),
    "a setting": ("def f(x, config):", "config.eps"),
    "a size": ("def f(x):\n    t = x.shape[-1]", "t"),
    "a read by .item()": ("def f(x):\n    t = x.max().item()", "t"),
    "math": ("def f(x):\n    t = math.sqrt(2.0)", "t"),
    "a loop index": ("def f(x):\n  for t in range(3):", "t"),
}


@pytest.mark.parametrize("case", NUMBER_EVIDENCE)
def test_where_number_evidence(case):
    head, t = NUMBER_EVIDENCE[case]
    indent = "    " * (2 if "for " in head else 1)
    head = head.replace("\n  for", "\n    for")
    source = f"{head}\n{indent}if x.sum() > 0:\n{indent}    x = x * {t}\n{indent}return x\n"
    assert fix(source, BranchToWhere, "x.sum() > 0") == body(
        f"{head}\n{indent}x = torch.where(x.sum() > 0, x * {t}, x)\n{indent}return x\n"
    )


def test_where_self_attribute_evidence():
    source = """
        class M:
            def __init__(self, eps=1e-5, scale=None):
                self.eps = eps
                self.scale = scale

            def forward(self, x):
                if x.sum() > 0:
                    x = x * self.eps
                if x.max() > 0:
                    x = x * self.scale
                return x
        """
    fixed = fix(source, BranchToWhere, "x.sum() > 0")
    assert "x = torch.where(x.sum() > 0, x * self.eps, x)" in fixed  # set from a number default
    fixed = fix(source, BranchToWhere, "x.max() > 0")
    assert "x = gbfix_where(x.max() > 0, x * self.scale, x)" in fixed  # None by default: anything


@pytest.mark.parametrize("case", WHERE_DECLINES)
def test_where_declines(case):
    stmts, fragment = WHERE_DECLINES[case]
    source = f"def f(self, x, n, flag):\n    {stmts}\n    return x\n"
    assert fix(source, BranchToWhere, fragment) is None


def test_where_declines_site_in_body():
    source = "def f(x):\n    if x.sum() > 0:\n        x = x * 2\n    return x\n"
    assert fix(source, BranchToWhere, "x * 2") is None


def test_where_declines_comprehension_variable():
    source = "def f(xs):\n    return [x * 2 if x.sum() > 0 else x for x in xs]\n"
    assert fix(source, BranchToWhere, "x.sum() > 0") is None


# ---------------------------------------------------------------- branch-to-cond

COND_CASES = {
    "early return, fall through": (
        """
        def pool(hidden, mask):
            if (mask == 0).all():
                return hidden
            return hidden * mask
        """,
        "if (mask == 0).all():",
        """
        def pool(hidden, mask):
            return torch.cond((mask == 0).all(), lambda: hidden.clone(), lambda: hidden * mask)
        """,
    ),
    "if/else with views and tuples": (
        """
        def f(x, y):
            if x.max() > 1:
                return x.t(), y[0]
            else:
                return (x * 2).t(), y.sum(0)
        """,
        "if x.max() > 1:",
        """
        def f(x, y):
            return torch.cond(
                x.max() > 1,
                lambda: (x.t().clone(), y[0].clone()),
                lambda: ((x * 2).t(), y.sum(0)),
            )
        """,
    ),
    "python prefix keeps the final return": (
        """
        class M:
            def forward(self, x):
                if self.training and not x.any():
                    return x + 1
                return x * 2
        """,
        "if self.training and not x.any():",
        """
        class M:
            def forward(self, x):
                if self.training:
                    return torch.cond(torch.logical_not(x.any()), lambda: x + 1, lambda: x * 2)
                return x * 2
        """,
    ),
    "an arm made without grad: the test as written under autograd": (
        """
        def loss(logits, targets):
            num_pos = targets.sum()
            # no positives: nothing to learn from
            if num_pos == 0:
                return logits.new_zeros(())
            return (logits * targets).sum() / num_pos  # mean over positives
        """,
        "if num_pos == 0:",
        """
        def loss(logits, targets):
            num_pos = targets.sum()
            # no positives: nothing to learn from
            # gbfix: as written under autograd: torch.cond's outputs would all require grad
            if torch.is_grad_enabled():
                return (
                    logits.new_zeros(()) if num_pos == 0 else (logits * targets).sum() / num_pos
                )
            return torch.cond(
                num_pos == 0,
                lambda: logits.new_zeros(()),
                lambda: (logits * targets).sum() / num_pos,
            )  # mean over positives
        """,
    ),
    "if/else in a method, tuples made by factories in the else arm": (
        """
        class Head:
            def forward(self, x, mask):
                if mask.any():
                    return (x * mask).sum(-1), mask.sum()
                else:
                    return torch.zeros(x.shape[0]), torch.tensor(0)
        """,
        "if mask.any():",
        """
        class Head:
            def forward(self, x, mask):
                # gbfix: as written under autograd: torch.cond's outputs would all require grad
                if torch.is_grad_enabled():
                    return (
                        ((x * mask).sum(-1), mask.sum())
                        if mask.any()
                        else (torch.zeros(x.shape[0]), torch.tensor(0))
                    )
                return torch.cond(
                    mask.any(),
                    lambda: ((x * mask).sum(-1), mask.sum()),
                    lambda: (torch.zeros(x.shape[0]), torch.tensor(0)),
                )
        """,
    ),
    "elif/else becomes else": (
        """
        def f(x):
            if x.sum() > 0:
                return x * 2
            elif x.mean() < -1:
                return x * 3
            else:
                return x * 4
        """,
        "if x.sum() > 0:\n",
        None,
    ),
}


@pytest.mark.parametrize("case", [c for c in COND_CASES if COND_CASES[c][2] is not None])
def test_cond(case):
    source, fragment, expected = COND_CASES[case]
    assert fix(source, BranchToCond, fragment, whole_if=True) == body(expected)


def test_cond_elif():
    source = body(COND_CASES["elif/else becomes else"][0])
    assert fix(source, BranchToCond, "x.mean() < -1") == body(
        """
        def f(x):
            if x.sum() > 0:
                return x * 2
            else:
                return torch.cond(x.mean() < -1, lambda: x * 3, lambda: x * 4)
        """
    )
    assert fix(source, BranchToCond, "x.sum() > 0") is None  # its else is an elif


def test_cond_lays_out_long_calls():
    source = """
    def pool(hidden_states, attention_mask):
        if (attention_mask == 0).all():
            return hidden_states.mean(1)
        return (hidden_states * attention_mask).sum(1) / attention_mask.sum(1)
    """
    assert fix(source, BranchToCond, "(attention_mask == 0).all()") == body(
        """
        def pool(hidden_states, attention_mask):
            return torch.cond(
                (attention_mask == 0).all(),
                lambda: hidden_states.mean(1),
                lambda: (hidden_states * attention_mask).sum(1) / attention_mask.sum(1),
            )
        """
    )


def test_cond_made_without_grad_declines_a_test_with_a_python_part():
    """Keeping the test as written under autograd takes a plain `if`: not `P and c`, not an `elif`."""
    prefixed = "def f(x, flag):\n    if flag and x.sum() > 0:\n        return torch.zeros(3)\n    return x * 2\n"
    assert fix(prefixed, BranchToCond, "x.sum() > 0") is None
    assert fix(prefixed.replace("torch.zeros(3)", "x + 1"), BranchToCond, "x.sum() > 0") is not None
    chain = "def f(x):\n    if x.sum() > 0:\n        return x * 2\n    elif x.mean() < -1:\n        return x.new_ones(3)\n    else:\n        return x * 4\n"
    assert fix(chain, BranchToCond, "x.mean() < -1") is None


def test_cond_made_without_grad_runs_as_written_under_autograd():
    """The rewritten two-return form against the original, eager and compiled, with autograd
    on and off: the same values and the same requires_grad (the torch.cond, under no_grad, in
    one graph)."""
    torch = pytest.importorskip("torch")
    source = body(COND_CASES["an arm made without grad: the test as written under autograd"][0])
    rewritten = fix(source, BranchToCond, "if num_pos == 0:", whole_if=True)
    original: dict = {}
    exec(compile("import torch\n" + source, "loss.py", "exec"), original)
    fixed: dict = {}
    exec(compile(rewritten, "loss_fixed.py", "exec"), fixed)
    logits = torch.randn(4, requires_grad=True)
    for targets in (torch.tensor([1.0, 0, 1, 0]), torch.zeros(4)):
        for grad, compiled in ((True, False), (True, True), (False, False), (False, True)):
            with torch.set_grad_enabled(grad):
                want = original["loss"](logits, targets)
                f = fixed["loss"]
                got = torch.compile(f, backend="eager", fullgraph=not grad)(logits, targets) if compiled else f(logits, targets)
            assert (torch.equal(want, got), got.requires_grad) == (True, want.requires_grad), (targets, grad, compiled)


COND_DECLINES = {
    "returns None": "if x.sum() > 0:\n        return None\n    return x * 2",
    "returns a constant": "if x.sum() > 0:\n        return 0.0\n    return x * 2",
    "bare return": "if x.sum() > 0:\n        return\n    return x * 2",
    "two statements in the arm": "if x.sum() > 0:\n        y = x * 2\n        return y\n    return x",
    "nothing follows": "if x.sum() > 0:\n        return x * 2",
    "submodule call": "if x.sum() > 0:\n        return self.proj(x)\n    return x * 2",
    "print in an arm": "if x.sum() > 0:\n        return print(x)\n    return x * 2",
    "name bound after": "if x.sum() > 0:\n        return later * 2\n    return x * 2",
}


@pytest.mark.parametrize("case", COND_DECLINES)
def test_cond_declines(case):
    source = f"def f(self, x, flag):\n    {COND_DECLINES[case]}\n"
    assert fix(source, BranchToCond, "x.sum() > 0") is None


COND_REST_CASES = {
    "a length test on a selection, a name rebound, an outer tensor returned": (
        """
        def no_match(dm):
            return torch.empty(0, 1), torch.empty(0, 2, dtype=torch.long)


        def match(dm, th):
            vals, idx = torch.topk(dm, 2, dim=1, largest=False)
            ratio = vals[:, 0] / vals[:, 1]
            mask = ratio <= th
            dists = ratio[mask]
            if len(dists) == 0:
                return no_match(dm)
            rows = torch.arange(0, idx.size(0))[mask]
            idx = idx[:, 0][mask]
            pairs = torch.stack([rows, idx], 1)
            return dists.view(-1, 1), pairs.view(-1, 2)
        """,
        "if len(dists) == 0:",
        """
        def no_match(dm):
            return torch.empty(0, 1), torch.empty(0, 2, dtype=torch.long)


        def match(dm, th):
            vals, idx = torch.topk(dm, 2, dim=1, largest=False)
            ratio = vals[:, 0] / vals[:, 1]
            mask = ratio <= th
            dists = ratio[mask]

            def otherwise(idx):
                rows = torch.arange(0, idx.size(0))[mask]
                idx = idx[:, 0][mask]
                pairs = torch.stack([rows, idx], 1)
                return dists.view(-1, 1).clone(), pairs.view(-1, 2)

            # gbfix: as written under autograd: torch.cond's outputs would all require grad
            if torch.is_grad_enabled():
                return no_match(dm) if len(dists) == 0 else otherwise(idx)
            return torch.cond(len(dists) == 0, lambda idx: no_match(dm), otherwise, (idx,))
        """,
    ),
    "a tensor test in a method, nothing rebound": (
        """
        class Head:
            def forward(self, x, mask):
                # nothing selected: a zero score per row
                if not mask.any():
                    return x.new_zeros(x.shape[0])
                picked = x * mask
                return picked.sum(-1)
        """,
        "if not mask.any():",
        """
        class Head:
            def forward(self, x, mask):
                def otherwise():
                    picked = x * mask
                    return picked.sum(-1)

                # gbfix: as written under autograd: torch.cond's outputs would all require grad
                if torch.is_grad_enabled():
                    return x.new_zeros(x.shape[0]) if not mask.any() else otherwise()
                # nothing selected: a zero score per row
                return torch.cond(
                    torch.logical_not(mask.any()),
                    lambda: x.new_zeros(x.shape[0]),
                    otherwise,
                )
        """,
    ),
    "a shape subscript test, the first statement, a parameter rebound by arithmetic": (
        """
        def areas(boxes):
            if boxes.shape[0] == 0:
                return boxes.new_zeros(0)

            boxes = boxes.clamp(min=0)
            w = boxes[:, 2] - boxes[:, 0]
            return w * (boxes[:, 3] - boxes[:, 1])
        """,
        "if boxes.shape[0] == 0:",
        """
        def areas(boxes):
            def otherwise(boxes):
                boxes = boxes.clamp(min=0)
                w = boxes[:, 2] - boxes[:, 0]
                return w * (boxes[:, 3] - boxes[:, 1])

            # gbfix: as written under autograd: torch.cond's outputs would all require grad
            if torch.is_grad_enabled():
                return boxes.new_zeros(0) if boxes.shape[0] == 0 else otherwise(boxes)
            return torch.cond(
                boxes.shape[0] == 0,
                lambda boxes: boxes.new_zeros(0),
                otherwise,
                (boxes,),
            )
        """,
    ),
    "the input itself returned early: no test kept for autograd": (
        """
        def clip(boxes, size):
            kept = boxes[boxes[:, 0] < size]
            if kept.numel() == 0:
                return kept
            kept = kept.clamp(min=0, max=size)
            return kept
        """,
        "if kept.numel() == 0:",
        """
        def clip(boxes, size):
            kept = boxes[boxes[:, 0] < size]

            def otherwise(kept):
                kept = kept.clamp(min=0, max=size)
                return kept

            return torch.cond(kept.numel() == 0, lambda kept: kept.clone(), otherwise, (kept,))
        """,
    ),
}


@pytest.mark.parametrize("case", COND_REST_CASES)
def test_cond_takes_the_rest_of_the_function(case):
    source, fragment, expected = COND_REST_CASES[case]
    assert fix(source, BranchToCond, fragment, whole_if=True) == body(expected)


COND_REST_DECLINES = {
    "returns twice": "y = x * 2\n    if y.max() > 4:\n        return y\n    return y + 1",
    "assigns into self": "self.count = x.numel()\n    return x * 2",
    "calls a submodule": "y = self.proj(x)\n    return y",
    "in-place op": "x.add_(1)\n    return x",
    "prints": "print(x)\n    return x",
    "ends without a return": "y = x * 2",
    "random draw": "noise = torch.randn_like(x)\n    return x + noise",
}


@pytest.mark.parametrize("case", COND_REST_DECLINES)
def test_cond_rest_declines(case):
    source = f"def f(self, x):\n    if x.sum() > 0:\n        return x * 2\n    {COND_REST_DECLINES[case]}\n"
    assert fix(source, BranchToCond, "x.sum() > 0") is None


def test_cond_rest_only_at_the_top_of_a_function():
    source = "def f(xs):\n    for x in xs:\n        if x.sum() > 0:\n            return x * 2\n        y = x + 1\n        return y\n"
    assert fix(source, BranchToCond, "x.sum() > 0") is None


def test_cond_needs_capability():
    source = "def f(x):\n    if x.sum() > 0:\n        return x * 2\n    return x * 3\n"
    assert fix(source, BranchToCond, "x.sum() > 0", capabilities=ALL_CAPABILITIES - {"cond"}) is None


# ---------------------------------------------------------------- branch-to-check


def test_check_f_string_message_names_the_test():
    source = """
    def f(x, name):
        if torch.isnan(x).any():
            raise ValueError(f"NaN in {name}")
        return x
    """
    assert fix(source, BranchToCheck, "if torch.isnan(x).any():", whole_if=True) == body(
        """
        def f(x, name):
            torch._assert_async(
                torch.logical_not(torch.isnan(x).any()),
                "ValueError: torch.isnan(x).any()",
            )
            return x
        """
    )


def test_check_not_is_not_negated_twice_and_prefix_stays():
    source = """
    class M:
        def forward(self, x):
            if self.training and not torch.isfinite(x).all():
                raise errors.Bad('inf "x"')
            return x
    """
    assert fix(source, BranchToCheck, "if self.training", whole_if=True) == body(
        """
        class M:
            def forward(self, x):
                if self.training:
                    torch._assert_async(torch.isfinite(x).all(), "errors.Bad: inf \\"x\\"")
                return x
        """
    )


def test_check_elif_and_comparison():
    source = """
    def f(v, step):
        if step < 0:
            raise ValueError("negative step")
        elif v != v:
            raise OverflowError
        return v
    """
    assert fix(source, BranchToCheck, "v != v") == body(
        """
        def f(v, step):
            if step < 0:
                raise ValueError("negative step")
            else:
                torch._assert_async(torch.logical_not(v != v), "OverflowError: v != v")
            return v
        """
    )


CHECK_DECLINES = {
    "else branch": "if x.sum() > 0:\n        raise ValueError('x')\n    else:\n        x = x * 2",
    "more than the raise": "if x.sum() > 0:\n        print('bad')\n        raise ValueError('x')",
    "bare raise": "if x.sum() > 0:\n        raise",
    "raise from": "if x.sum() > 0:\n        raise ValueError('x') from err",
    "not a raise": "if x.sum() > 0:\n        x = x * 2",
}


@pytest.mark.parametrize("case", CHECK_DECLINES)
def test_check_declines(case):
    source = f"def f(x, flag, err):\n    {CHECK_DECLINES[case]}\n    return x\n"
    assert fix(source, BranchToCheck, "x.sum() > 0") is None


def test_check_is_unsafe():
    assert BranchToCheck.safety == "unsafe"
    assert BranchToWhere.safety == BranchToCond.safety == "safe"


def test_whole_if_span_needs_each_tensor_operand_of_an_or_to_look_like_one():
    tensor_or = "def f(x, y):\n    if x.isnan().any() or y.sum() > 0:\n        raise ValueError('x')\n    return x\n"
    assert fix(tensor_or, BranchToCheck, "if x.isnan", whole_if=True) == body(
        """
        def f(x, y):
            torch._assert_async(
                torch.logical_not(torch.logical_or(x.isnan().any(), y.sum() > 0)),
                "ValueError: x",
            )
            return x
        """
    )
    unknown = "def f(x, y):\n    if x.isnan().any() or y[0]:\n        raise ValueError('x')\n    return x\n"
    assert fix(unknown, BranchToCheck, "if x.isnan", whole_if=True) is None  # y[0] may be a Python value


def test_check_keeps_a_python_or_operand_as_an_if():
    source = "def f(x, flag):\n    if flag or x.sum() > 0:\n        raise ValueError('x')\n    return x\n"
    assert fix(source, BranchToCheck, "if flag", whole_if=True) == body(
        """
        def f(x, flag):
            if flag:
                raise ValueError('x')
            else:
                torch._assert_async(torch.logical_not(x.sum() > 0), "ValueError: x")
            return x
        """
    )


def test_cond_keeps_comments_of_both_returns():
    source = """
    def pool(hidden, mask):
        # nothing to pool over
        if (mask == 0).all():
            return hidden.mean(0)
        # masked mean
        return (hidden * mask).sum(0)  # per feature
    """
    assert fix(source, BranchToCond, "if (mask == 0)", whole_if=True) == body(
        """
        def pool(hidden, mask):
            # nothing to pool over
            # masked mean
            return torch.cond(
                (mask == 0).all(),
                lambda: hidden.mean(0),
                lambda: (hidden * mask).sum(0),
            )  # per feature
        """
    )


def test_where_takes_a_masked_fill_arm_whatever_its_mask():
    # masked_fill returns its receiver's shape and dtype: the mask only has to broadcast.
    src = """
    def f(scores, all_pad):
        scores = scores.softmax(-1)
        if all_pad.any():
            scores = scores.masked_fill(all_pad[:, None, None, None], 0.0)
        return scores
    """
    out = fix(src, BranchToWhere, "all_pad.any()")
    assert (
        "    scores = torch.where(\n"
        "        all_pad.any(),\n"
        "        scores.masked_fill(all_pad[:, None, None, None], 0.0),\n"
        "        scores,\n"
        "    )\n"
    ) in out
    assert fix(src.replace("masked_fill(", "masked_fill_("), BranchToWhere, "all_pad.any()") is None  # in place


# ---------------------------------------------------------------- torch.tensor arms (Phi-3 LongRoPE)

LONGROPE = """
def factors(self, x, position_ids):
    seq_len = torch.max(position_ids) + 1
    if seq_len > self.original_max:
        ext = torch.tensor(self.long_factor, dtype=torch.float32, device=x.device)
    else:
        ext = torch.tensor(self.short_factor, dtype=torch.float32, device=x.device)
    return ext
"""


def test_where_takes_tensor_constructors_of_one_dtype():
    out = fix(LONGROPE, BranchToWhere, "seq_len > self.original_max")
    assert out is not None
    assert textwrap.dedent("""\
        ext = torch.where(
            seq_len > self.original_max,
            torch.tensor(self.long_factor, dtype=torch.float32, device=x.device),
            torch.tensor(self.short_factor, dtype=torch.float32, device=x.device),
        )
        return ext
    """) in textwrap.dedent(out.split("position_ids) + 1\n", 1)[1])


@pytest.mark.parametrize(
    "change",
    [
        ("self.short_factor, dtype=torch.float32, device=x.device", "self.short_factor, device=x.device"),
        ("self.short_factor, dtype=torch.float32", "self.short_factor, dtype=torch.float64"),  # dtypes differ
        ("torch.tensor(self.short_factor", "torch.as_tensor(self.short_factor"),  # another constructor
    ],
)
def test_where_declines_tensor_constructors_that_may_differ(change):
    source = LONGROPE.replace(*change)
    assert source != LONGROPE
    assert fix(source, BranchToWhere, "seq_len > self.original_max") is None


def test_where_declines_tensor_constructors_without_dtype():
    source = LONGROPE.replace("dtype=torch.float32, ", "")
    assert fix(source, BranchToWhere, "seq_len > self.original_max") is None


# ---------------------------------------------------------------- Python and tensor parts mixed
# CPython 3.11 puts every jump of an `and`/`or` test on its first operand (or the
# whole `if`), so the site does not say which operand is the tensor: the recipes
# tell them apart by their shape, wherever the Python part stands.

MIXED_CASES = {
    "tensor first, self.training after (method)": (
        """
        class M:
            def forward(self, x, m):
                if m.any() and self.training:
                    x = x.clamp(-1, 1) * 0.5
                return x
        """,
        "m.any() and self.training",
        BranchToWhere,
        """
        class M:
            def forward(self, x, m):
                if self.training:
                    x = torch.where(m.any(), x.clamp(-1, 1) * 0.5, x)
                return x
        """,
    ),
    "shape test first (the site is on it)": (
        """
        def f(x, drop):
            if x.shape[1] > 0 and drop.any():
                x = x.clamp(-1, 1)
            return x
        """,
        "x.shape[1] > 0",
        BranchToWhere,
        """
        def f(x, drop):
            if x.shape[1] > 0:
                x = torch.where(drop.any(), x.clamp(-1, 1), x)
            return x
        """,
    ),
    "is not None, tensor test inline": (
        """
        def f(x, mask):
            if mask is not None and (mask == 0).all():
                x = torch.zeros_like(x)
            return x
        """,
        "mask is not None",
        BranchToWhere,
        """
        def f(x, mask):
            if mask is not None:
                x = gbfix_where((mask == 0).all(), torch.zeros_like(x), x)
            return x
        """,
    ),
    "or: the body stays for the Python part": (
        """
        class M:
            def forward(self, x):
                if not self.training or not x.isfinite().all():
                    x = torch.nan_to_num(x)
                return x
        """,
        "if not self.training",
        BranchToWhere,
        """
        class M:
            def forward(self, x):
                if not self.training:
                    x = torch.nan_to_num(x)
                else:
                    x = torch.where(
                        torch.logical_not(x.isfinite().all()),
                        torch.nan_to_num(x),
                        x,
                    )
                return x
        """,
    ),
    "tensor first, dtype test after, with an else": (
        """
        def f(x):
            if x.abs().max() > 1e4 and x.dtype == torch.float16:
                y = x.clamp(-1e4, 1e4)
            else:
                y = x * 1
            return y
        """,
        "x.abs().max() > 1e4",
        BranchToWhere,
        """
        def f(x):
            if x.dtype == torch.float16:
                y = torch.where(x.abs().max() > 1e4, x.clamp(-1e4, 1e4), x * 1)
            else:
                y = x * 1
            return y
        """,
    ),
    "elif with a Python part": (
        """
        def f(x, lo):
            if x.mean() > 1:
                x = x - 1
            elif lo is None or x.mean() < lo:
                x = x + 1
            return x
        """,
        "lo is None",
        BranchToWhere,
        """
        def f(x, lo):
            if x.mean() > 1:
                x = x - 1
            elif lo is None:
                x = x + 1
            else:
                x = torch.where(x.mean() < lo, x + 1, x)
            return x
        """,
    ),
    "conditional expression with a Python part": (
        """
        def f(x, mask):
            return x.abs() * 2 if mask is not None and mask.any() else x.abs()
        """,
        "mask is not None",
        BranchToWhere,
        """
        def f(x, mask):
            return torch.where(mask.any(), x.abs() * 2, x.abs()) if mask is not None else x.abs()
        """,
    ),
    "cond: or with a fall-through return": (
        """
        class M:
            def forward(self, x):
                if not self.training or x.isfinite().all():
                    return x + 1
                return x * 2
        """,
        "if not self.training",
        BranchToCond,
        """
        class M:
            def forward(self, x):
                if not self.training:
                    return x + 1
                return torch.cond(x.isfinite().all(), lambda: x + 1, lambda: x * 2)
        """,
    ),
    "cond: if/else under a shape test": (
        """
        def f(x, m):
            if m.any() and m.shape[1] > 0:
                return x + 1
            else:
                return x * 2
        """,
        "m.any() and",
        BranchToCond,
        """
        def f(x, m):
            if m.shape[1] > 0:
                return torch.cond(m.any(), lambda: x + 1, lambda: x * 2)
            else:
                return x * 2
        """,
    ),
}


@pytest.mark.parametrize("case", MIXED_CASES)
def test_mixed_python_and_tensor_test(case):
    source, fragment, recipe, expected = MIXED_CASES[case]
    assert fix(source, recipe, fragment) == (with_where(expected) if "gbfix_where" in expected else body(expected))


MIXED_DECLINES = {
    # a later operand that is not visibly static might be a tensor (or raise) when evaluated first
    "unknown name after the tensor": "if x.sum() > 0 and flag:\n        x = x * 2",
    "attribute of an unknown object after the tensor": "if x.sum() > 0 and self.cfg.on:\n        x = x * 2",
    "subscript compared to a name after the tensor": "if x.sum() > 0 and x.shape[0] > n:\n        x = x * 2",
    "two Python-looking operands, no tensor shown": "if flag and n:\n        x = x * 2",
    # evaluated first, `n.shape` would raise for an n the original never read (None, say)
    "shape of a name the tensor part does not use": "if x.sum() > 0 and n.shape[1] > 0:\n        x = x * 2",
    "attribute test of a name the tensor part does not use": "if x.sum() > 0 and not n.requires_grad:\n        x = x * 2",
}


@pytest.mark.parametrize("case", MIXED_DECLINES)
def test_mixed_declines(case):
    source = f"def f(self, x, n, flag):\n    {MIXED_DECLINES[case]}\n    return x\n"
    assert fix(source, BranchToWhere, "if ", whole_if=True) is None


def test_a_tensor_flag_in_a_local_with_a_static_part_after_it():
    source = """
    class M:
        def forward(self, x, mask):
            has_pad = mask.any()
            if has_pad and self.training:
                x = x.masked_fill(mask, 0.0)
            return x
    """
    assert fix(source, BranchToWhere, "if has_pad", whole_if=True) == body(
        """
        class M:
            def forward(self, x, mask):
                has_pad = mask.any()
                if self.training:
                    x = torch.where(has_pad, x.masked_fill(mask, 0.0), x)
                return x
        """
    )


# ---------------------------------------------------------------- arms of several assignments

STEPS_CASES = {
    "fp16 overflow clamp (Bart, helper)": (
        """
        def clamp_fp16(hidden_states):
            if hidden_states.dtype == torch.float16 and torch.isinf(hidden_states).any():
                clamp_value = torch.finfo(hidden_states.dtype).max - 1000
                hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
            return hidden_states
        """,
        "hidden_states.dtype == torch.float16",
        """
        def clamp_fp16(hidden_states):
            if hidden_states.dtype == torch.float16:
                clamp_value = torch.finfo(hidden_states.dtype).max - 1000
                hidden_states = torch.where(
                    torch.isinf(hidden_states).any(),
                    torch.clamp(hidden_states, min=-clamp_value, max=clamp_value),
                    hidden_states,
                )
            return hidden_states
        """,
    ),
    "fp16 clamp with an or inside parentheses (method)": (
        """
        class Layer:
            def forward(self, h):
                h = self.fc(h)
                if h.dtype == torch.float16 and (torch.isinf(h).any() or torch.isnan(h).any()):
                    # keep fp16 finite
                    clamp_value = torch.finfo(h.dtype).max - 1000
                    h = torch.clamp(h, min=-clamp_value, max=clamp_value)  # T5
                return h
        """,
        "h.dtype == torch.float16",
        """
        class Layer:
            def forward(self, h):
                h = self.fc(h)
                if h.dtype == torch.float16:
                    # keep fp16 finite
                    clamp_value = torch.finfo(h.dtype).max - 1000
                    h = torch.where(
                        torch.logical_or(torch.isinf(h).any(), torch.isnan(h).any()),
                        torch.clamp(h, min=-clamp_value, max=clamp_value),
                        h,
                    )  # T5
                return h
        """,
    ),
    "two updates read the test once, before the arm changes it": (
        """
        def f(x, y):
            if x.sum() > 0:
                x = x * 2
                y = y.abs() * 2
            return x, y
        """,
        "x.sum() > 0",
        """
        def f(x, y):
            pred = x.sum() > 0
            x = torch.where(pred, x * 2, x)
            y = torch.where(pred, y.abs() * 2, y)
            return x, y
        """,
    ),
    "a scale read by item-to-tensor (what it writes: .detach())": (
        """
        def f(h, ref):
            h = torch.tanh(h)
            if h.abs().max() > 0.5:
                s = ref.mean().detach()
                h = h * s
            return h
        """,
        "h.abs().max() > 0.5",
        """
        def f(h, ref):
            h = torch.tanh(h)
            s = ref.mean().detach()
            h = torch.where(h.abs().max() > 0.5, h * s, h)
            return h
        """,
    ),
}


@pytest.mark.parametrize("case", STEPS_CASES)
def test_where_arm_of_several_assignments(case):
    source, fragment, expected = STEPS_CASES[case]
    assert fix(source, BranchToWhere, fragment) == body(expected)


STEPS_DECLINES = {
    "temporary read after the if": "if x.sum() > 0:\n        s = x.max()\n        x = x * s\n    print(s)",
    "temporary read before the if": "s = 1\n    if x.sum() > 0:\n        s = x.max()\n        x = x * s",
    "temporary with a singular gradient": "if x.sum() > 0:\n        s = (1 / x.sum()).log()\n        x = x * s",
    "temporary from a random draw": "if x.sum() > 0:\n        s = torch.rand(())\n        x = x * s",
    "only temporaries": "if x.sum() > 0:\n        s = x.max()\n        t = s * 2",
    "a statement that is not an assignment": "if x.sum() > 0:\n        x = x * 2\n        log(x)",
    # `x.any()` is false for an empty x: the temporary would now fail there
    "temporary that fails on an empty tensor": "if x.sum() > 0:\n        s = x.amax()\n        x = x * s",
    "temporary picking a first element": "if x.sum() > 0:\n        s = x[0]\n        x = x * s",
    "temporary indexed by data": "if x.sum() > 0:\n        s = x[x > 0].mean()\n        x = x * s",
}


@pytest.mark.parametrize("case", STEPS_DECLINES)
def test_where_arm_of_several_assignments_declines(case):
    source = f"def f(x):\n    {STEPS_DECLINES[case]}\n    return x\n"
    assert fix(source, BranchToWhere, "x.sum() > 0") is None


# ---------------------------------------------------------------- branch-to-general-path

GENERAL_CASES = {
    "fairseq: a flag in a local, reused by a conditional expression": (
        """
        def encode(x, tokens):
            padding_mask = tokens.eq(1)
            has_pads = padding_mask.any()
            if has_pads:
                x = x * (1 - padding_mask.unsqueeze(-1).type_as(x))
            return x, padding_mask if has_pads else None
        """,
        "if has_pads:",
        """
        def encode(x, tokens):
            padding_mask = tokens.eq(1)
            has_pads = padding_mask.any()
            x = x * (1 - padding_mask.unsqueeze(-1).type_as(x))
            return x, padding_mask if has_pads else None
        """,
    ),
    "method, inline any() under self.training, indexed mask": (
        """
        class Attention:
            def forward(self, scores, lengths):
                pad = lengths[:, None] <= torch.arange(scores.shape[-1])
                if self.training and pad.any():
                    scores = scores.masked_fill(pad[:, None, :], float("-inf"))
                return scores
        """,
        "if self.training",
        """
        class Attention:
            def forward(self, scores, lengths):
                pad = lengths[:, None] <= torch.arange(scores.shape[-1])
                if self.training:
                    scores = scores.masked_fill(pad[:, None, :], float("-inf"))
                return scores
        """,
    ),
    "an inline comparison, filled through an index of what it compares": (
        """
        class Attn:
            def forward(self, scores, am):
                if (am == 0).any():
                    scores = scores.masked_fill(am[:, None, None, :] == 0, float("-inf"))
                return scores.softmax(-1)
        """,
        "if (am == 0).any():",
        """
        class Attn:
            def forward(self, scores, am):
                scores = scores.masked_fill(am[:, None, None, :] == 0, float("-inf"))
                return scores.softmax(-1)
        """,
    ),
    "nucleus sampling: the mask scattered back to the logits' order": (
        """
        def nucleus(logits, sorted_idx, cum, top_p: float):
            remove = cum > top_p
            remove[..., 1:] = remove[..., :-1].clone()
            remove[..., 0] = False
            if remove.any():
                logits = logits.masked_fill(remove.scatter(-1, sorted_idx, remove), float("-inf"))
            return logits
        """,
        "if remove.any():",
        """
        def nucleus(logits, sorted_idx, cum, top_p: float):
            remove = cum > top_p
            remove[..., 1:] = remove[..., :-1].clone()
            remove[..., 0] = False
            logits = logits.masked_fill(remove.scatter(-1, sorted_idx, remove), float("-inf"))
            return logits
        """,
    ),
    "torch.any of a comparison, finfo fill, ~mask product": (
        """
        def f(scores, x, ids):
            all_pad = (ids == 0).all(-1)
            if torch.any(all_pad):
                scores = torch.masked_fill(scores, all_pad[:, None], torch.finfo(scores.dtype).min)
            if all_pad.any():
                x = x * (~all_pad).view(-1, 1).type_as(x)
            return scores, x
        """,
        "if torch.any(all_pad):",
        """
        def f(scores, x, ids):
            all_pad = (ids == 0).all(-1)
            scores = torch.masked_fill(scores, all_pad[:, None], torch.finfo(scores.dtype).min)
            if all_pad.any():
                x = x * (~all_pad).view(-1, 1).type_as(x)
            return scores, x
        """,
    ),
}


@pytest.mark.parametrize("case", GENERAL_CASES)
def test_general_path(case):
    source, fragment, expected = GENERAL_CASES[case]
    assert fix(source, BranchToGeneralPath, fragment, whole_if=True) == body(expected)


def test_general_path_for_a_product_with_not_mask():
    source, _, _ = GENERAL_CASES["torch.any of a comparison, finfo fill, ~mask product"]
    out = fix(source, BranchToGeneralPath, "if all_pad.any():", whole_if=True)
    assert "    x = x * (~all_pad).view(-1, 1).type_as(x)\n    return" in out


GENERAL_DECLINES = {
    # masked_fill raises for a non-boolean mask that the original never passed it
    "mask of unknown dtype": ("mask = m", "x = x.masked_fill(mask, 0.0)"),
    "mask bound twice": ("mask = m > 0\n    mask = m", "x = x.masked_fill(mask, 0.0)"),
    "mask's storage replaced": ("mask = m > 0\n    mask.data = m", "x = x.masked_fill(mask, 0.0)"),
    "a tensor fill value would get a zero gradient": ("mask = m > 0", "x = x.masked_fill(mask, v)"),
    "receiver is not the target": ("mask = m > 0", "x = v.masked_fill(mask, 0.0)"),
    "another mask": ("mask = m > 0", "x = x.masked_fill(m > 1, 0.0)"),
    "the mask inverted": ("mask = m > 0", "x = x.masked_fill(~mask, 0.0)"),
    "an index of the mask's operand compared with something else": ("mask = m > 0", "x = x.masked_fill(m[:, None] > 1, 0.0)"),
    "an index of the mask's operand compared with a tensor": ("mask = m > 0", "x = x.masked_fill(m[:, None] > v, 0.0)"),
    "the mask scattered with other values": ("mask = m > 0", "x = x.masked_fill(mask.scatter(0, i, m > 1), 0.0)"),
    "a gather of another mask": ("mask = m > 0", "x = x.masked_fill((m > 1).gather(0, i), 0.0)"),
    "a float 1.0 promotes an integer target": ("mask = m > 0", "x = x * (1.0 - mask.type_as(x))"),
    "a cast to another dtype": ("mask = m > 0", "x = x * (1 - mask.float())"),
    "a product with the mask itself": ("mask = m > 0", "x = x * mask.type_as(x)"),
}


@pytest.mark.parametrize("case", GENERAL_DECLINES)
def test_general_path_declines(case):
    setup, update = GENERAL_DECLINES[case]
    source = f"def f(x, m, v):\n    {setup}\n    if mask.any():\n        {update}\n    return x\n"
    assert fix(source, BranchToGeneralPath, "if mask.any():", whole_if=True) is None


def test_general_path_declines_else_and_in_place_use():
    with_else = "def f(x, m):\n    mask = m > 0\n    if mask.any():\n        x = x.masked_fill(mask, 0.0)\n    else:\n        x = x * 2\n    return x\n"
    assert fix(with_else, BranchToGeneralPath, "if mask.any():", whole_if=True) is None
    in_place = "def f(x, m):\n    mask = m > 0\n    if mask.any():\n        x = x.masked_fill(mask, 0.0)\n    x.add_(1)\n    return x\n"
    assert fix(in_place, BranchToGeneralPath, "if mask.any():", whole_if=True) is None


def test_general_path_is_preferred_to_where():
    names = [r.name for r in RECIPES]
    assert names.index("branch-to-general-path") < names.index("branch-to-where")


# ---------------------------------------------------------------- branch-drop-shortcut (unsafe)

SHORTCUT_CASES = {
    "transformers: an all-ones mask becomes None (helper)": (
        """
        def attend(q, k, attention_mask):
            if attention_mask is not None and (attention_mask == 1).all():
                attention_mask = None
            return score(q, k, attention_mask)
        """,
        """
        def attend(q, k, attention_mask):
            return score(q, k, attention_mask)
        """,
    ),
    "early return None (method)": (
        """
        class Masks:
            def expand(self, mask):
                if torch.all(mask == 1):
                    return None
                return mask[:, None, None, :].float()
        """,
        """
        class Masks:
            def expand(self, mask):
                return mask[:, None, None, :].float()
        """,
    ),
    "or: the Python part keeps its shortcut": (
        """
        def f(x, mask, use_mask):
            if not use_mask or (mask == 1).all():
                mask = None
            return g(x, mask)
        """,
        """
        def f(x, mask, use_mask):
            if not use_mask:
                mask = None
            return g(x, mask)
        """,
    ),
}


@pytest.mark.parametrize("case", SHORTCUT_CASES)
def test_drop_shortcut(case):
    source, expected = SHORTCUT_CASES[case]
    assert fix(source, BranchDropShortcut, "if ", whole_if=True) == body(expected)


SHORTCUT_DECLINES = {
    "name not bound before": "if (x == 1).all():\n        y = None\n    return x",
    "returns a tensor": "if (x == 1).all():\n        return x\n    return x * 2",
    "the last statement": "x = x * 2\n    if (x == 1).all():\n        return None",
    "impure test": "if (x.add_(1) == 1).all():\n        x = None\n    return x",
    "an else": "if (x == 1).all():\n        x = None\n    else:\n        x = x * 2\n    return x",
}


@pytest.mark.parametrize("case", SHORTCUT_DECLINES)
def test_drop_shortcut_declines(case):
    source = f"def f(x):\n    {SHORTCUT_DECLINES[case]}\n"
    assert fix(source, BranchDropShortcut, "if ", whole_if=True) is None


def test_drop_shortcut_is_unsafe_and_general_path_safe():
    assert BranchDropShortcut.safety == "unsafe"
    assert BranchToGeneralPath.safety == "safe"


GENERAL_FINITE_CASES = {
    "nan_to_num under not isfinite().all() (helper)": (
        """
        def clean(x):
            if not torch.isfinite(x).all():
                x = torch.nan_to_num(x, nan=0.0, posinf=1e4, neginf=-1e4)
            return x
        """,
        "if not torch.isfinite",
        """
        def clean(x):
            x = torch.nan_to_num(x, nan=0.0, posinf=1e4, neginf=-1e4)
            return x
        """,
    ),
    "method form under self.training": (
        """
        class M:
            def forward(self, h):
                if self.training and not h.isfinite().all():
                    h = h.nan_to_num()
                return h
        """,
        "if self.training",
        """
        class M:
            def forward(self, h):
                if self.training:
                    h = h.nan_to_num()
                return h
        """,
    ),
    "isnan | isinf in a flag": (
        """
        def f(h):
            bad = torch.isnan(h).any() | torch.isinf(h).any()
            if bad:
                h = torch.nan_to_num(h)
            return h
        """,
        "if bad:",
        """
        def f(h):
            bad = torch.isnan(h).any() | torch.isinf(h).any()
            h = torch.nan_to_num(h)
            return h
        """,
    ),
    "conditional expression on a padding flag": (
        """
        def f(x, ids):
            pad = ids.eq(0)
            has_pad = pad.any()
            x = x.masked_fill(pad[..., None], 0.0) if has_pad else x
            return x
        """,
        "if has_pad",
        """
        def f(x, ids):
            pad = ids.eq(0)
            has_pad = pad.any()
            x = x.masked_fill(pad[..., None], 0.0)
            return x
        """,
    ),
}


@pytest.mark.parametrize("case", GENERAL_FINITE_CASES)
def test_general_path_finite_and_conditional_expressions(case):
    source, fragment, expected = GENERAL_FINITE_CASES[case]
    assert fix(source, BranchToGeneralPath, fragment) == body(expected)


GENERAL_FLAG_DECLINES = {
    # nan_to_num also replaces infinities, which a NaN-only test leaves alone
    "NaN-only test": "if torch.isnan(x).any():\n        x = torch.nan_to_num(x)",
    "nan_to_num of another tensor": "if not torch.isfinite(y).all():\n        x = torch.nan_to_num(x)",
    "a tensor as the nan value": "if not torch.isfinite(x).all():\n        x = torch.nan_to_num(x, nan=y)",
    "flag read after the tensor changed": "bad = not torch.isfinite(x).all()\n    x = x * 2\n    if bad:\n        x = torch.nan_to_num(x)",
    "mask input rebound after the flag": "has = (y > 0).any()\n    y = y - 1\n    if has:\n        x = x.masked_fill(y > 0, 0.0)",
    "flag bound outside the loop": "has = (y > 0).any()\n    for _ in range(2):\n        if has:\n            x = x.masked_fill(y > 0, 0.0)\n        y = y - 1",
    "flag bound twice": "has = (y > 0).any()\n    has = (y > 1).any()\n    if has:\n        x = x.masked_fill(y > 0, 0.0)",
    "a where selecting with the mask may change the dtype": "m = y > 0\n    if m.any():\n        x = torch.where(m, 0.5, x)",
}


@pytest.mark.parametrize("case", GENERAL_FLAG_DECLINES)
def test_general_path_flag_declines(case):
    source = f"def f(x, y):\n    {GENERAL_FLAG_DECLINES[case]}\n    return x\n"
    assert fix(source, BranchToGeneralPath, "if ", whole_if=True) is None


def test_general_path_takes_a_flag_when_nothing_changes_in_between():
    # the counterpart of the "mask input rebound after the flag" decline
    source = "def f(x, y):\n    has = (y > 0).any()\n    z = y - 1\n    if has:\n        x = x.masked_fill(y > 0, 0.0)\n    return x, z\n"
    assert fix(source, BranchToGeneralPath, "if ", whole_if=True) == body(
        "def f(x, y):\n    has = (y > 0).any()\n    z = y - 1\n    x = x.masked_fill(y > 0, 0.0)\n    return x, z\n"
    )


def test_general_path_for_a_where_that_fills_nan():
    source = """
    def f(x):
        if torch.any(torch.isnan(x)):
            x = torch.where(torch.isnan(x), torch.zeros_like(x), x)
        return x
    """
    assert fix(source, BranchToGeneralPath, "if torch.any", whole_if=True) == body(
        """
        def f(x):
            x = torch.where(torch.isnan(x), torch.zeros_like(x), x)
            return x
        """
    )
    # a Python number as the fill may promote an integer x to float: not the identity
    assert fix(source.replace("torch.zeros_like(x)", "0.0"), BranchToGeneralPath, "if torch.any", whole_if=True) is None
    # a fill that depends on another tensor would give it a zero gradient
    with_y = source.replace("torch.zeros_like(x)", "torch.full_like(x, y)").replace("def f(x)", "def f(x, y)")
    assert fix(with_y, BranchToGeneralPath, "if torch.any", whole_if=True) is None
    assert fix(with_y.replace("full_like(x, y)", "full_like(x, -1.0)"), BranchToGeneralPath, "if torch.any", whole_if=True)


# ---------------------------------------------------------------- arms of unproven shapes: checked selects (safe)

UNPROVEN_CASES = {
    "MoE accumulation in a loop (helper)": (
        """
        def combine(x, top, probs):
            out = torch.zeros_like(x)
            for e in range(4):
                sel = top == e
                if sel.any():
                    out = out + x * sel.unsqueeze(-1).to(x.dtype) * probs[..., e : e + 1]
            return out
        """,
        "sel.any()",
        """
        def combine(x, top, probs):
            out = torch.zeros_like(x)
            for e in range(4):
                sel = top == e
                out = gbfix_where(
                    sel.any(),
                    out + x * sel.unsqueeze(-1).to(x.dtype) * probs[..., e : e + 1],
                    out,
                )
            return out
        """,
    ),
    "a projection under self.training (method)": (
        """
        class M:
            def forward(self, x, w):
                if self.training and x.abs().amax() > 1:
                    x = x @ w
                return x
        """,
        "self.training and",
        """
        class M:
            def forward(self, x, w):
                if self.training:
                    x = gbfix_where(x.abs().amax() > 1, x @ w, x)
                return x
        """,
    ),
    "if/else of two different expressions": (
        """
        def f(h, gate):
            if gate.mean() > 0.5:
                y = h.softmax(-1)
            else:
                y = h.sum(-1, keepdim=True)
            return y
        """,
        "gate.mean() > 0.5",
        """
        def f(h, gate):
            y = gbfix_where(gate.mean() > 0.5, h.softmax(-1), h.sum(-1, keepdim=True))
            return y
        """,
    ),
}


@pytest.mark.parametrize("case", UNPROVEN_CASES)
def test_where_unproven_shapes_are_checked(case):
    source, fragment, expected = UNPROVEN_CASES[case]
    assert fix(source, BranchToWhere, fragment) == with_where(expected)
    assert fix(source, BranchToWhereUnchecked, fragment) is None  # the safe recipe's edit


UNPROVEN_DECLINES = {
    "already the safe recipe's": "if x.sum() > 0:\n        x = x.clamp(-1, 1)",
    "log on the unselected arm": "if x.min() > 0:\n        x = x @ w.log()",
    "exp on the unselected arm": "if x.max() < 10:\n        x = x @ w.exp()",
    "division by data": "if x.max() > 0:\n        x = (x @ w) / x.max()",
    "a submodule call": "if x.max() > 0:\n        x = self.proj(x)",
    # torch.where would turn a Python number into a tensor
    "no sign the target is a tensor": "if x.max() > 0:\n        n = n + 1",
}


@pytest.mark.parametrize("case", UNPROVEN_DECLINES)
def test_where_unproven_declines(case):
    source = f"def f(self, x, w, n):\n    {UNPROVEN_DECLINES[case]}\n    return x\n"
    assert fix(source, BranchToWhereUnchecked, "if ", whole_if=True) is None
    if case != "already the safe recipe's":
        assert fix(source, BranchToWhere, "if ", whole_if=True) is None


def test_where_inplace_is_unsafe():
    assert BranchToWhereUnchecked.safety == "unsafe"


SHORTCUT_EXPRESSIONS = {
    "fairseq: the mask passed on only when it has padding": (
        """
        def encode(self, x, padding_mask):
            has_pads = padding_mask.any()
            return self.layer(x, padding_mask=padding_mask if has_pads else None)
        """,
        "padding_mask if has_pads",
        """
        def encode(self, x, padding_mask):
            has_pads = padding_mask.any()
            return self.layer(x, padding_mask=padding_mask)
        """,
    ),
    "None for an all-ones mask (method)": (
        """
        class M:
            def mask_of(self, mask):
                return None if (mask == 1).all() else mask[:, None, None, :]
        """,
        "None if (mask == 1)",
        """
        class M:
            def mask_of(self, mask):
                return mask[:, None, None, :]
        """,
    ),
    "a Python part keeps its choice": (
        """
        def f(mask, use_mask):
            return mask if use_mask and mask.any() else None
        """,
        "mask if use_mask",
        """
        def f(mask, use_mask):
            return mask if use_mask else None
        """,
    ),
}


@pytest.mark.parametrize("case", SHORTCUT_EXPRESSIONS)
def test_drop_shortcut_expression(case):
    source, fragment, expected = SHORTCUT_EXPRESSIONS[case]
    assert fix(source, BranchDropShortcut, fragment) == body(expected)


def test_drop_shortcut_expression_declines():
    both = "def f(a, b, m):\n    return a if m.any() else b\n"
    assert fix(both, BranchDropShortcut, "a if m.any()") is None  # no None side: not a shortcut
    impure = "def f(m):\n    return m.add_(1) if m.any() else None\n"
    assert fix(impure, BranchDropShortcut, "m.add_(1) if") is None


def test_general_path_in_an_elif():
    source = """
    def f(x, mask):
        pad = mask > 0
        if x.dim() == 3:
            x = x.mean(1)
        elif pad.any():
            x = x.masked_fill(pad, 0.0)
        return x
    """
    assert fix(source, BranchToGeneralPath, "pad.any()") == body(
        """
        def f(x, mask):
            pad = mask > 0
            if x.dim() == 3:
                x = x.mean(1)
            else:
                x = x.masked_fill(pad, 0.0)
            return x
        """
    )


def test_cond_on_a_flag_in_a_local():
    source = """
    def pool(hidden, mask):
        empty = (mask == 0).all()
        if empty:
            return hidden.mean(0)
        return (hidden * mask).sum(0)
    """
    assert fix(source, BranchToCond, "if empty:", whole_if=True) == body(
        """
        def pool(hidden, mask):
            empty = (mask == 0).all()
            return torch.cond(empty, lambda: hidden.mean(0), lambda: (hidden * mask).sum(0))
        """
    )


def test_general_path_takes_a_count_of_a_boolean_mask_as_any():
    source = """
    def f(scores, ids):
        pad = ids == 0
        if pad.sum() > 0:
            scores = scores.masked_fill(pad[:, None, :], float("-inf"))
        return scores
    """
    assert fix(source, BranchToGeneralPath, "pad.sum() > 0") == body(
        """
        def f(scores, ids):
            pad = ids == 0
            scores = scores.masked_fill(pad[:, None, :], float("-inf"))
            return scores
        """
    )
    assert fix(source.replace("> 0", "> 1"), BranchToGeneralPath, "pad.sum() > 1") is None  # more than one: not any()
    assert fix(source.replace("pad.sum()", "pad.sum(-1).max()"), BranchToGeneralPath, "pad.sum(-1)") is None


def test_general_path_for_an_inline_isnan_or_isinf_test():
    source = """
    def f(h):
        if torch.isinf(h).any() or torch.isnan(h).any():
            h = h.nan_to_num(posinf=1e4, neginf=-1e4)
        return h
    """
    assert fix(source, BranchToGeneralPath, "if torch.isinf", whole_if=True) == body(
        """
        def f(h):
            h = h.nan_to_num(posinf=1e4, neginf=-1e4)
            return h
        """
    )
    only_inf = source.replace(" or torch.isnan(h).any()", "")
    assert fix(only_inf, BranchToGeneralPath, "if torch.isinf", whole_if=True) is None  # NaNs would be replaced too


AUGMENTED_CASES = {
    "MoE accumulation with += (helper)": (
        """
        def combine(x, top, w):
            out = torch.zeros_like(x)
            for e in range(4):
                sel = top == e
                if sel.any():
                    out += x * sel[..., None] * w[e]
            return out
        """,
        "sel.any()",
        """
        def combine(x, top, w):
            out = torch.zeros_like(x)
            for e in range(4):
                sel = top == e
                out = gbfix_where(sel.any(), out + x * sel[..., None] * w[e], out)
            return out
        """,
    ),
    "an auxiliary loss added under self.training (method)": (
        """
        class Router:
            def forward(self, loss, aux):
                if self.training and aux.isfinite().all():
                    loss += 0.01 * aux.mean()
                return loss
        """,
        "self.training and",
        """
        class Router:
            def forward(self, loss, aux):
                if self.training:
                    loss = gbfix_where(aux.isfinite().all(), loss + 0.01 * aux.mean(), loss)
                return loss
        """,
    ),
    "two updates, one augmented": (
        """
        def f(h, g):
            h = h.float()
            if g.abs().max() > 1:
                h *= 0.5
                g = g.clamp(-1, 1) @ h
            return h, g
        """,
        "g.abs().max() > 1",
        """
        def f(h, g):
            h = h.float()
            pred = g.abs().max() > 1
            h = torch.where(pred, h * 0.5, h)
            g = gbfix_where(pred, g.clamp(-1, 1) @ h, g)
            return h, g
        """,
    ),
}


@pytest.mark.parametrize("case", AUGMENTED_CASES)
def test_where_inplace_takes_augmented_assignments(case):
    source, fragment, expected = AUGMENTED_CASES[case]
    assert fix(source, BranchToWhere, fragment) is None  # in place: never the safe recipe
    assert fix(source, BranchToWhereUnchecked, fragment) == with_where(expected)


@pytest.mark.parametrize(
    "stmt", ["x //= 2", "self.x += 1", "x[0] += 1", "y += x.sum()"],  # no such operator, state, an element, y unbound
)
def test_where_inplace_declines_other_augmented_assignments(stmt):
    source = f"def f(self, x):\n    x = x.float()\n    if x.max() > 0:\n        {stmt}\n    return x\n"
    assert fix(source, BranchToWhereUnchecked, "x.max() > 0") is None


GENERAL_EXPRESSION_CASES = {
    "kept when no padding (flag, helper)": (
        """
        def f(x, ids):
            pad = ids.eq(0)
            has_pad = pad.any()
            return x if not has_pad else x.masked_fill(pad[..., None], 0.0)
        """,
        "x if not has_pad",
        """
        def f(x, ids):
            pad = ids.eq(0)
            has_pad = pad.any()
            return x.masked_fill(pad[..., None], 0.0)
        """,
    ),
    "kept when all finite (method)": (
        """
        class M:
            def forward(self, h):
                return h if torch.isfinite(h).all() else torch.nan_to_num(h)
        """,
        "h if torch",
        """
        class M:
            def forward(self, h):
                return torch.nan_to_num(h)
        """,
    ),
    "or: the Python part still keeps x": (
        """
        class M:
            def forward(self, scores, ids):
                pad = ids == 0
                return scores if not self.training or not pad.any() else scores.masked_fill(pad, -1e4)
        """,
        "scores if not",
        """
        class M:
            def forward(self, scores, ids):
                pad = ids == 0
                return scores if not self.training else scores.masked_fill(pad, -1e4)
        """,
    ),
}


@pytest.mark.parametrize("case", GENERAL_EXPRESSION_CASES)
def test_general_path_conditional_expression_either_way(case):
    source, fragment, expected = GENERAL_EXPRESSION_CASES[case]
    assert fix(source, BranchToGeneralPath, fragment) == body(expected)


def test_general_path_or_with_a_python_part_drops_the_whole_if():
    # `P or c`: P takes the update, and so does c; without either the update is the identity
    source = """
    class M:
        def forward(self, x, ids):
            pad = ids == 0
            if not self.training or pad.any():
                x = x.masked_fill(pad[..., None], 0.0)
            return x
    """
    assert fix(source, BranchToGeneralPath, "if not self.training", whole_if=True) == body(
        """
        class M:
            def forward(self, x, ids):
                pad = ids == 0
                x = x.masked_fill(pad[..., None], 0.0)
                return x
        """
    )
    swapped = source.replace("x = x.masked_fill", "x = y.masked_fill").replace("(self, x, ids)", "(self, x, y, ids)")
    assert fix(swapped, BranchToGeneralPath, "if not self.training", whole_if=True) is None  # not x's update


def test_where_says_when_a_call_in_the_arm_blocks_it():
    source = body("def f(x):\n    if x.sum() > 0:\n        print('big')\n        x = x * 2\n    return x\n")
    line, col, end = site(source, "x.sum() > 0")
    parsed = ParsedFile(SourceFile(Path("/virtual/example.py"), source.encode(), source, "utf-8"))
    brk = Break(causes=(Cause("GB0170", "GB0170", ""),), stack=(Frame("/virtual/example.py", line, col, end, "f"),))
    at = Site(Path("/virtual/example.py"), line, col, end, brk)
    ctx = SiteContext(at, parsed.node_at(line, col, end), parsed, ALL_CAPABILITIES)
    for recipe in (BranchToWhere(), BranchToWhereUnchecked()):
        assert recipe.propose(ctx) is None
        assert recipe.declined == "the `if` body calls `print('big')`, which may have effects: torch.where runs both arms"
    # the exception a `raise` builds is branch-to-check's business, not an effect to report
    raising = source.replace("print('big')\n        x = x * 2", "raise ValueError('big')")
    parsed = ParsedFile(SourceFile(at.path, raising.encode(), raising, "utf-8"))
    recipe = BranchToWhere()
    assert recipe.propose(SiteContext(at, parsed.node_at(line, col, end), parsed, ALL_CAPABILITIES)) is None
    assert recipe.declined is None


def test_where_says_why_it_declines():
    source = body(
        """
        def f(x, n):
            if x.sum() > 0:
                x = x.t().log()
            return x
        """
    )
    ctx = site_context(source, *site(source, "x.sum() > 0"), "GB0170")
    recipe = BranchToWhere()
    assert recipe.propose(ctx) is None
    assert recipe.declined == (
        "`x.t().log()` and `x` are not shown to be one tensor's shape and dtype, and an arm has a singular derivative:"
        " its zero gradient on the unselected side would turn into NaN"
    )


# ---------------------------------------------------------------- gbfix_where at run time


def _outcome(torch, value):
    """A comparable outcome: an error type, or a tensor's shape, dtype and values, or a number."""
    if isinstance(value, type):
        return value
    if isinstance(value, torch.Tensor):
        return tuple(value.shape), value.dtype, value.requires_grad, value.tolist()
    return type(value), repr(value)


def test_gbfix_where_gives_what_the_branch_gives_compiled_and_not():
    """Conditions true and false, of one element or several; arms of one shape and dtype,
    of shapes that broadcast, of two dtypes, Python numbers, with and without gradient:
    the value (shape, dtype, gradient need) or the error of `a if cond else b`, eagerly and
    compiled; no break exactly where torch.where stands for the branch."""
    torch = pytest.importorskip("torch")
    from torch._dynamo.utils import counters

    from tests.helpers import generated_function, value_or_error

    pick = generated_function(WHERE)
    x = torch.arange(4.0)
    conds = [torch.tensor(True), torch.tensor(0.0), torch.tensor([[1.0]]), torch.tensor([True, False]), True]
    arms = [
        (x * 2, x),  # one shape and dtype: a select
        (x * torch.ones(3, 1), x),  # a broadcast: the branch as written
        (x.double(), x),  # two dtypes
        (torch.zeros(4, dtype=torch.int64), torch.ones(4, dtype=torch.int64)),
        (x.requires_grad_(False) * torch.ones(4, requires_grad=True), x),  # one needs a gradient
        (1.0, x),  # a Python number
    ]
    compiled = torch.compile(lambda c, a, b: pick(c, a, b), backend="eager")
    for cond, (a, b) in itertools.product(conds, arms):
        want = _outcome(torch, value_or_error(lambda: a if cond else b))  # noqa: B023 - called at once
        assert _outcome(torch, value_or_error(lambda: pick(cond, a, b))) == want  # noqa: B023
        torch._dynamo.reset()
        counters.clear()
        assert _outcome(torch, value_or_error(lambda: compiled(cond, a, b))) == want, (cond, a, b)  # noqa: B023
        selects = (
            isinstance(cond, torch.Tensor) and cond.numel() == 1 and isinstance(a, torch.Tensor)
            and a.shape == b.shape and a.dtype == b.dtype and a.requires_grad == b.requires_grad
        )
        assert bool(counters["graph_break"]) == (isinstance(cond, torch.Tensor) and not selects), (cond, a, b)


def test_a_selected_divisor_keeps_values_and_gradients_where_the_divisor_is_zero():
    """`if n > 0: loss = loss / n` against its rewrite, with n zero and not, eagerly and
    compiled with fullgraph=True: the same loss, and the same finite gradient (torch.where
    over the quotient would give NaN: its unselected arm divides by zero)."""
    torch = pytest.importorskip("torch")
    from tests.helpers import generated_function

    pick = generated_function(WHERE)

    def original(w, x, mask):
        loss = (x @ w * mask).sum()
        n = mask.sum()
        if n > 0:
            loss = loss / n
        return loss

    def rewritten(w, x, mask):
        loss = (x @ w * mask).sum()
        n = mask.sum()
        pred = n > 0
        loss = pick(pred, loss / torch.where(pred, n, 1), loss)
        return loss

    def naive(w, x, mask):
        loss = (x @ w * mask).sum()
        n = mask.sum()
        return torch.where(n > 0, loss / n, loss)

    x = torch.randn(5, 3)
    for mask in (torch.tensor([1.0, 0, 1, 1, 0]), torch.zeros(5)):
        results = []
        for fn in (original, rewritten, torch.compile(rewritten, backend="eager", fullgraph=True), naive):
            w = torch.ones(3, requires_grad=True)
            loss = fn(w, x, mask)
            loss.backward()
            results.append((loss.item(), w.grad.tolist()))
        assert results[0] == results[1] == results[2], mask
        if not mask.any():
            assert any(g != g for g in results[3][1])  # what the select of the quotient would have given: NaN


def test_two_comparisons_of_a_name_bound_to_a_tensor_are_tensor_tests():
    """`if r == 0 or r == 1:` with `r = x.mean()`: no operand has a call, and Dynamo's
    column does not say which one broke; the binding shows r is a tensor. With r a
    parameter nothing shows, the test is not taken."""
    source = "def f(x):\n    r = x.mean()\n    if r == 0 or r == 1:\n        x = x * 2\n    return x\n"
    assert fix(source, BranchToWhere, "r == 0 or r == 1") == body(
        "def f(x):\n    r = x.mean()\n    x = torch.where(torch.logical_or(r == 0, r == 1), x * 2, x)\n    return x\n"
    )
    unknown = "def f(x, r):\n    x.sum()\n    if r == 0 or r == 1:\n        x = x * 2\n    return x\n"
    assert fix(unknown, BranchToWhere, "r == 0 or r == 1") is None
