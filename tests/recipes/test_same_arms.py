"""branch-same-arms: `a if t else b` on a tensor test whose arms give the same Python
number, through a helper that does not ask the test then."""

from __future__ import annotations

import itertools
import math
import textwrap

import pytest

from gbfix.recipes import same_arms
from gbfix.recipes.same_arms import BranchSameArms
from tests.helpers import at, changed, generated_function, rewrite_line, value_or_error

EULER = """\
import torch


class Euler:
    def step(self, sample, s_churn=0.0, s_tmin=0.0, s_tmax=float("inf")):
        sigma = self.sigmas[self.step_index]
        {line}
        return sample * (gamma + 1)
"""


def _rewritten(source: str, needle: str, span: bool = False) -> list[str] | None:
    """The changed lines but the helper's; ``span``: the site is ``needle`` itself (else
    from it to the end of its line)."""
    out = at(source, needle, BranchSameArms, "GB0170") if span else rewrite_line(source, BranchSameArms, needle, "GB0170")
    if out is None:
        return None
    helper = {line.strip() for line in same_arms.HELPER.code.splitlines()} | {"import math"}
    return [line for line in changed(source, out) if line not in helper]


def test_rewrites_the_euler_step_of_a_method():
    line = "gamma = min(s_churn / (len(self.sigmas) - 1), 2**0.5 - 1) if s_tmin <= sigma <= s_tmax else 0.0"
    assert _rewritten(EULER.format(line=line), "gamma =") == [
        "gamma = gbfix_if_same(",
        "(s_tmin, sigma, s_tmax),",
        "lambda: s_tmin <= sigma <= s_tmax,",
        "lambda: min(s_churn / (len(self.sigmas) - 1), 2**0.5 - 1),",
        "lambda: 0.0,",
        ")",
    ]


def test_rewrites_k_diffusions_loop_in_a_function_inline_in_an_expression():
    source = """\
    import torch


    def sample_euler(x, sigmas, s_churn=0.0, s_tmin=0.0, s_tmax=float("inf")):
        for i in range(len(sigmas) - 1):
            sigma_hat = sigmas[i] * ((min(s_churn / (len(sigmas) - 1), 2**0.5 - 1) if s_tmin <= sigmas[i] <= s_tmax else 0.0) + 1)
            x = x * sigma_hat
        return x
    """
    out = _rewritten(source, "s_tmin <= sigmas[i] <= s_tmax", span=True)  # the test's span, as Dynamo reports it
    assert out == [
        "sigma_hat = sigmas[i] * (gbfix_if_same((s_tmin, sigmas[i], s_tmax), lambda: s_tmin <= sigmas[i] <= s_tmax,"
        " lambda: min(s_churn / (len(sigmas) - 1), 2**0.5 - 1), lambda: 0.0) + 1)"
    ]


def test_rewrites_the_statement_form_with_an_and_and_a_single_operand():
    source = """\
    import torch


    def noise_scale(sigma, churn):
        if sigma > 0 and not sigma > 80:
            scale = churn * 0
        else:
            scale = 0
        return scale
    """
    assert _rewritten(source, "if sigma > 0") == [
        "scale = gbfix_if_same(",
        "(sigma, 0, sigma, 80),",
        "lambda: sigma > 0 and not sigma > 80,",
        "lambda: churn * 0,",
        "lambda: 0,",
        ")",
    ]
    single = EULER.format(line="gamma = 1.0 if sigma > 0.5 else s_churn")
    assert _rewritten(single, "gamma =")[1:3] == ["(sigma, 0.5),", "lambda: sigma > 0.5,"]


@pytest.mark.parametrize(
    "line",
    [
        "gamma = self.a if s_tmin <= sigma else self.b",  # no number arm: tensors would need the test
        "gamma = 1.0 if s_tmin <= sigma else 0.5",  # two different numbers: the test decides
        "gamma = 0.0 if sigma.isfinite().all() else 1.0",  # not a comparison
        "gamma = 0.0 if sigma in self.seen else 1.0",  # membership
        "gamma = 0.0 if sigma is None else 1.0",
        "gamma = self.count() if sigma > 0 else 0.0",  # an arm with effects
        "gamma = 1.0 if self.pop() > 0 else 0.0",  # an operand with effects
    ],
)
def test_declines(line):
    assert _rewritten(EULER.format(line=line), "gamma =") is None


def test_declines_a_class_body_and_a_taken_helper_name():
    source = textwrap.dedent("""\
    import torch


    class Config:
        sigma = torch.tensor(0.5)
        gamma = 0.0 if sigma > 1 else 0.0
    """)
    assert rewrite_line(source, BranchSameArms, "gamma =", "GB0170") is None
    taken = EULER.format(line="gamma = 0.0 if sigma > 0 else 0.0") + "\ngbfix_if_same = 1\n"
    assert rewrite_line(taken, BranchSameArms, "gamma =", "GB0170") is None


# ---- the helper against the conditional it stands for --------------------------------


@pytest.fixture(scope="module")
def if_same():
    torch = pytest.importorskip("torch")
    return torch, generated_function(same_arms.HELPER, math=math)


def _key(torch, value):
    """A comparable form of an outcome: an error type, a tensor's values, a number's repr (-0.0, nan)."""
    if isinstance(value, type):
        return value
    return type(value), value.tolist() if isinstance(value, torch.Tensor) else repr(value)


def test_the_helper_gives_what_the_conditional_gives_compiled_and_not(if_same):
    """Sigmas in and out of the range, NaN, of several shapes and dtypes; arms that
    agree, differ, are -0.0 against 0.0, int against float, raise, or are tensors:
    the same value and type, or the same error, eagerly and compiled; no break where
    the arms agree on a number and the sigma is one element."""
    torch, pick = if_same
    from torch._dynamo.utils import counters

    sigmas = [torch.tensor(0.5), torch.tensor(90.0), torch.tensor(float("nan")), torch.tensor([0.5, 2.0]), 0.5]
    arms = [(0.0, 0.0), (0.0, 1.0), (-0.0, 0.0), (0, 0.0), ("zero", 0.0)]
    cases = [(s, a, 0) for s, a in itertools.product(sigmas, arms)] + [(s, (0.0, 0.0), 1) for s in sigmas[:2]]  # 1: raises

    def original(sigma, churn, a, b):
        return (a if churn == 0 else churn / 0) if 0.0 <= sigma <= 80.0 else b

    def rewritten(sigma, churn, a, b):
        return pick((0.0, sigma, 80.0), lambda: 0.0 <= sigma <= 80.0, lambda: a if churn == 0 else churn / 0, lambda: b)

    compiled = torch.compile(rewritten, backend="eager")
    for sigma, (a, b), churn in cases:
        what = (sigma, a, b, churn)
        want = _key(torch, value_or_error(lambda: original(sigma, churn, a, b)))  # noqa: B023 - called at once
        assert _key(torch, value_or_error(lambda: rewritten(sigma, churn, a, b))) == want, what  # noqa: B023
        torch._dynamo.reset()
        counters.clear()
        assert _key(torch, value_or_error(lambda: compiled(sigma, churn, a, b))) == want, what  # noqa: B023
        agree = churn == 0 and type(a) is type(b) and isinstance(a, (int, float)) and a == b and str(a) == str(b)
        if agree and isinstance(sigma, torch.Tensor) and sigma.numel() == 1:
            assert not counters["graph_break"], what
