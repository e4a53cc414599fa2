"""Static tests (no torch) of split-compiled-step: the rules/ examples, the
real-world fixture, variants, and the cases it must decline."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from gbfix import rules
from gbfix.recipes.split_step import SplitCompiledStep
from tests.helpers import rewrite_at

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"
FIXTURES = ROOT / "tests" / "fixtures" / "realworld"


def split(source: str, marker: str, code: str = "GB0123") -> str | None:
    """Rewrite at the first line holding ``marker``, the span starting where it does
    (Dynamo's span of ``loss.backward()``, ``next(it)``, ``optimizer.step()``)."""
    source = textwrap.dedent(source)
    line, text = next((n, t) for n, t in enumerate(source.splitlines(), 1) if marker in t)
    out = rewrite_at(source, SplitCompiledStep, line, text.index(marker), None, code)
    if out is not None:
        ast.parse(out)
    return out


@pytest.mark.parametrize("code, marker", [("GB0123", "loss.backward()"), ("GB4347", "next(")])
def test_rule_examples(code, marker):
    examples = [ex for ex in rules.parse(RULES / f"{code}.md") if marker in ex.before]  # the page has other recipes' too
    assert examples
    for ex in examples:
        assert split(ex.before, marker, code) == ex.after, ex.title


def test_fixture_trainer_method_compiled_in_init():
    source = (FIXTURES / "train_step_backward" / "trainer.py").read_text()
    out = split(source, "loss.backward()")
    assert out is not None
    assert (
        '@torch.compile(backend="eager")\n'
        "def _Trainer_train_step_compiled(self, inputs, labels):\n"
        "    # Added by gbfix: the part of train_step that compiles; what breaks the graph stays there, eager.\n"
        "    _, loss = self.model(inputs, labels)\n"
        "    return loss\n\n\n"
        "class Trainer:\n"
    ) in out
    assert "torch.compile(self.train_step" not in out
    assert (
        "    def train_step(self, data_iterator):\n"
        "        inputs, labels = next(data_iterator)\n"
        "        loss = _Trainer_train_step_compiled(self, inputs, labels)\n"
        "        loss.backward()\n"
    ) in out
    # every break of the step proposes the same edit: one trial for all of them
    for marker, code in (("next(", "GB4347"), ("self.optimizer.step()", "GB0025"), ("self.optimizer.step()", "GB0007")):
        assert split(source, marker, code) == out


STEP = """\
import torch
import torch.nn.functional as F


@torch.compile(backend="eager")
def train_step(model, opt, it):
{body}


if __name__ == "__main__":
    pass
"""


def step(body: str, marker: str = ".backward()", code: str = "GB0123") -> str | None:
    return split(STEP.format(body=textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")), marker, code)


def parts(out: str | None) -> tuple[str, str]:
    """The helper (decorator to its last line) and the step's def, as text."""
    assert out is not None, "the recipe declined"
    helper = out[out.index("@torch.compile") : out.index("\n\n\ndef train_step")]
    rest = out[out.index("def train_step") :]
    return helper, rest[: rest.index("\n\n\n")]


def test_prefix_and_suffix_every_site_same_edit():
    body = """
    x, y = next(it)
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss
    """
    out = step(body)
    helper, fn = parts(out)
    assert helper.startswith('@torch.compile(backend="eager")\ndef _train_step_compiled(model, x, y):\n')
    assert helper.endswith("    loss = F.cross_entropy(logits, y)\n    return loss")
    assert fn == (
        "def train_step(model, opt, it):\n"
        "    x, y = next(it)\n"
        "    loss = _train_step_compiled(model, x, y)\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
        "    return loss"
    )
    assert step(body, "next(it)", "GB4347") == out
    assert step(body, "opt.step()", "GB0025") == out


def test_leading_zero_grad_and_autograd_backward():
    body = """
    opt.zero_grad(set_to_none=True)
    loss = F.mse_loss(model(it[0]), it[1])
    torch.autograd.backward(loss)
    opt.step()
    return loss.detach()
    """
    helper, fn = parts(step(body, "torch.autograd.backward", "GB0007"))
    assert "def _train_step_compiled(model, it):" in helper
    assert fn.splitlines()[1:3] == ["    opt.zero_grad(set_to_none=True)", "    loss = _train_step_compiled(model, it)"]


def test_prefix_only_returns_what_the_helper_returns_nested_returns_too():
    body = """
    batch = next(it)
    if batch["x"].dim() == 3:
        return model(batch["x"]).mean(1)
    return model(batch["x"])
    """
    helper, fn = parts(step(body, "next(it)", "GB4347"))
    assert "def _train_step_compiled(model, batch):" in helper
    assert "        return model(batch[\"x\"]).mean(1)\n    return model(batch[\"x\"])" in helper
    assert fn.endswith("    batch = next(it)\n    return _train_step_compiled(model, batch)")


def test_several_results_a_tuple_in_order_of_use():
    body = """
    x, y = next(it)
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    acc = (logits.argmax(-1) == y).float().mean()
    loss.backward()
    return loss.detach(), acc, logits
    """
    helper, fn = parts(step(body))
    assert helper.endswith("    return loss, acc, logits")
    assert "    loss, acc, logits = _train_step_compiled(model, x, y)\n" in fn


def test_nothing_returned_bare_call():
    body = """
    x = next(it)
    model.stats = model(x).mean()
    opt.step()
    """
    helper, fn = parts(step(body, "opt.step()", "GB0025"))
    assert not helper.rstrip().endswith("return")
    assert "    _train_step_compiled(model, x)\n    opt.step()" in fn


def test_docstring_blank_lines_and_comments():
    body = '''
    """One step."""
    x, y = next(it)

    # forward
    loss = F.mse_loss(model(x), y)
    loss.backward()
    return loss
    '''
    helper, fn = parts(step(body))
    assert fn.startswith('def train_step(model, opt, it):\n    """One step."""\n    x, y = next(it)\n\n    loss = _train')
    assert "(the statements" not in helper and "    # Added by gbfix" in helper
    assert "eager.\n    # forward\n    loss = F.mse_loss" in helper


def test_autocast_block_binds_what_the_suffix_reads():
    body = """
    x, y = next(it)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
        loss = F.mse_loss(out.float(), y)
    loss.backward()
    return loss
    """
    helper, fn = parts(step(body))
    assert helper.endswith("    return loss") and "loss = _train_step_compiled(model, x, y)" in fn


def test_parameter_rebound_in_the_middle_is_passed_and_returned():
    body = """
    x = next(it)
    if x.dim() == 1:
        x = x.unsqueeze(0)
    loss = model(x).sum()
    loss.backward()
    return x, loss
    """
    helper, fn = parts(step(body))
    # in the order the suffix reads them
    assert "def _train_step_compiled(model, x):" in helper and "    loss, x = _train_step_compiled(model, x)" in fn


def test_signature_order_defaults_and_kwargs():
    source = """
    import torch


    @torch.compile
    def train_step(model, opt, batches, scale=1.0, *args, **kwargs):
        x = next(batches)
        loss = model(x, *args, **kwargs).sum() * scale
        loss.backward()
        return loss
    """
    out = split(source, "loss.backward()")
    assert "@torch.compile\ndef _train_step_compiled(model, scale, args, kwargs, x):\n" in out
    assert "    loss = model(x, *args, **kwargs).sum() * scale\n" in out
    assert "def train_step(model, opt, batches, scale=1.0, *args, **kwargs):" in out


def test_generator_expression_consumed_in_the_middle():
    body = """
    x, y = next(it)
    loss = F.mse_loss(model(x), y) + 1e-4 * sum(p.pow(2).sum() for p in model.parameters())
    loss.backward()
    return loss
    """
    assert step(body) is not None


def test_assigned_compile_call_with_literal_arguments():
    source = """
    import torch


    def train_step(model, opt, x, y):
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        opt.step()
        return loss


    def main(model, opt, data):
        step = torch.compile(train_step, mode="max-autotune", fullgraph=True)
        for x, y in data:
            step(model, opt, x, y)
    """
    out = split(source, "loss.backward()")
    assert '@torch.compile(mode="max-autotune", fullgraph=True)\ndef _train_step_compiled(model, x, y):' in out
    assert "    step = train_step\n" in out
    assert out.index("def _train_step_compiled") < out.index("def train_step")


def test_module_level_reassignment_is_dropped():
    source = """
    import torch


    def train_step(model, opt, it):
        x = next(it)
        return model(x).sum()


    train_step = torch.compile(train_step)


    if __name__ == "__main__":
        print(train_step(torch.nn.Linear(2, 2), None, iter([torch.ones(2)])))
    """
    out = split(source, "next(it)", "GB4347")
    assert "@torch.compile\ndef _train_step_compiled(model, x):" in out
    assert "torch.compile(train_step)" not in out and "train_step = " not in out
    assert "print(train_step(torch.nn.Linear" in out


def test_method_compiled_into_another_attribute():
    source = """
    import torch


    class Trainer:
        def __init__(self, model):
            self.model = model
            self.step = torch.compile(self._step, backend="eager")

        def _step(self, batch):
            loss = self.model(batch).sum()
            loss.backward()
            return loss
    """
    out = split(source, "loss.backward()")
    assert '@torch.compile(backend="eager")\ndef _Trainer_step_compiled(self, batch):' in out
    assert "        self.step = self._step\n" in out
    assert out.index("def _Trainer_step_compiled") < out.index("class Trainer")


def test_decorated_method():
    source = """
    import torch


    class Module(torch.nn.Module):
        @torch.compile(dynamic=False)
        def fit_step(self, batches):
            x = next(batches)
            return self.lin(x).relu()
    """
    out = split(source, "next(batches)", "GB4347")
    assert "@torch.compile(dynamic=False)\ndef _Module_fit_step_compiled(self, x):" in out
    assert "    def fit_step(self, batches):\n        x = next(batches)\n        return _Module_fit_step_compiled(self, x)" in out


# ---- declines ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, marker",
    [
        # the break in the middle: nothing to cut around it
        ("x = next(it)\nt = time.time()\nloss = model(x).sum()\nloss.backward()", "time.time()"),
        # the backward nested in a block: it would stay in the helper
        ("x = next(it)\nloss = model(x).sum()\nif loss > 0:\n    loss.backward()\nopt.step()", ".backward()"),
        ("x = next(it)\nfor p in x:\n    model(p).sum().backward()\nopt.step()", "opt.step()"),
        # a return in the middle while the suffix follows
        ("x = next(it)\nif x is None:\n    return None\nloss = model(x).sum()\nloss.backward()", ".backward()"),
        # closures, globals, del, introspection
        ("x = next(it)\nf = lambda t: model(t)\nloss = f(x).sum()\nloss.backward()", ".backward()"),
        ("global STEP\nx = next(it)\nloss = model(x).sum() * STEP\nloss.backward()", ".backward()"),
        ("x = next(it)\nloss = model(x).sum()\ndel x\nloss.backward()", ".backward()"),
        ("x = next(it)\nloss = model(x).sum()\nprint(locals())\nloss.backward()", ".backward()"),
        # bound only conditionally before the middle
        ("if opt:\n    scale = 2.0\nx = next(it)\nloss = model(x).sum() * scale\nloss.backward()", ".backward()"),
        # read in the middle, bound only after it
        ("x = next(it)\nloss = model(x).sum() + late\nloss.backward()\nlate = 1", ".backward()"),
        # the suffix reads a name the middle may not bind
        ("x = next(it)\nloss = model(x).sum()\nif x.dim() > 1:\n    aux = x.mean()\nloss.backward()\nreturn aux", ".backward()"),
        ("x = next(it)\nfor k in range(x.shape[0]):\n    x = x + k\nloss = model(x).sum()\nloss.backward()\nreturn k", ".backward()"),
        # a lazy generator the suffix consumes after rebinding what it reads
        ("x = next(it)\nloss = model(x).sum()\ng = (x * k for k in range(2))\nloss.backward()\nx = 0\nreturn list(g)", ".backward()"),
        # nothing worth compiling between the cuts
        ("opt.zero_grad()\nopt.step()", "opt.step()"),
        ("x = next(it)\nloss = x\nloss.backward()", ".backward()"),
    ],
)
def test_declines_in_the_step(body, marker):
    assert step(body, marker) is None


def test_declines_other_decorators_and_nested_functions():
    src = STEP.format(body="    x = next(it)\n    return model(x)").replace("@torch.compile(", "@functools.cache\n@torch.compile(")
    assert split(src, "next(it)", "GB4347") is None
    nested = """
    import torch


    def make():
        @torch.compile
        def train_step(model, it):
            x = next(it)
            return model(x)
        return train_step
    """
    assert split(nested, "next(it)", "GB4347") is None


def test_declines_uncompiled_or_not_ours():
    plain = textwrap.dedent(
        """
        import torch


        def train_step(model, it):
            x = next(it)
            return model(x)
        """
    )
    assert split(plain, "next(it)", "GB4347") is None
    for how in (
        "step = torch.compile(train_step, mode=args.mode)",  # not a literal: evaluated there
        "step = torch.compile(train_step) if args.compile else train_step",  # also used uncompiled
        "if args.compile:\n    train_step = torch.compile(train_step)",
        "train_step(None, iter([]))\ntrain_step = torch.compile(train_step)",  # used before it is compiled
        "def main():\n    from torch import compile\n    step = compile(train_step)",  # unbound at module level
    ):
        assert split(plain + "\n\n" + how + "\n", "next(it)", "GB4347") is None, how


def test_declines_method_cases():
    source = """
    import torch


    class Trainer:
        def __init__(self, model, compile):
            self.model = model
            {how}

        def _step(self, batch):
            x = next(batch)
            return self.model(x){extra}
    """
    ok = split(source.format(how="self.step = torch.compile(self._step)", extra=""), "next(batch)", "GB4347")
    assert ok is not None
    for how, extra in (
        ("self.step = torch.compile(self._step) if compile else self._step", ""),  # also eager
        ("if compile:\n                self._step = torch.compile(self._step)\n                self.n = 0", ""),
        ("self.step = torch.compile(other._step)", ""),  # another object's method
        ("self.step = torch.compile(self._step)", " + self.__scale"),  # mangled in the class
        ("self.step = torch.compile(self._step)", " + super().bias"),  # super() needs the class
    ):
        assert split(source.format(how=how, extra=extra), "next(batch)", "GB4347") is None, how


def test_declines_a_helper_name_in_use():
    src = STEP.format(body="    x = next(it)\n    return model(x)") + "\n_train_step_compiled = None\n"
    assert split(src, "next(it)", "GB4347") is None
