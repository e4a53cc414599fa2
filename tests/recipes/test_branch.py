"""GB0170 recipes, applied statically at hand-made sites placed where Dynamo 2.13 puts them:
on the `if` test, or on the whole `if` (from `if` to the end of the next line) when
the body returns or raises."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from gbfix.recipes.branch import RECIPES, BranchToCheck, BranchToCond, BranchToWhere
from tests.helpers import ALL_CAPABILITIES, rewrite_at

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


def _sections() -> dict[str, list[str]]:
    text = RULE.read_text()
    out: dict[str, list[str]] = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        title = part.splitlines()[0]
        out[title] = re.findall(r"```python\n(.*?)```", part, flags=re.S)
    return out


def test_rule_file_shape():
    sections = _sections()
    assert sum(t.startswith("Example:") for t in sections) >= len(RECIPES) - 1  # branch-to-check shares one
    assert all(len(blocks) == 2 for t, blocks in sections.items() if t.startswith("Example:"))
    assert all(len(blocks) == 1 for t, blocks in sections.items() if t.startswith("Not fixed:"))
    for recipe in RECIPES:
        assert recipe.rule == "GB0170" and recipe.codes == ("GB0170",)
        assert f"`{recipe.name}` ({recipe.safety})" in RULE.read_text()


def test_rule_example_where_then_cond():
    before, after = next(b for t, b in _sections().items() if t.startswith("Example: clamp"))
    step = fix(before, BranchToWhere, "hidden.abs().max() > clip")
    assert step is not None
    assert fix(step, BranchToCond, "if (mask == 0).all():", whole_if=True) == after


def test_rule_example_check():
    before, after = next(b for t, b in _sections().items() if t.startswith("Example: NaN"))
    assert fix(before, BranchToCheck, "if torch.isnan(loss):", whole_if=True) == after


def test_rule_not_fixed():
    (source,) = next(b for t, b in _sections().items() if t.startswith("Not fixed:"))
    for recipe in RECIPES:
        assert fix(source, recipe, "x.sum() > 0") is None
        assert fix(source, recipe, "if x.sum() > 0:", whole_if=True) is None


# ---------------------------------------------------------------- branch-to-where

WHERE_CASES = {
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
            mask = torch.where(mask.sum() == 0, torch.ones_like(mask), mask)
            return mask
        """,
    ),
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
            def forward(self, x, t):
                if self.training and x.mean() > t:
                    x = x.clamp(min=-t, max=t)
                return x
        """,
        "x.mean() > t",
        """
        class M:
            def forward(self, x, t):
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
        def f(x, lo, hi):
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
        def f(x, lo, hi):
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
            g = torch.where(norm > max_norm, g * (max_norm / (norm + 1e-6)), g)
            return g
        """,
    ),
    "long call is laid out one argument a line": (
        """
        def f(hidden_states, attention_scores, threshold):
            if attention_scores.abs().amax() > threshold:
                hidden_states = hidden_states.clamp(-threshold, threshold) * 0.5
            return hidden_states
        """,
        "attention_scores.abs().amax() > threshold",
        """
        def f(hidden_states, attention_scores, threshold):
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
}


@pytest.mark.parametrize("case", WHERE_CASES)
def test_where(case):
    source, fragment, expected = WHERE_CASES[case]
    assert fix(source, BranchToWhere, fragment) == body(expected)


WHERE_DECLINES = {
    "print in the arm": ("if x.sum() > 0:\n        print(x)\n        x = x * 2", "x.sum() > 0"),
    "state update in the arm": ("if x.sum() > 0:\n        self.count += 1", "x.sum() > 0"),
    "attribute target": ("if x.sum() > 0:\n        self.x = x * 2", "x.sum() > 0"),
    "two statements": ("if x.sum() > 0:\n        x = x * 2\n        x = x + 1", "x.sum() > 0"),
    "in-place method in the arm": ("if x.sum() > 0:\n        x = x.mul_(2)", "x.sum() > 0"),
    "random arm": ("if x.sum() > 0:\n        x = x + torch.rand_like(x)", "x.sum() > 0"),
    "division by data": ("if n > 0:\n        x = x / n", "n > 0"),
    "log of data": ("if x.min() > 0:\n        x = x.log()", "x.min() > 0"),
    "other shape": ("if x.sum() > 0:\n        x = torch.zeros(3)", "x.sum() > 0"),
    "python number arm": ("if x.sum() > 0:\n        x = 0.0", "x.sum() > 0"),
    "dtype change": ("if x.sum() > 0:\n        x = x.float()", "x.sum() > 0"),
    "target not bound": ("if x.sum() > 0:\n        z = x * 2", "x.sum() > 0"),
    "target bound only conditionally": ("if n:\n        z = x\n    if x.sum() > 0:\n        z = x * 2", "x.sum() > 0"),
    "else assigns another name": ("if x.sum() > 0:\n        x = x * 2\n    else:\n        n = n * 2", "x.sum() > 0"),
    "prefix with else": ("if flag and x.sum() > 0:\n        x = x * 2\n    else:\n        x = -x", "x.sum() > 0"),
    "or with python part": ("if flag or x.sum() > 0:\n        x = x * 2", "x.sum() > 0"),
    "chained comparison": ("if 0 < x.sum() < 10:\n        x = x * 2", "0 < x.sum() < 10"),
    "no sign x is a tensor": ("if n.sum() > 0:\n        x = x * 2", "n.sum() > 0"),
    "later in-place update": ("if x.sum() > 0:\n        x = x * 2\n    x.add_(1)", "x.sum() > 0"),
    "later augmented assignment": ("if x.sum() > 0:\n        x = x.abs()\n    x += n", "x.sum() > 0"),
    "elif with a python test": ("if x.sum() > 0:\n        x = x * 2\n    elif flag:\n        x = -x", "x.sum() > 0"),
    "elif with an impure test": ("if x.sum() > 0:\n        x = x * 2\n    elif print(x):\n        x = -x", "x.sum() > 0"),
    "elif assigns another name": ("if x.sum() > 0:\n        x = x * 2\n    elif n.sum() > 0:\n        n = -x", "x.sum() > 0"),
    "call on self in the arm": ("if x.sum() > 0:\n        x = self.norm(x)", "x.sum() > 0"),
}


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


COND_DECLINES = {
    "returns None": "if x.sum() > 0:\n        return None\n    return x * 2",
    "returns a constant": "if x.sum() > 0:\n        return 0.0\n    return x * 2",
    "bare return": "if x.sum() > 0:\n        return\n    return x * 2",
    "two statements in the arm": "if x.sum() > 0:\n        y = x * 2\n        return y\n    return x",
    "followed by a statement": "if x.sum() > 0:\n        return x * 2\n    x = x + 1\n    return x",
    "nothing follows": "if x.sum() > 0:\n        return x * 2",
    "submodule call": "if x.sum() > 0:\n        return self.proj(x)\n    return x * 2",
    "print in an arm": "if x.sum() > 0:\n        return print(x)\n    return x * 2",
    "name bound after": "if x.sum() > 0:\n        return later * 2\n    return x * 2",
    "prefix with else": "if flag and x.sum() > 0:\n        return x * 2\n    else:\n        return x",
}


@pytest.mark.parametrize("case", COND_DECLINES)
def test_cond_declines(case):
    source = f"def f(self, x, flag):\n    {COND_DECLINES[case]}\n"
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
    "python or": "if flag or x.sum() > 0:\n        raise ValueError('x')",
}


@pytest.mark.parametrize("case", CHECK_DECLINES)
def test_check_declines(case):
    source = f"def f(x, flag, err):\n    {CHECK_DECLINES[case]}\n    return x\n"
    assert fix(source, BranchToCheck, "x.sum() > 0") is None


def test_check_is_unsafe():
    assert BranchToCheck.safety == "unsafe"
    assert BranchToWhere.safety == BranchToCond.safety == "safe"


def test_whole_if_span_needs_each_or_operand_to_look_like_a_tensor():
    python_or = "def f(x, flag):\n    if flag or x.sum() > 0:\n        raise ValueError('x')\n    return x\n"
    assert fix(python_or, BranchToCheck, "if flag", whole_if=True) is None
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
