"""Static tests (no torch) of autograd-grad-to-func and resize-if-needed (grad_mode):
the rules/ examples, variants, and the cases each must decline."""

from __future__ import annotations

from pathlib import Path

import pytest

from gbfix import rules
from gbfix.recipes.grad_mode import AutogradGradToFunc, ResizeIfNeeded
from tests.helpers import at, changed

RULES = Path(__file__).resolve().parents[2] / "rules"


# ---- rules/ examples --------------------------------------------------------------

# Where Dynamo reports each example's break(s): every site must give the same edit.
SITES = {
    "GB8985": (
        AutogradGradToFunc,
        (("interp.requires_grad_(True)", "GB8985"), ("torch.autograd.grad(", "GB9186"), ("h.detach().requires_grad_()", "GB8985")),
    ),
    "GB9186": (AutogradGradToFunc, (("(alpha * real + (1 - alpha) * fake).requires_grad_(True)", "GB8985"), ("torch.autograd.grad(", "GB9186"))),
    "GB0148": (ResizeIfNeeded, (("out.resize_(x.size(0), 2)", "GB0148"), ("tokens.unsqueeze_(0)", "GB0148"))),
}


@pytest.mark.parametrize("page", sorted(SITES))
def test_rule_examples(page):
    recipe, sites = SITES[page]
    # examples another recipe answers (the trace-autograd-ops config route) are not this recipe's
    for ex in (e for e in rules.parse(RULES / f"{page}.md") if "trace_autograd_ops = True" not in (e.after or "")):
        found = [(needle, code) for needle, code in sites if needle in ex.before]
        assert found, ex.title
        for needle, code in found:
            assert at(ex.before, needle, recipe, code) == ex.after, (ex.title, code)


# ---- autograd-grad-to-func ----------------------------------------------------------

PENALTY = """
import torch

def penalty(critic, real, fake):
    alpha = torch.rand(real.size(0), 1)
    interp = alpha * real + (1 - alpha) * fake
    interp.requires_grad_(True)
    scores = critic(interp)
    grads = torch.autograd.grad(scores.sum(), interp, create_graph=True)[0]
    return grads.norm(2, dim=1).mean()
"""


def grad_site(source: str) -> str | None:
    return at(source, "torch.autograd.grad(", AutogradGradToFunc, "GB9186")


def leaf_site(source: str, needle: str = "requires_grad_(") -> str | None:
    return at(source, needle, AutogradGradToFunc, "GB8985")


def test_grad_form_from_either_site():
    want = ["grads = torch.func.grad(lambda interp: critic(interp).sum())(interp)"]
    assert changed(PENALTY, grad_site(PENALTY)) == want
    assert grad_site(PENALTY) == leaf_site(PENALTY)


def test_unpacked_result_and_autograd_alias():
    src = PENALTY.replace("import torch\n", "import torch\nfrom torch import autograd\n").replace(
        "grads = torch.autograd.grad(scores.sum(), interp, create_graph=True)[0]",
        "grads, = autograd.grad(scores.sum(), interp, create_graph=True)",
    )
    out = at(src, "autograd.grad(", AutogradGradToFunc, "GB9186")
    assert changed(src, out) == ["grads = torch.func.grad(lambda interp: critic(interp).sum())(interp)"]


def test_vjp_with_grad_outputs_and_cuda_branch():
    src = """
    import torch
    from torch import autograd
    use_cuda = False

    def calc_gradient_penalty(netD, real_data, fake_data):
        alpha = torch.rand(real_data.size(0), 1)
        interpolates = alpha * real_data + ((1 - alpha) * fake_data)
        if use_cuda:
            interpolates = interpolates.cuda()
        interpolates.requires_grad_(True)  # the penalty's leaf
        disc_interpolates = netD(interpolates)
        gradients = autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                                  grad_outputs=torch.ones(disc_interpolates.size()),
                                  create_graph=True, retain_graph=True, only_inputs=True)[0]
        return gradients.norm(2, dim=1).mean()
    """
    out = leaf_site(src)
    assert changed(src, out) == [
        "# the penalty's leaf",
        "disc_interpolates, disc_interpolates_vjp = torch.func.vjp(lambda interpolates: netD(interpolates), interpolates)",
        "gradients = disc_interpolates_vjp(torch.ones(disc_interpolates.size()))[0]",
    ]
    assert "requires_grad_" not in out and "autograd.grad" not in out


def test_vjp_when_the_forward_is_not_next_to_the_gradient():
    src = PENALTY.replace(
        "    grads = torch.autograd.grad(scores.sum()",
        "    weight = torch.ones(1)\n    grads = torch.autograd.grad(scores",
    )
    assert changed(src, grad_site(src)) == [
        "scores, scores_vjp = torch.func.vjp(lambda interp: critic(interp), interp)",
        "grads = scores_vjp(torch.ones_like(scores))[0]",
    ]


def test_forward_inside_the_call_and_made_here_leaf():
    src = """
    import torch

    def r1(D, x):
        x = x.detach().requires_grad_()
        g = torch.autograd.grad(D(x).sum(), [x], create_graph=True)[0]
        return g.pow(2).sum()
    """
    assert changed(src, grad_site(src)) == ["x = x.detach()", "g = torch.func.grad(lambda x: D(x).sum())(x)"]


def test_operator_forward_is_parenthesised():
    src = PENALTY.replace("scores = critic(interp)", "scores = critic(interp) * 2")
    assert "torch.func.grad(lambda interp: (critic(interp) * 2).sum())(interp)" in grad_site(src)


DECLINED = {
    "leaf read after": ("return grads.norm(2, dim=1).mean()", "return grads.norm(2, dim=1).mean() + interp.sum()"),
    "forward read after": ("return grads.norm(2, dim=1).mean()", "return grads.norm(2, dim=1).mean() + scores.mean()"),
    "no create_graph": (", create_graph=True)", ")"),
    "create_graph False": ("create_graph=True", "create_graph=False"),
    "allow_unused": ("create_graph=True)", "create_graph=True, allow_unused=True)"),
    "two inputs": ("scores.sum(), interp,", "scores.sum(), [interp, real],"),
    "non-constant flag": ("interp.requires_grad_(True)", "interp.requires_grad_(flag)"),
    "forward used twice": ("scores.sum(), interp", "(scores * scores).sum(), interp"),
    "aliased leaf": ("    interp.requires_grad_(True)", "    other = interp\n    interp.requires_grad_(True)"),
    "not the first element": (")[0]", ")[1]"),
    "two readers in between": ("    scores = critic(interp)", "    scores = critic(interp)\n    extra = interp * 2"),
}


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_declines(case):
    old, new = DECLINED[case]
    src = PENALTY.replace(old, new)
    assert src != PENALTY
    assert grad_site(src) is None


def test_declines_an_input_of_the_function():
    src = """
    import torch

    def saliency(model, x):
        x.requires_grad_()
        score = model(x).sum()
        (g,) = torch.autograd.grad(score, x, create_graph=True)
        return g
    """
    assert grad_site(src) is None and leaf_site(src) is None


@pytest.mark.parametrize(
    "made",
    ["h.requires_grad_()", "h.to(device).requires_grad_()", "h.flatten().requires_grad_()", "(+h).requires_grad_()"],
)
def test_declines_a_leaf_that_may_be_another_name_s_tensor(made):
    src = f"""
    import torch

    def penalty(D, h, device):
        x = {made}
        out = D(x)
        return torch.autograd.grad(out.sum(), x, create_graph=True)[0].sum()
    """
    assert grad_site(src) is None


def test_accepts_a_converted_new_tensor():
    src = """
    import torch

    def penalty(D, h, device):
        x = h.clone().to(device).requires_grad_()
        out = D(x)
        return torch.autograd.grad(out.sum(), x, create_graph=True)[0].sum()
    """
    assert changed(src, grad_site(src)) == [
        "x = h.clone().to(device)",
        "return torch.func.grad(lambda x: D(x).sum())(x).sum()",
    ]


def test_declines_when_the_vjp_name_is_taken():
    src = PENALTY.replace(
        "    grads = torch.autograd.grad(scores.sum()", "    scores_vjp = 1\n    grads = torch.autograd.grad(scores"
    )
    assert grad_site(src) is None


def test_declines_other_requires_grad_calls():
    src = """
    import torch

    def step(x):
        buf = torch.zeros(3).requires_grad_(True)
        return x.sum() + buf.sum()
    """
    assert leaf_site(src) is None


# ---- resize-if-needed ---------------------------------------------------------------


def resize(source: str, needle: str) -> str | None:
    return at(source, needle, ResizeIfNeeded, "GB0148")


@pytest.mark.parametrize(
    "call, test",
    [
        ("out.resize_(n, 2)", "if out.shape != (n, 2):"),
        ("out.resize_(x.shape)", "if out.shape != tuple(x.shape):"),
        ("out.resize_(x.size())", "if out.shape != tuple(x.size()):"),
        ("out.resize_(x.size(0))", "if out.shape != (x.size(0),):"),
        ("out.resize_(x.shape[0])", "if out.shape != (x.shape[0],):"),
        ("out.resize_(x.shape[1:])", "if out.shape != tuple(x.shape[1:]):"),
        ("self.buf.resize_(len(xs))", "if self.buf.shape != (len(xs),):"),
        ("out.resize_as_(x)", "if out.shape != x.shape:"),
    ],
)
def test_resize_guard(call, test):
    src = f"""
    def f(self, x, xs, out, n):
        {call}  # keep
        return out
    """
    assert changed(src, resize(src, call)) == [test, f"{call}  # keep"]


@pytest.mark.parametrize(
    "call",
    [
        "y = out.resize_(n)",
        "out.resize_(n).zero_()",
        "out.resize_(n, memory_format=torch.channels_last)",
        "make().resize_(n)",
        "out[0].resize_(n)",
        "out.unsqueeze_(0)",
        "out.resize_as_(x, y)",
    ],
)
def test_resize_declines(call):
    src = f"""
    def f(x, out, n):
        {call}
        return out
    """
    assert resize(src, call) is None
