"""loop-skip-to-where and early-exit-to-where, applied statically at hand-made sites
placed where Dynamo 2.13 puts them: on the tensor operand of the `if` test."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gbfix import rules
from gbfix.recipes.loop_branch import RECIPES, EarlyExitToWhere, LoopSkipToWhere
from tests.helpers import rewrite_at

RULE = Path(__file__).resolve().parents[2] / "rules" / "GB0170.md"


def body(text: str) -> str:
    """A test source as a module that imports torch (so the rewrite adds no import)."""
    text = textwrap.dedent(text).lstrip("\n")
    return text if "import torch" in text else "import torch\n\n" + text


def fix(source: str, recipe, fragment: str) -> str | None:
    source = body(source)
    for number, line in enumerate(source.splitlines(), 1):
        col = line.find(fragment)
        if col >= 0:
            return rewrite_at(source, recipe, number, col, col + len(fragment), "GB0170")
    raise AssertionError(f"{fragment!r} not in source")


def example(title: str) -> tuple[str, str]:
    found = next(e for e in rules.parse(RULE) if e.title.startswith(title))
    return found.before, found.after


def test_recipe_attributes():
    for recipe in RECIPES:
        assert recipe.codes == ("GB0170",) and recipe.rule == "GB0170" and recipe.safety == "unsafe"


# ---------------------------------------------------------------- loop-skip-to-where


def test_rule_example_layerdrop():
    before, after = example("LayerDrop")
    assert fix(before, LoopSkipToWhere, "torch.rand(()) < self.layerdrop") == after


SKIP_CASES = {
    "no python prefix: no as_tensor": (
        """
        def f(x: torch.Tensor, layers, p):
            for layer in layers:
                if torch.rand(()) < p:
                    continue
                x = layer(x)
            return x
        """,
        "torch.rand(()) < p",
        """
        def f(x: torch.Tensor, layers, p):
            for layer in layers:
                skip = torch.rand(()) < p
                x = torch.where(skip, x, layer(x))
            return x
        """,
    ),
    "temporaries need no where; a name assigned twice is saved": (
        """
        class M:
            def forward(self, x):
                x = x.float()
                for block in self.blocks:
                    h = self.norm(x)
                    if self.training and torch.rand(()) < self.p:  # layerdrop
                        continue
                    residual = x
                    x = block(h)
                    x = x + residual
                return x
        """,
        "torch.rand(()) < self.p",
        """
        class M:
            def forward(self, x):
                x = x.float()
                for block in self.blocks:
                    h = self.norm(x)
                    # layerdrop
                    skip = torch.as_tensor(self.training and torch.rand(()) < self.p)
                    x_before = x
                    residual = x
                    x = block(h)
                    x = x + residual
                    x = torch.where(skip, x_before, x)
                return x
        """,
    ),
    "tuple target: the live part is saved, the attention map is a temporary": (
        """
        def f(hidden: torch.Tensor, layers, mask, training: bool, p: float):
            for layer in layers:
                if training and torch.rand(()) < p:
                    continue
                hidden, attn = layer(hidden, mask)
            return hidden
        """,
        "torch.rand(()) < p",
        """
        def f(hidden: torch.Tensor, layers, mask, training: bool, p: float):
            for layer in layers:
                skip = torch.as_tensor(training and torch.rand(()) < p)
                hidden_before = hidden
                hidden, attn = layer(hidden, mask)
                hidden = torch.where(skip, hidden_before, hidden)
            return hidden
        """,
    ),
    "two live names, one read after the other's assignment": (
        """
        def f(x: torch.Tensor, y: torch.Tensor, layers, p):
            for layer in layers:
                if torch.rand(()) < p:
                    continue
                x = layer(x)
                y = y + x
            return x, y
        """,
        "torch.rand(()) < p",
        """
        def f(x: torch.Tensor, y: torch.Tensor, layers, p):
            for layer in layers:
                skip = torch.rand(()) < p
                x_before = x
                x = layer(x)
                y = torch.where(skip, y, y + x)
                x = torch.where(skip, x_before, x)
            return x, y
        """,
    ),
    "fresh names avoid the scope's names; long lines are split": (
        """
        def f(hidden_states: torch.Tensor, layers, skip, drop_probability_threshold):
            for layer in layers:
                if torch.rand(()) < drop_probability_threshold:
                    continue
                hidden_states = layer(hidden_states, attention_mask=None, output_attentions=False)
            return hidden_states, skip
        """,
        "torch.rand(()) < drop_probability_threshold",
        """
        def f(hidden_states: torch.Tensor, layers, skip, drop_probability_threshold):
            for layer in layers:
                skip_2 = torch.rand(()) < drop_probability_threshold
                hidden_states = torch.where(
                    skip_2,
                    hidden_states,
                    layer(hidden_states, attention_mask=None, output_attentions=False),
                )
            return hidden_states, skip
        """,
    ),
    "tensor shown by a method call, not an annotation": (
        """
        def f(x, layers, p):
            for layer in layers:
                if not layer.frozen and torch.rand(()) < p:
                    continue
                x = layer(x)
            return x.sum()
        """,
        "torch.rand(()) < p",
        """
        def f(x, layers, p):
            for layer in layers:
                skip = torch.as_tensor(not layer.frozen and torch.rand(()) < p)
                x = torch.where(skip, x, layer(x))
            return x.sum()
        """,
    ),
}


@pytest.mark.parametrize("case", SKIP_CASES)
def test_skip(case):
    source, fragment, expected = SKIP_CASES[case]
    assert fix(source, LoopSkipToWhere, fragment) == body(expected)


def _skip_loop(rest: str, test: str = "self.training and torch.rand(()) < self.p", head: str = "") -> str:
    lines = textwrap.indent(textwrap.dedent(rest).strip("\n"), " " * 12)
    return f"""
class M:
    def forward(self, x: torch.Tensor, n: int):
        {head or 'pass'}
        for layer in self.layers:
            if {test}:
                continue
{lines}
        return x
"""


SKIP_DECLINES = {
    "break, not continue": _skip_loop("x = layer(x)").replace("continue", "break"),
    "an else": _skip_loop("x = layer(x)").replace("continue", "continue\n            else:\n                pass"),
    "a side effect after": _skip_loop("x = layer(x)\nself.outputs.append(x)"),
    "an attribute target": _skip_loop("self.last = layer(x)"),
    "an augmented assignment mutates x in place": _skip_loop("x += layer(x)"),
    "an in-place call": _skip_loop("x = layer(x).add_(1)"),
    "a random op in the skipped body": _skip_loop("x = layer(torch.dropout(x, 0.1, True))"),
    "a print": _skip_loop("x = layer(x)\nprint(x)"),
    "control flow after": _skip_loop("x = layer(x)\nif n:\n    x = x * 2"),
    "a name with no value before the loop": _skip_loop("out = layer(x)\nx = out").replace("return x", "return out"),
    "a counter is not a tensor": _skip_loop("x = layer(x)\nn = n + 1").replace("return x", "return x, n"),
    "only temporaries": _skip_loop("h = layer(x)"),
    "a starred target": _skip_loop("x, *rest = layer(x)"),
    "`not` of a tensor": _skip_loop("x = layer(x)", test="not torch.rand(()) < self.p"),
    "two tensor operands": _skip_loop("x = layer(x)", test="torch.rand(()) < self.p and x.sum() > 0"),
    "a prefix that may be 0 or None": _skip_loop("x = layer(x)", test="self.p and torch.rand(()) < self.p"),
    "x mutated in place elsewhere": _skip_loop("x = layer(x)", head="x.mul_(2)"),
}


def test_skip_declines_control():
    """The template the declines vary is rewritten: each decline is its variation's doing."""
    assert fix(_skip_loop("x = layer(x)"), LoopSkipToWhere, "torch.rand(()) < self.p") is not None


@pytest.mark.parametrize("case", SKIP_DECLINES)
def test_skip_declines(case):
    assert fix(SKIP_DECLINES[case], LoopSkipToWhere, "torch.rand(()) < self.p") is None


def test_skip_declines_nested_under_an_if():
    # OPT's shape: the `continue` sits in `if self.training:`, not in the loop body.
    source = """
    class M:
        def forward(self, x: torch.Tensor):
            for layer in self.layers:
                if self.training:
                    if torch.rand([]) < self.layerdrop:
                        continue
                x = layer(x)
            return x
    """
    assert fix(source, LoopSkipToWhere, "torch.rand([]) < self.layerdrop") is None


def test_skip_declines_while_loop():
    source = """
    def f(x: torch.Tensor, p):
        while x.numel() > 1:
            if torch.rand(()) < p:
                continue
            x = x[1:]
        return x
    """
    assert fix(source, LoopSkipToWhere, "torch.rand(()) < p") is None


# ---------------------------------------------------------------- early-exit-to-where


def test_rule_example_early_exit():
    before, after = example("early exit")
    assert fix(before, EarlyExitToWhere, "probs.amax(-1).min() > self.threshold") == after


EXIT_CASES = {
    "another final return: where against it": (
        """
        def f(hidden, layers, threshold):
            for layer in range(4):
                hidden = hidden * 0.5
                if hidden.abs().max() < threshold:
                    return hidden[:, 0]
            return hidden.mean(1)
        """,
        "hidden.abs().max() < threshold",
        """
        def f(hidden, layers, threshold):
            exited = None
            for layer in range(4):
                hidden = hidden * 0.5
                stop = hidden.abs().max() < threshold
                if exited is None:
                    result, exited = hidden[:, 0], stop
                else:
                    result, exited = torch.where(exited, result, hidden[:, 0]), exited | stop
            return hidden.mean(1) if exited is None else torch.where(exited, result, hidden.mean(1))
        """,
    ),
    "the same name bound before the loop: a loop that never runs returns it": (
        """
        class M:
            def forward(self, x):
                logits = self.head(x)
                # refine
                for i, layer in enumerate(self.layers):
                    x = layer(x)
                    logits = self.heads[i](x)
                    if not self.training and logits.softmax(-1).max() > 0.9:  # confident
                        return logits
                return logits
        """,
        "logits.softmax(-1).max() > 0.9",
        """
        class M:
            def forward(self, x):
                logits = self.head(x)
                # refine
                exited = None
                for i, layer in enumerate(self.layers):
                    x = layer(x)
                    logits = self.heads[i](x)
                    # confident
                    stop = torch.as_tensor(not self.training and logits.softmax(-1).max() > 0.9)
                    if exited is None:
                        result, exited = logits, stop
                    else:
                        result, exited = torch.where(exited, result, logits), exited | stop
                return logits if exited is None else torch.where(exited, result, logits)
        """,
    ),
    "fresh names": (
        """
        class M:
            def forward(self, x, result):
                for layer in self.layers.values():
                    x = layer(x)
                    if x.norm() > result:
                        return x
                return x
        """,
        "x.norm() > result",
        """
        class M:
            def forward(self, x, result):
                exited = None
                for layer in self.layers.values():
                    x = layer(x)
                    stop = x.norm() > result
                    if exited is None:
                        result_2, exited = x, stop
                    else:
                        result_2, exited = torch.where(exited, result_2, x), exited | stop
                return x if exited is None else torch.where(exited, result_2, x)
        """,
    ),
}


@pytest.mark.parametrize("case", EXIT_CASES)
def test_exit(case):
    source, fragment, expected = EXIT_CASES[case]
    assert fix(source, EarlyExitToWhere, fragment) == body(expected)


def _exit_loop(
    loop_body: str = "x = layer(x)",
    final: str = "return x",
    iterable: str = "self.layers",
    test: str = "x.norm() > self.t",
    value: str = "x",
) -> str:
    lines = textwrap.indent(textwrap.dedent(loop_body).strip("\n"), " " * 12)
    return f"""
class M:
    def forward(self, x):
        for layer in {iterable}:
{lines}
            if {test}:
                return {value}
        {final}
"""


EXIT_DECLINES = {
    "an iterator that may not end": _exit_loop(iterable="itertools.count()"),
    "an iterable from outside": _exit_loop(iterable="layers"),
    "a side effect in the body": _exit_loop("x = layer(x)\nself.trace.append(x)"),
    "a print in the body": _exit_loop("x = layer(x)\nprint(x.shape)"),
    "control flow in the body": _exit_loop("x = layer(x)\nif x.dim() > 2:\n    x = x.flatten(1)"),
    "a statement after the if": _exit_loop().replace("return x\n", "return x\n            x = x * 2\n", 1),
    "a for-else": _exit_loop(final="else:\n            x = x * 2\n        return x"),
    "no return after the loop": _exit_loop(final="x = x * 2"),
    "a tuple returned": _exit_loop(value="x, x", final="return x, x"),
    "None after the loop": _exit_loop(final="return None"),
    "a module call evaluated every iteration": _exit_loop(value="self.head(x)"),
    "random draws in the test": _exit_loop(test="torch.rand(()) < self.t"),
    "a prefix that may be None": _exit_loop(test="self.t and x.norm() > self.t"),
}


def test_exit_declines_control():
    assert fix(_exit_loop(), EarlyExitToWhere, "x.norm() > self.t") is not None


@pytest.mark.parametrize("case", EXIT_DECLINES)
def test_exit_declines(case):
    source = EXIT_DECLINES[case]
    fragment = "torch.rand(()) < self.t" if "torch.rand" in source else "x.norm() > self.t"
    assert fix(source, EarlyExitToWhere, fragment) is None


def test_exit_declines_generator():
    source = _exit_loop("x = layer(x)\nlast = yield x")
    assert fix(source, EarlyExitToWhere, "x.norm() > self.t") is None


def test_recipes_do_not_cross():
    """Each recipe leaves the other's shape alone, and the if-only recipes' examples."""
    layerdrop, _ = example("LayerDrop")
    early, _ = example("early exit")
    assert fix(layerdrop, EarlyExitToWhere, "torch.rand(()) < self.layerdrop") is None
    assert fix(early, LoopSkipToWhere, "probs.amax(-1).min() > self.threshold") is None
    for e in rules.parse(RULE):
        if not e.title.startswith(("LayerDrop", "early exit")):
            for recipe in RECIPES:
                for n, line in enumerate(e.before.splitlines(), 1):
                    if line.strip().startswith("if "):
                        col = line.index("if ") + 3
                        assert rewrite_at(e.before, recipe, n, col, len(line) - 1, "GB0170") is None
