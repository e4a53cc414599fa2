"""guarded-index: `A[i] if i >= 0 else B` with a tensor index, through a helper that
picks with torch.where where Dynamo can tell that is the same tensor."""

from __future__ import annotations

import itertools
import textwrap

import pytest

from gbfix.recipes import guarded_index
from gbfix.recipes.guarded_index import GuardedIndex
from tests.helpers import changed, generated_function, rewrite_line, value_or_error

METHOD = """\
import torch


class Scheduler:
    def step(self, t, k):
        prev_t = t - k
        {line}
        return 1 - alpha_prev
"""


def _call(line: str) -> str | None:
    """The rewritten statement, one line, or None when the recipe declines."""
    out = rewrite_line(METHOD.format(line=line), GuardedIndex, "alpha_prev =", "GB0170")
    if out is None:
        return None
    body = out[out.index("    def step") :]
    return " ".join(body.split("\n", 2)[2].split("return 1 -")[0].split()).replace("( ", "(").replace(", )", ")")


@pytest.mark.parametrize(
    "line, expected",
    [
        (
            "alpha_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one",
            "alpha_prev = gbfix_index_or(prev_t >= 0, self.alphas_cumprod, prev_t, self.one)",
        ),
        (  # the arms swapped: the test negated as a tensor, not as a comparison (NaN)
            "alpha_prev = self.one if prev_t < 0 else self.alphas_cumprod[prev_t]",
            "alpha_prev = gbfix_index_or(torch.logical_not(prev_t < 0), self.alphas_cumprod, prev_t, self.one)",
        ),
        (  # the index inline, the bound written > -1
            "alpha_prev = self.alphas_cumprod[t - k] if t - k > -1 else self.final",
            "alpha_prev = gbfix_index_or(t - k > -1, self.alphas_cumprod, t - k, self.final)",
        ),
        (  # an upper bound
            "alpha_prev = self.ac[prev_t] if prev_t < len(self.ac) else self.one",
            "alpha_prev = gbfix_index_or(prev_t < len(self.ac), self.ac, prev_t, self.one)",
        ),
        (  # both bounds, chained or with `and`: `&` of the comparisons
            "alpha_prev = self.ac[prev_t] if 0 <= prev_t < self.ac.shape[0] else self.one",
            "alpha_prev = gbfix_index_or((0 <= prev_t) & (prev_t < self.ac.shape[0]), self.ac, prev_t, self.one)",
        ),
        (
            "alpha_prev = self.ac[prev_t] if prev_t >= 0 and prev_t < self.ac.size(0) else self.one",
            "alpha_prev = gbfix_index_or((prev_t >= 0) & (prev_t < self.ac.size(0)), self.ac, prev_t, self.one)",
        ),
    ],
)
def test_rewrites_a_conditional_expression(line, expected):
    assert _call(line) == expected


def test_rewrites_the_statement_form_in_a_module_function_with_its_comments():
    source = """\
    import torch


    def snr(alphas_cumprod, t):
        # past the end: a clean sample
        if t < len(alphas_cumprod):
            alpha = alphas_cumprod[t]
        else:
            alpha = alphas_cumprod.new_ones(())
        return alpha / (1 - alpha)
    """
    out = rewrite_line(source, GuardedIndex, "if t < len", "GB0170")
    assert changed(source, out)[-6:] == [
        "alpha = gbfix_index_or(",
        "t < len(alphas_cumprod),",
        "alphas_cumprod,",
        "t,",
        "alphas_cumprod.new_ones(()),",
        ")",
    ]
    assert "    # past the end: a clean sample\n    alpha = gbfix_index_or(" in out
    assert out.count("def gbfix_index_or(") == 1


NEXT = """\
import torch


def next_timestep(timesteps, index):
    if index == timesteps.shape[0] - 1:
        prev_t = torch.tensor(-1)
    else:
        prev_t = timesteps[index + 1]
    {use}
"""


def test_rewrites_a_test_of_what_the_index_is_made_of_with_the_arms_swapped():
    out = rewrite_line(NEXT.format(use="return prev_t >= 0"), GuardedIndex, "if index ==", "GB0170")
    assert changed(NEXT.format(use="return prev_t >= 0"), out)[-6:] == [
        "prev_t = gbfix_index_or(",
        "torch.logical_not(index == timesteps.shape[0] - 1),",
        "timesteps,",
        "index + 1,",
        "torch.tensor(-1),",
        ")",
    ]
    # returned as it is: the caller may write into the table's element
    assert rewrite_line(NEXT.format(use="return prev_t"), GuardedIndex, "if index ==", "GB0170") is None


DDPM = """\
import torch


class Scheduler:
    def previous_timestep(self, timestep):
        if self.num_inference_steps:
            index = (self.timesteps == timestep).nonzero(as_tuple=True)[0][0]
            if index == self.timesteps.shape[0] - 1:
                prev_t = torch.tensor(-1)
            else:
                prev_t = self.timesteps[index + 1]
        else:
            prev_t = timestep - 1
        return prev_t

    def step(self, t, x):
        prev_t = self.previous_timestep(t)
        {use}
"""


@pytest.mark.parametrize(
    "use, taken",
    [
        ("return x * (self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one)", True),  # read as an index
        ("return x * gbfix_index_or(prev_t >= 0, self.alphas_cumprod, prev_t, self.one)", True),  # by gbfix's helper
        ("prev_t.add_(1)\n        return x", False),  # a caller writing into it: a view of the table in the original
        ("return prev_t", False),  # handed on again: a caller outside the file is out of sight
        ("fn = self.previous_timestep\n        return x * fn(t)", False),  # referenced, not called
    ],
)
def test_a_returned_pick_is_taken_when_every_caller_in_the_file_only_reads_it(use, taken):
    source = DDPM.format(use=use)
    out = rewrite_line(source, GuardedIndex, "if index ==", "GB0170")
    assert (out is not None) is taken
    if taken:
        assert "prev_t = gbfix_index_or(" in out and "else:\n            prev_t = timestep - 1" in out


@pytest.mark.parametrize(
    "line",
    [
        "alpha_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else 1.0",  # a Python number stays one
        "alpha_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else None",
        "alpha_prev = self.alphas_cumprod[prev_t] if t.sum() > 0 else self.one",  # not a test of the index
        "alpha_prev = self.alphas_cumprod[prev_t, 0] if prev_t >= 0 else self.one",  # not a 1-d lookup
        "alpha_prev = self.alphas_cumprod[prev_t:] if prev_t >= 0 else self.one",
        "alpha_prev = self.table()[prev_t] if prev_t >= 0 else self.one",  # a call the rewrite would always make
        "alpha_prev = self.ac[prev_t] if 0 <= prev_t < self.limit() else self.one",  # a bound read where it was not
        "alpha_prev = self.ac[prev_t] if prev_t >= 0 else self.one\n        alpha_prev.mul_(2)",  # a copy would show
        "alpha_prev = self.ac[prev_t] if prev_t >= 0 else self.one\n        self.one.add_(1)",
        "alpha_prev = self.ac[prev_t] if prev_t >= 0 else self.one\n        self.keep = alpha_prev",
    ],
)
def test_declines(line):
    assert _call(line) is None


def test_declines_a_taken_helper_name_and_an_elif():
    source = METHOD.format(line="alpha_prev = self.ac[prev_t] if prev_t >= 0 else self.one")
    assert rewrite_line(source + "\ngbfix_index_or = None\n", GuardedIndex, "alpha_prev =", "GB0170") is None
    source = textwrap.dedent("""\
    import torch


    def f(ac, t, one):
        if t.sum() > 9:
            a = one
        elif t >= 0:
            a = ac[t]
        else:
            a = one
        return a + 1
    """)
    assert rewrite_line(source, GuardedIndex, "elif t >= 0", "GB0170") is None


# ---- the helper against the expression it stands for ------------------------------


@pytest.fixture(scope="module")
def index_or():
    torch = pytest.importorskip("torch")
    return torch, generated_function(guarded_index.HELPER)


def test_the_helper_gives_what_the_expression_gives(index_or):
    """Every index in and out of range, tables and defaults of other dtypes, shapes
    and kinds: the same value, dtype and shape, or the same error."""
    torch, pick = index_or
    tables = [torch.linspace(0.1, 1.0, 5), torch.arange(5), torch.linspace(0.1, 1, 5).half(), torch.ones(3, 2), torch.ones(0)]
    defaults = [torch.tensor(1.0), torch.tensor(7), torch.tensor([1.0]), torch.tensor(1.0, dtype=torch.float64), 1.0]
    indices = [torch.tensor(i) for i in range(-7, 8)] + [torch.tensor([2]), torch.tensor([1, 2]), torch.tensor(2.0)]
    tests = (lambda i, a: i >= 0, lambda i, a: i < len(a), lambda i, a: (0 <= i) & (i < a.shape[0]))
    for table, default, i, test in itertools.product(tables, defaults, indices, tests):
        want = value_or_error(lambda: table[i] if test(i, table) else default)  # noqa: B023 - called at once
        got = value_or_error(lambda: pick(test(i, table), table, i, default))  # noqa: B023
        if isinstance(want, type):
            assert got is want, (table, default, i)
        else:
            assert type(got) is type(want), (table, default, i)
            got, want = torch.as_tensor(got), torch.as_tensor(want)
            assert torch.equal(got, want) and (got.dtype, got.shape) == (want.dtype, want.shape), (table, default, i)


def test_the_helper_compiles_without_a_break_and_keeps_gradients(index_or):
    torch, pick = index_or
    from torch._dynamo.utils import counters

    table, one = torch.linspace(0.1, 1.0, 5).requires_grad_(), torch.tensor(1.0)

    def step(t):
        prev = t - 2
        return pick(prev >= 0, table, prev, one) * 2

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(step, backend="eager")
    for t in range(4):
        got, want = compiled(torch.tensor(t)), table[t - 2] * 2 if t >= 2 else one * 2
        assert torch.equal(got, want)
        if t >= 2:
            (grad,) = torch.autograd.grad(got, table)
            assert torch.equal(grad, torch.nn.functional.one_hot(torch.tensor(t - 2), 5).float() * 2)
    assert not counters["graph_break"]


def test_an_index_past_the_end_raises_index_error_under_inductor_as_the_read_does(index_or):
    """A lower bound only (`i >= 0`) lets the read run past the end: inductor's own
    gather would raise RuntimeError there; the helper's read raises IndexError."""
    torch, pick = index_or
    table, one = torch.linspace(0.1, 1.0, 5), torch.tensor(1.0)

    def step(t):
        prev = t + 1
        return pick(prev >= 0, table, prev, one) * 2

    torch._dynamo.reset()
    compiled = torch.compile(step)
    assert torch.equal(compiled(torch.tensor(2)), table[3] * 2)
    with pytest.raises(IndexError):
        compiled(torch.tensor(4))
