"""raise-if, assert-to-raise-if, assert-item-to-raise-if: a check that raises on a tensor's
value becomes a call of ``gbfix_raise_if``, whose op tests and raises the same exception at
run time.

The static tests apply each recipe at a hand-made site (no torch). The real-run tests
(the last part of the file) prove what the verifier cannot see, since a normal run never
fails its checks: on the failure path, the rewritten program compiled (eager, aot_eager,
inductor; fullgraph or not; training or not) raises the exception the original raises
uncompiled, class and arguments, prints what the original printed before the check and
nothing after it, and leaves the module state as the original does, except where
AOTAutograd cannot (the limit rules/GB0170.md states, pinned here).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from gbfix.recipes import all_recipes, candidates, op_helpers
from gbfix.recipes.print_op import PrintToOp
from gbfix.recipes.raise_if import AssertItemToRaiseIf, AssertToRaiseIf, RaiseIf
from gbfix.records import ObservedCall, ValueSpec
from tests.helpers import changed, generated_function, rewrite_at, rewrite_line, site_context


def body(text: str) -> str:
    """A test source as a module that imports torch (so the rewrite adds no import), in a
    package (the helper comes from the generated module: the diff shows only the call)."""
    text = textwrap.dedent(text).lstrip("\n")
    return text if "import torch" in text else "import torch\n\n" + text


PKG = Path("/virtual/pkg/model.py")


def fix(source: str, recipe, needle: str, code: str = "GB0170", nth: int = 0, **kw) -> str | None:
    """The recipe at the line of ``needle`` (Dynamo's span: from it to the line's end),
    in a module of a package, so the helper is imported, not written into the file."""
    kw.setdefault("path", PKG)
    return rewrite_line(body(source), recipe, needle, code, nth, **kw)


def declined(source: str, recipe, needle: str, code: str = "GB0170", **kw) -> str | None:
    """Why the recipe declines at the line of ``needle`` (None: it gave nothing, unsaid)."""
    source = body(source)
    hits = [(i, line) for i, line in enumerate(source.splitlines(), 1) if needle in line]
    line, text = hits[0]
    ctx = site_context(source, line, text.index(needle), len(text.rstrip()), code, path=kw.get("path", PKG), observed=kw.get("observed"))
    r = recipe()
    assert r.propose(ctx) is None
    return r.declined


@pytest.fixture(autouse=True)
def _package(monkeypatch):
    """/virtual/pkg is a package: generated.home finds its __init__.py."""
    from gbfix import generated

    real = Path.is_file
    monkeypatch.setattr(Path, "is_file", lambda p: str(p) == "/virtual/pkg/__init__.py" or real(p))
    yield generated


# ---------------------------------------------------------------- raise-if: spellings

RAISE_CASES = {
    "inline test, builtin class, literal": (
        """
        def f(x):
            if torch.isnan(x).any():
                raise ValueError("x has NaNs")
            return x
        """,
        "if torch.isnan",
        ['gbfix_raise_if(torch.isnan(x).any(), ValueError, "x has NaNs")'],
    ),
    "a method, an f-string of a config value": (
        """
        class Net(torch.nn.Module):
            def forward(self, ids):
                if (ids >= self.config.vocab_size).any():
                    raise ValueError(f"ids >= vocab_size {self.config.vocab_size}")
                return ids
        """,
        "if (ids",
        [  # laid out one argument a line past 88 columns
            "gbfix_raise_if(", "(ids >= self.config.vocab_size).any(),", "ValueError,",
            'lambda: f"ids >= vocab_size {self.config.vocab_size}",', ")",
        ],
    ),
    "a flag local": (
        """
        def f(x):
            bad = torch.isnan(x).any()
            if bad:
                raise FloatingPointError("NaN")
            return x
        """,
        "if bad",
        ['gbfix_raise_if(bad, FloatingPointError, "NaN")'],
    ),
    "`and` with a static part, `not`": (
        """
        def f(loss):
            if loss is not None and not torch.isfinite(loss):
                raise FloatingPointError("non-finite loss")
            return loss
        """,
        "if loss is not None",
        [
            "if loss is not None:", "gbfix_raise_if(", "torch.logical_not(torch.isfinite(loss)),", "FloatingPointError,",
            '"non-finite loss",', ")",
        ],
    ),
    "`or` of two tensor tests": (
        """
        def f(x):
            if torch.isnan(x).any() or torch.isinf(x).any():
                raise ValueError("input contains non-finite values")
            return x
        """,
        "if torch.isnan",
        [
            "gbfix_raise_if(", "torch.logical_or(torch.isnan(x).any(), torch.isinf(x).any()),", "ValueError,",
            '"input contains non-finite values",', ")",
        ],
    ),
    "`or` with a static part keeps the raise under it": (
        """
        def f(x, strict):
            if strict or (x < 0).any():
                raise ValueError("negative")
            return x
        """,
        "if strict",
        ["if strict:", "else:", 'gbfix_raise_if((x < 0).any(), ValueError, "negative")'],  # `raise` kept under `if strict:`
    ),
    "a custom exception class of the module, bare": (
        """
        class NonFinite(Exception):
            pass


        def f(x):
            if not torch.isfinite(x).all():
                raise NonFinite
            return x
        """,
        "if not",
        ["gbfix_raise_if(torch.logical_not(torch.isfinite(x).all()), NonFinite)"],
    ),
    "an exception of an imported module, a loop counter in the message": (
        """
        import errors


        def sample(img, steps):
            for t in reversed(range(steps)):
                img = img * 0.5
                if torch.isnan(img).any():
                    raise errors.SamplerError(f"NaN at step {t}")
            return img
        """,
        "if torch.isnan",
        ["gbfix_raise_if(", "torch.isnan(img).any(),", "errors.SamplerError,", 'lambda: f"NaN at step {t}",', ")"],
    ),
    "a %-format of a module global": (
        """
        LIMIT = 4


        def f(x):
            if x.abs().max() > LIMIT:
                raise OverflowError("above %d" % LIMIT)
            return x
        """,
        "if x.abs()",
        ['gbfix_raise_if(x.abs().max() > LIMIT, OverflowError, lambda: "above %d" % LIMIT)'],
    ),
}


@pytest.mark.parametrize("case", RAISE_CASES)
def test_raise_if_spellings(case):
    source, needle, lines = RAISE_CASES[case]
    out = fix(source, RaiseIf, needle)
    assert changed(body(source), out) == ["from ._gbfix import gbfix_raise_if", *lines]


def test_elif_chain_each_link():
    source = """
    def f(x, lo):
        if (x < lo).any():  # too small
            raise ValueError("below")
        elif (x > 10).any():
            raise OverflowError("above")
        else:
            x = x - lo
        return x
    """
    first = fix(source, RaiseIf, "if (x < lo)")
    assert first == body(
        """
        from ._gbfix import gbfix_raise_if

        def f(x, lo):
            # too small
            gbfix_raise_if((x < lo).any(), ValueError, "below")
            if (x > 10).any():
                raise OverflowError("above")
            else:
                x = x - lo
            return x
        """
    ).replace("import torch\n\nfrom", "import torch\nfrom")
    second = fix(first, RaiseIf, "if (x > 10)")
    assert second.split("def f", 1)[1] == """(x, lo):
    # too small
    gbfix_raise_if((x < lo).any(), ValueError, "below")
    gbfix_raise_if((x > 10).any(), OverflowError, "above")
    x = x - lo
    return x
"""
    # the elif alone, the `if` before it untouched: its `else:` runs the check, then the else part
    alone = fix(source, RaiseIf, "elif (x > 10)")
    assert alone.split("def f", 1)[1] == """(x, lo):
    if (x < lo).any():  # too small
        raise ValueError("below")
    else:
        gbfix_raise_if((x > 10).any(), OverflowError, "above")
        x = x - lo
    return x
"""


def test_a_script_gets_the_helper_in_the_file():
    source = """
    def f(x):
        if torch.isnan(x).any():
            raise ValueError("NaN")
        return x


    if __name__ == "__main__":
        f(torch.ones(2))
    """
    out = fix(source, RaiseIf, "if torch.isnan", path=Path("/virtual/script.py"))
    assert "def gbfix_raise_if(cond, exc, *message):" in out and "_gbfix_raise_op = _gbfix_op(" in out
    assert "from ._gbfix" not in out


# ---------------------------------------------------------------- a message made at run time

# A message that formats a tensor: its text is only known at run time, so the op makes it
# there, through report-if's formatting (gbfix_raise_if_format: a template, its values by
# kind, the casts the message applied), only where the test holds.
FORMAT_CASES = {
    "an f-string of the tested tensor, a static part kept (blind probe train_loop)": (
        RaiseIf,
        """
        def forward(logits, y):
            loss = torch.nn.functional.cross_entropy(logits, y) if y is not None else None
            if loss is not None and not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite loss {loss}")
            return logits, loss
        """,
        "if loss is not None",
        [
            "if loss is not None:", "gbfix_raise_if_format(", "torch.logical_not(torch.isfinite(loss)),",
            "FloatingPointError,", '"non-finite loss {}",', "loss,", ")",
        ],
    ),
    "a `%` tuple: str() of a reduction moved to run time, a loop counter": (
        RaiseIf,
        """
        def sample(img, steps: int):
            for t in range(steps):
                img = img * 0.5
                if torch.isnan(img).any():
                    raise ValueError("NaN %s at step %d" % (str(img.sum()), t))
            return img
        """,
        "if torch.isnan",
        [
            "gbfix_raise_if_format(", "torch.isnan(img).any(),", "ValueError,", '"NaN %s at step %d",', "(img.sum(), t),",
            'cast={0: "str"},', "percent=True,", ")",
        ],
    ),
    "int() of a reduction the test computes, a size beside it": (
        RaiseIf,
        """
        class Head:
            def forward(self, logits, labels):
                if labels.max() >= logits.size(-1):
                    raise ValueError(f"label {int(labels.max())} out of range for {logits.size(-1)} classes")
                return logits
        """,
        "if labels.max()",
        [
            "gbfix_raise_if_format(", "labels.max() >= logits.size(-1),", "ValueError,",
            '"label {} out of range for {} classes",', "labels.max(),", "logits.size(-1),", 'cast={0: "int"},', ")",
        ],
    ),
    "`+` of text, str() and repr()": (
        RaiseIf,
        """
        def f(x):
            total = x.sum()
            y = x * 2
            if total > 10:
                raise OverflowError("sum " + str(total) + " of " + repr(y))
            return y
        """,
        "if total",
        [
            "gbfix_raise_if_format(", "total > 10,", "OverflowError,", '"sum {} of {}",', "total,", "y,",
            'cast={0: "str", 1: "repr"},', ")",
        ],
    ),
    "str.format, `{!r}` and a format spec": (
        RaiseIf,
        """
        def f(x):
            m = x.abs().amax()
            h = x.half()
            if m > 1e4:
                raise OverflowError("peak {:.1f} in {!r}".format(m, h))
            return h
        """,
        "if m > 1e4",
        ['gbfix_raise_if_format(m > 1e4, OverflowError, "peak {:.1f} in {!r}", m, h)'],
    ),
    "an assert: `.item()` in the message moved to run time": (
        AssertToRaiseIf,
        """
        def f(x):
            loss = x.mean()
            assert torch.isfinite(loss), f"loss {loss.item():.3f}"
            return loss
        """,
        "assert torch",
        [
            "if __debug__:", "gbfix_raise_if_format(", "torch.logical_not(torch.isfinite(loss)),", "AssertionError,",
            '"loss {:.3f}",', "loss,", 'cast={0: "item"},', ")",
        ],
    ),
}


@pytest.mark.parametrize("case", FORMAT_CASES)
def test_a_message_made_at_run_time(case):
    recipe, source, needle, lines = FORMAT_CASES[case]
    out = fix(source, recipe, needle)
    assert changed(body(source), out) == ["from ._gbfix import gbfix_raise_if_format", *lines]


# ---------------------------------------------------------------- assert-to-raise-if

ASSERT_CASES = {
    "`not`, an f-string of a parameter": (
        """
        def check_finite(t, name):
            assert not t.isnan().any(), f"{name} has NaNs"
            return t
        """,
        "assert not",
        {3: (ObservedCall((("t", ValueSpec("tensor")), ("name", ValueSpec("str"))), ValueSpec("tensor")),)},
        ["if __debug__:", 'gbfix_raise_if(t.isnan().any(), AssertionError, lambda: f"{name} has NaNs")'],
    ),
    "no message": (
        """
        def f(x):
            assert (x >= 0).all()
            return x
        """,
        "assert (x",
        None,
        ["if __debug__:", "gbfix_raise_if(torch.logical_not((x >= 0).all()), AssertionError)"],
    ),
    "`and` with a static part: the static part stays an assert": (
        """
        def f(x, mask):
            assert mask.dtype == torch.bool and mask.any(), "empty mask"
            return x
        """,
        "assert mask",
        None,
        ['assert mask.dtype == torch.bool, "empty mask"', "if __debug__:", 'gbfix_raise_if(torch.logical_not(mask.any()), AssertionError, "empty mask")'],
    ),
    "`or` with a static part: only where it does not hold": (
        """
        def f(x, mask):
            assert mask is None or mask.any(), "empty mask"
            return x
        """,
        "assert mask",
        None,
        ["if __debug__ and mask is not None:", 'gbfix_raise_if(torch.logical_not(mask.any()), AssertionError, "empty mask")'],
    ),
}


@pytest.mark.parametrize("case", ASSERT_CASES)
def test_assert_spellings(case):
    source, needle, observed, lines = ASSERT_CASES[case]
    out = fix(source, AssertToRaiseIf, needle, observed=observed)
    assert changed(body(source), out) == ["from ._gbfix import gbfix_raise_if", *lines]


def test_assert_keeps_its_comments():
    source = """
    def f(x):
        # the input must be clean
        assert not torch.isnan(x).any(), "NaN"  # cheap
        return x
    """
    text = body(source)
    line = text.splitlines()[4]
    out = rewrite_at(text, AssertToRaiseIf, 5, line.index("assert"), line.index("  # cheap"), "GB0170", path=PKG)
    assert "    # the input must be clean\n    if __debug__:\n        gbfix_raise_if(torch.isnan(x).any(), AssertionError, \"NaN\")  # cheap\n" in out


# ---------------------------------------------------------------- assert-item-to-raise-if

ITEM_CASES = {
    "max read, a config bound, a message": (
        "assert input_ids.max().item() < self.config.vocab_size, \"id out of range\"",
        [
            "gbfix_raise_if(", "torch.logical_not(input_ids.max().double() < self.config.vocab_size),", "AssertionError,",
            '"id out of range",', ")",
        ],
    ),
    "no message, the read on the right": (
        "assert 0 <= t.min().item()",
        ["gbfix_raise_if(torch.logical_not(0 <= t.min().double()), AssertionError)"],
    ),
    "a sum read, an f-string message": (
        'assert mask.sum().item() > 0, f"empty mask in {self.name}"',
        [
            "gbfix_raise_if(", "torch.logical_not(mask.sum().double() > 0),", "AssertionError,",
            'lambda: f"empty mask in {self.name}",', ")",
        ],
    ),
}


@pytest.mark.parametrize("case", ITEM_CASES)
def test_assert_item_spellings(case):
    line, calls = ITEM_CASES[case]
    source = f"""
    class M(torch.nn.Module):
        def forward(self, input_ids, t, mask):
            {line}
            return input_ids
    """
    out = rewrite_at(body(source), AssertItemToRaiseIf, 5, line.index(".item()") + 8, line.index(".item()") + 15, "GB0124", path=PKG)
    assert changed(body(source), out) == ["from ._gbfix import gbfix_raise_if", "if __debug__:", *calls]


def test_assert_item_declines_a_tensor_bound_and_a_tensor_message():
    source = """
    def f(t, limit):
        assert t.max().item() < limit.abs().sum(), "over"
        return t
    """
    ctx = site_context(body(source), 4, 17, 24, "GB0124", path=PKG)
    r = AssertItemToRaiseIf()
    assert r.propose(ctx) is None and "compared with a tensor" in r.declined
    # a message that formats a tensor is made at run time; one that may raise where the
    # assert holds is declined
    source = """
    def f(t):
        peak = t.max()
        assert t.max().item() < 10, f"peak {peak}"
        return t
    """
    out = rewrite_at(body(source), AssertItemToRaiseIf, 5, 17, 24, "GB0124", path=PKG)
    assert changed(body(source), out) == [
        "from ._gbfix import gbfix_raise_if_format", "if __debug__:", "gbfix_raise_if_format(",
        "torch.logical_not(t.max().double() < 10),", "AssertionError,", '"peak {}",', "peak,", ")",
    ]
    source = """
    def f(t):
        assert t.max().item() < 10, f"peak {t.abs().max()}"
        return t
    """
    ctx = site_context(body(source), 4, 17, 24, "GB0124", path=PKG)
    r = AssertItemToRaiseIf()
    assert r.propose(ctx) is None and "`t.abs().max()` calls `t.abs().max`, which may have effects or raise" in r.declined


# ---------------------------------------------------------------- declines

DECLINES = {
    "raise ... from ...": (
        """
        def f(x, err):
            if torch.isnan(x).any():
                raise ValueError("NaN") from err
            return x
        """,
        "`raise ... from ...`",
    ),
    "an exception instance built elsewhere": (
        """
        def f(x, err):
            if torch.isnan(x).any():
                raise err
            return x
        """,
        "may raise an exception instance built elsewhere",
    ),
    "a class on self": (
        """
        class M(torch.nn.Module):
            def forward(self, x):
                if torch.isnan(x).any():
                    raise self.Error("NaN")
                return x
        """,
        "`self.Error` is no builtin or module-level name",
    ),
    "keyword arguments": (
        """
        def f(x):
            if torch.isnan(x).any():
                raise ValueError("NaN", code=3)
            return x
        """,
        "keyword or starred arguments",
    ),
    "a message from a tensor method that may raise": (
        """
        def f(x):
            if (x < 0).any():
                raise ValueError(f"min {x.min()}")
            return x
        """,
        "the message's `x.min()` may return a tensor: its text is only known at run time, and the op takes text"
        " known while Dynamo traces; made at run time instead, `x.min()` calls `x.min`, which may have effects or"
        " raise: it would be evaluated where the test does not hold",
    ),
    "a tensor message reading a name bound only in the check's branch": (
        """
        def f(x):
            loss = (x**2).mean()
            if torch.isnan(x).any():
                peak = x.abs()
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite loss {peak}")
            return loss
        """,
        "reads `peak`, which may not be bound there",
    ),
    "inside a try": (
        """
        def f(x):
            try:
                if torch.isnan(x).any():
                    raise ValueError("NaN")
            except ValueError:
                x = torch.zeros_like(x)
            return x
        """,
        "inside a `try` block",
    ),
    "inside a with": (
        """
        def f(x):
            with torch.no_grad():
                if torch.isnan(x).any():
                    raise ValueError("NaN")
            return x
        """,
        "inside a `with` block",
    ),
    "a loop counter of no range": (
        """
        def f(x, names):
            for n in names:
                if torch.isnan(x).any():
                    raise ValueError(f"NaN in {n}")
            return x
        """,
        "the message's `n` is a local that may hold a tensor",
    ),
}


# A check of a loss whose message formats it, declined for its message: the raise, the reason.
LOSS_MESSAGE_DECLINES = {
    "two arguments": ('raise FloatingPointError("non-finite loss", loss)', "the exception is given more than one argument"),
    "a call of the user's": ("raise FloatingPointError(describe(loss))", "`describe(loss)` is no f-string, literal"),
    "a division": (
        'raise FloatingPointError(f"non-finite loss {loss / n}")',
        "`loss / n` divides or shifts, which may raise: it would be evaluated where the test does not hold",
    ),
    "a float() of the loss": (
        'raise FloatingPointError("non-finite loss %.3f" % loss)',
        "`loss` may be a tensor converted by float(), which warns once when it requires grad",
    ),
    "a list": (
        'raise FloatingPointError(f"non-finite loss {loss} in {[1, 2]}")',
        "`str([1, 2])` calls `str`, which may have effects or raise",
    ),
}


@pytest.mark.parametrize("case", LOSS_MESSAGE_DECLINES)
def test_declines_a_tensor_message_with_a_reason(case):
    raise_, why = LOSS_MESSAGE_DECLINES[case]
    source = f"""
    def describe(t):
        return f"loss {{t}}"


    def f(x, n: int):
        loss = (x**2).mean()
        if not torch.isfinite(loss):
            {raise_}
        return loss
    """
    reason = declined(source, RaiseIf, "if not") or ""
    assert "its text is only known at run time" in reason and f"made at run time instead, {why}" in reason


@pytest.mark.parametrize("case", DECLINES)
def test_declines_with_a_reason(case):
    source, why = DECLINES[case]
    assert why in (declined(source, RaiseIf, "if not" if "if not" in source else "if ") or "")


def test_declines_a_bare_raise_and_a_body_of_more():
    source = """
    def f(x):
        try:
            x = x + 1
        except ValueError:
            if torch.isnan(x).any():
                raise
        return x
    """
    assert declined(source, RaiseIf, "if torch") is not None  # bare raise (and in a try)
    source = """
    def f(x):
        if torch.isnan(x).any():
            print("NaN")
            raise ValueError("NaN")
        return x
    """
    assert fix(source, RaiseIf, "if torch") is None


def test_assert_declines_a_shared_line_and_a_shadowed_assertion_error():
    source = """
    def f(x):
        y = x; assert not x.isnan().any(), "NaN"
        return y
    """
    assert "shares its line" in declined(source, AssertToRaiseIf, "assert not")
    source = """
    AssertionError = RuntimeError


    def f(x):
        assert not x.isnan().any(), "NaN"
        return x
    """
    assert "bound to something else" in declined(source, AssertToRaiseIf, "assert not")


def test_observes_the_function_whose_parameter_the_message_reads():
    source = body(
        """
        def check_finite(x, where):
            if torch.isnan(x).any():
                raise ValueError(f"NaN in activations ({where})")
            return x
        """
    )
    ctx = site_context(source, 4, 4, 28, "GB0170", path=PKG)
    fn = RaiseIf().observe(ctx)
    assert fn is not None and fn.name.value == "check_finite"
    # seen as text: taken; seen as a tensor: declined
    text = {3: (ObservedCall((("x", ValueSpec("tensor")), ("where", ValueSpec("str"))), ValueSpec("tensor")),)}
    assert fix(source, RaiseIf, "if torch", observed=text) is not None
    # seen as a tensor: the message is made at run time; as something else: declined
    tensor = {3: (ObservedCall((("x", ValueSpec("tensor")), ("where", ValueSpec("tensor"))), ValueSpec("tensor")),)}
    assert "gbfix_raise_if_format(" in fix(source, RaiseIf, "if torch", observed=tensor)
    other = {3: (ObservedCall((("x", ValueSpec("tensor")), ("where", ValueSpec("other"))), ValueSpec("tensor")),)}
    assert "`where` was ['other'] in an uncompiled run" in declined(source, RaiseIf, "if torch", observed=other)


def test_a_reduction_in_the_message_is_made_at_run_time():
    # `labels.max()` raises on an empty tensor, where the test does not hold: the op takes
    # `labels` and makes max() and item() there, where the test held ("max,item"); the same
    # under int() ("min,int")
    source = body(
        """
        def check(labels, n: int):
            if torch.any(labels >= n):
                raise ValueError(f"label {labels.max().item()} out of range, {int(labels.min())}")
            return labels
        """
    )
    seen = {3: (ObservedCall((("labels", ValueSpec("tensor")), ("n", ValueSpec("int"))), ValueSpec("tensor")),)}
    assert changed(source, fix(source, RaiseIf, "if torch", observed=seen)) == [
        "from ._gbfix import gbfix_raise_if_format", "gbfix_raise_if_format(", "torch.any(labels >= n),", "ValueError,",
        '"label {} out of range, {}",', "labels,", "labels,", 'cast={0: "max,item", 1: "min,int"},', ")",
    ]


@pytest.mark.parametrize("backend", [None, "eager"])
def test_a_reduction_cast_is_made_only_where_the_test_holds(backend):
    import torch

    check = generated_function(op_helpers.RAISE_FORMAT)

    def run(cond, labels):
        check(cond, ValueError, "label {} of {}", labels, labels.numel(), cast={0: "max,item"})
        return labels + 1

    fn = run if backend is None else torch.compile(run, backend=backend, fullgraph=True)
    empty = torch.empty(0, dtype=torch.long)
    assert fn(torch.tensor(False), empty).numel() == 0  # no max() of the empty tensor
    with pytest.raises(ValueError, match="^label 7 of 2$"):
        fn(torch.tensor(True), torch.tensor([3, 7]))


def test_registry_order():
    """Safe, before the unsafe checks, and first among the safe recipes that answer an
    `if ...: raise` and an assert on an `.item()` read (capture-scalar-outputs, safe,
    also takes the assert: a failing check then raises RuntimeError)."""
    names = [r.name for r in all_recipes()]
    for recipe in (RaiseIf, AssertToRaiseIf, AssertItemToRaiseIf):
        assert recipe.safety == "safe"
    gb0170 = [r.name for r in candidates("GB0170", unsafe=True)]
    assert gb0170.index("raise-if") < gb0170.index("branch-to-where") < gb0170.index("branch-to-check")
    assert gb0170.index("assert-to-raise-if") < gb0170.index("branch-to-where")
    gb0124 = [r.name for r in candidates("GB0124", unsafe=True)]
    assert gb0124.index("assert-item-to-raise-if") < gb0124.index("capture-scalar-outputs") < gb0124.index("assert-item-to-tensor")
    # also inside a library class's method: listed before library-class
    assert names.index("raise-if") < names.index("library-class")


# ---------------------------------------------------------------- real runs: the failure path

# The original program: each check guards the code after it. Each model runs once with
# good inputs (compiling it), then once per input that fails one of its checks.
ORIGINAL = """\
import json
import sys

import torch


class BadInput(Exception):
    pass


def check(t, name):
    assert not t.isnan().any(), f"{name} has NaNs"


class After(torch.nn.Module):
    \"\"\"The checks first; state updates after them (BatchNorm, a counter, a parameter).\"\"\"

    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(4)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(()))
        self.vocab = 10

    def forward(self, x, ids):
        print(f"forward {x.shape[0]}")
        if (ids < 0).any():
            raise ValueError(f"negative ids (vocab_size {self.vocab})")
        assert ids.max().item() < self.vocab, "id out of range"
        if torch.isinf(x).any() or torch.isnan(x).any():
            raise BadInput("input contains non-finite values")
        print("checked")
        with torch.no_grad():
            self.count.add_(1)
            self.lin.weight.mul_(0.5)
        return self.lin(self.bn(x))


class Before(torch.nn.Module):
    \"\"\"State updates first (BatchNorm in training, a counter), then the check.\"\"\"

    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(4)
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x, ids):
        with torch.no_grad():
            self.count.add_(1)
        y = self.bn(x * 2)
        print("normed")
        check(y, "normed")
        print("checked")
        return y.relu()


def outcome(model, x, ids):
    try:
        model(x, ids)
        return None
    except Exception as e:  # the outcome compared
        return [type(e).__name__, list(e.args)]


def main(backend, fullgraph, train):
    results = {}
    for kind, model in (("after", After), ("before", Before)):
        print(f"=== {kind}")
        torch.manual_seed(0)
        net = model()
        net.train(train)
        run = net if backend == "none" else torch.compile(net, backend=backend, fullgraph=fullgraph)
        good, ids = torch.randn(3, 4), torch.tensor([1, 2, 3])
        nan = good.clone().index_fill_(1, torch.tensor([2]), float("nan"))
        bad = {"nan": (nan, ids), "negative": (good, torch.tensor([1, -1, 3])), "far": (good, torch.tensor([1, 17, 3]))}
        with torch.set_grad_enabled(train):
            run(good, ids)
            for case, (x, i) in list(bad.items())[: 3 if kind == "after" else 1]:
                state = {k: v.clone() for k, v in net.state_dict().items()}
                print(f"--- {case}")
                got = outcome(run, x, i)
                changed = sorted(
                    k for k, v in net.state_dict().items()
                    if not torch.allclose(v.double(), state[k].double(), rtol=0, atol=0, equal_nan=True)
                )
                results[f"{kind}/{case}"] = {"raised": got, "changed": changed, "grad": torch.is_grad_enabled()}
    print("RESULT " + json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1")
"""


def rewritten() -> str:
    """The original with every check and print rewritten by the recipes, as gbfix writes them."""
    source = ORIGINAL
    script = {"path": Path("/virtual/prog.py")}
    observed = {11: (ObservedCall((("t", ValueSpec("tensor")), ("name", ValueSpec("str"))), ValueSpec("none")),)}
    source = rewrite_line(source, AssertToRaiseIf, "assert not t.isnan()", "GB0170", observed=observed, **script)
    source = rewrite_line(source, RaiseIf, "if (ids < 0)", "GB0170", **script)
    lines = source.splitlines()
    at = next(i for i, line in enumerate(lines, 1) if "assert ids.max().item()" in line)
    col = lines[at - 1].index(".item()")
    source = rewrite_at(source, AssertItemToRaiseIf, at, col + 1, col + 7, "GB0124", **script)
    source = rewrite_line(source, RaiseIf, "if torch.isinf(x)", "GB0170", **script)
    for needle, nth in (('print(f"forward', 0), ('print("checked")', 0), ('print("normed")', 0), ('print("checked")', 1)):
        source = rewrite_line(source, PrintToOp, needle, "GB0059", nth, **script)  # nth: past the rewritten one
    for gone in ("assert not t.isnan()", "assert ids.max()", "raise ValueError(f", "raise BadInput(", 'print("checked")', 'print("normed")'):
        assert gone not in source.replace('gbfix_print("', ""), gone
    return source


# (backend, fullgraph, training)
CONFIGS = [
    ("eager", True, True), ("eager", False, False),
    ("aot_eager", True, True), ("aot_eager", True, False),
    ("inductor", True, True), ("inductor", True, False), ("inductor", False, True),
]
ORIGINALS = [("none", True, True), ("none", True, False)]


def _two_at_a_time(folder: Path, commands: dict[tuple, list[str]]) -> dict[tuple, tuple[list[str], dict]]:
    """{key: (stdout lines, the RESULT line's JSON)}: each command a process of its own in
    ``folder``, two at a time, with an inductor cache of the folder's own."""
    import os

    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor")}
    procs: dict[tuple, subprocess.Popen] = {}
    for key, args in commands.items():
        running = [p for p in procs.values() if p.poll() is None]
        if len(running) >= 2:
            running[0].wait()
        procs[key] = subprocess.Popen([sys.executable, *args], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out = {}
    for key, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, (key, stderr[-3000:])
        *lines, result = stdout.splitlines()
        out[key] = (lines, json.loads(result.removeprefix("RESULT ")))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{config: (stdout lines, results)}: the original uncompiled (the reference), and the
    rewritten program compiled per config; each a process of its own, two at a time."""
    folder = tmp_path_factory.mktemp("raise_if_runs")
    (folder / "original.py").write_text(ORIGINAL, encoding="utf-8")
    (folder / "rewritten.py").write_text(rewritten(), encoding="utf-8")
    return _two_at_a_time(folder, {
        config: ["original.py" if config[0] == "none" else "rewritten.py", config[0], str(int(config[1])), str(int(config[2]))]
        for config in [*ORIGINALS, *CONFIGS]
    })


def _ids(config: tuple) -> str:
    return f"{config[0]}-fullgraph{int(config[1])}-train{int(config[2])}"


def test_the_reference_fails_each_check(runs):
    """The original, uncompiled: every case fails the check meant for it."""
    lines, ref = runs[("none", True, True)]
    assert {case: r["raised"] for case, r in ref.items()} == {
        "after/nan": ["BadInput", ["input contains non-finite values"]],
        "after/negative": ["ValueError", ["negative ids (vocab_size 10)"]],
        "after/far": ["AssertionError", ["id out of range"]],
        "before/nan": ["AssertionError", ["normed has NaNs"]],
    }
    assert lines == [
        "=== after", "forward 3", "checked", "--- nan", "forward 3", "--- negative", "forward 3", "--- far", "forward 3",
        "=== before", "normed", "checked", "--- nan", "normed",
    ]
    assert ref["before/nan"]["changed"] == ["bn.num_batches_tracked", "bn.running_mean", "bn.running_var", "count"]


@pytest.mark.parametrize("config", CONFIGS, ids=_ids)
def test_failing_checks_raise_the_same_exception_and_print_the_same(runs, config):
    """Class and arguments of the exception, and the prints: those before the check come
    out, those after it do not (the raise op writes the print op's sink); grad mode as it was."""
    lines, results = runs[config]
    ref_lines, ref = runs[("none", True, config[2])]
    assert {case: r["raised"] for case, r in results.items()} == {case: r["raised"] for case, r in ref.items()}
    assert lines == ref_lines
    assert {case: r["grad"] for case, r in results.items()} == {case: r["grad"] for case, r in ref.items()}


@pytest.mark.parametrize("config", [c for c in CONFIGS if c[0] == "eager"], ids=_ids)
def test_eager_backend_keeps_the_module_state_of_the_failure_path(runs, config):
    """The eager backend runs the graph's ops in order: updates before the check are made,
    those after it are not, as in the original (BatchNorm's statistics, a counter, a
    parameter updated in place without an optimizer)."""
    _, results = runs[config]
    _, ref = runs[("none", True, config[2])]
    assert {case: r["changed"] for case, r in results.items()} == {case: r["changed"] for case, r in ref.items()}


@pytest.mark.parametrize("config", [c for c in CONFIGS if c[0] != "eager"], ids=_ids)
def test_aot_backends_skip_the_updates_after_a_failing_check_that_depend_on_it(runs, config):
    """After the check, nothing the original skipped is changed, except that inductor in
    training may run an update that depends on nothing before it (a counter's add_,
    BatchNorm's num_batches_tracked) in a kernel before the op: the limit rules/GB0170.md
    states. BatchNorm's statistics and the parameter stay as they were."""
    _, results = runs[config]
    backend, _, train = config
    independent = {"count", "bn.num_batches_tracked"} if backend == "inductor" and train else set()
    for case in ("after/nan", "after/negative", "after/far"):
        assert set(results[case]["changed"]) <= independent, case
    assert all(r["changed"] == [] for case, r in runs[("none", True, train)][1].items() if case.startswith("after/"))


@pytest.mark.parametrize("config", [c for c in CONFIGS if c[0] != "eager"], ids=_ids)
def test_aot_backends_drop_updates_made_before_a_failing_check(runs, config):
    """The other side of that limit: AOTAutograd applies a graph's in-place updates of its
    inputs once the graph has run, so those the original made before the check are not
    all made when the op raises (pinned: the rule page says so)."""
    _, results = runs[config]
    _, ref = runs[("none", True, config[2])]
    assert ref["before/nan"]["changed"]
    assert set(results["before/nan"]["changed"]) < set(ref["before/nan"]["changed"])


TRY = """\
import torch


def check(x):
    if torch.isnan(x).any():
        raise ValueError("NaN")


def guarded(x):
    try:
        check(x)
    except ValueError:
        return torch.zeros_like(x)
    return x + 1


def no_grad(x):
    with torch.no_grad():
        check(x)
        y = x * 2
    return y + 1


if __name__ == "__main__":
    import sys

    for fn in (guarded, no_grad):
        if sys.argv[1] != "none":
            fn = torch.compile(fn, backend=sys.argv[1])
        fn(torch.ones(2))
        try:
            print("returned", fn(torch.tensor([1.0, float("nan")])).tolist())
        except ValueError as e:
            print("raised", e)
        print("grad enabled", torch.is_grad_enabled())
"""


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_check_in_a_callers_try_or_with_keeps_its_break(tmp_path, backend):
    """A check called inside a `try` or `with` (in a frame the recipe does not see): the
    helper sees it while Dynamo traces and breaks there, as the original did, so the
    handler runs and the grad mode is put back (the op's exception would skip both)."""
    source = rewrite_line(TRY, RaiseIf, "if torch.isnan", "GB0170", path=Path("/virtual/try.py"))
    (tmp_path / "original.py").write_text(TRY, encoding="utf-8")
    (tmp_path / "rewritten.py").write_text(source, encoding="utf-8")
    got = [
        subprocess.run([sys.executable, script, b], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        for script, b in (("original.py", "none"), ("rewritten.py", backend))
    ]
    assert all(g.returncode == 0 for g in got), [g.stderr[-2000:] for g in got]
    assert got[0].stdout == "returned [0.0, 0.0]\ngrad enabled True\nraised NaN\ngrad enabled True\n"
    assert got[1].stdout == got[0].stdout


# ---------------------------------------------------------------- real runs: a message made at run time

# Checks whose messages format tensors: 0-dim through Tensor.__format__, `%s` of str(),
# `+ repr()`, and `{!r}` of a loss that requires grad in training (its grad_fn is in the
# text: there the helper keeps the `if`, and the break, as written). The Linear's weights
# are set so that each input fails the check meant for it.
FORMAT_ORIGINAL = """\
import json
import sys

import torch
from torch._dynamo.utils import counters


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        with torch.no_grad():
            self.lin.weight.fill_(0.25)
            self.lin.bias.zero_()

    def forward(self, x, y):
        pred = self.lin(x).squeeze(-1)
        loss = ((pred - y) ** 2).mean()
        print("loss computed")
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss {loss}")
        peak = pred.abs().amax()
        if peak > 100:
            raise OverflowError("peak %d of %s" % (peak, str(pred.detach())))
        low = pred.detach()
        if (low < -50).any():
            raise ValueError("low " + repr(low))
        if loss > 1000:
            raise ArithmeticError(f"loss {loss!r}")
        print("checked")
        return loss


def main(backend, train):
    inputs = {
        "good": torch.ones(2, 4),
        "nan": torch.tensor([[1.0, float("nan"), 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]),
        "peak": torch.full((2, 4), 500.0),
        "low": torch.full((2, 4), -80.0),
        "loss": torch.full((2, 4), 40.0),
    }
    torch.manual_seed(0)
    net = Net().train(train)
    run = net if backend == "none" else torch.compile(net, backend=backend)
    out = {}
    with torch.set_grad_enabled(train):
        for case, x in inputs.items():
            print(f"--- {case}")
            try:
                run(x, torch.full((2,), -10.0))
                out[case] = None
            except Exception as e:  # the outcome compared
                out[case] = [type(e).__name__, list(e.args)]
    out["breaks"] = sum(counters["graph_break"].values())
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "1")
"""


def _format_rewritten() -> str:
    source = FORMAT_ORIGINAL
    script = {"path": Path("/virtual/prog.py")}
    for needle in ("if not torch.isfinite(loss)", "if peak > 100", "if (low < -50)", "if loss > 1000"):
        source = rewrite_line(source, RaiseIf, needle, "GB0170", **script)
    for needle in ('print("loss computed")', 'print("checked")'):
        source = rewrite_line(source, PrintToOp, needle, "GB0059", **script)
    assert source.count("    gbfix_raise_if_format(") == 4 and "raise FloatingPointError(f" not in source
    return source


@pytest.fixture(scope="module")
def format_runs(tmp_path_factory):
    """{(program, backend, train): (lines, results)}: the original uncompiled and on inductor,
    the rewritten program uncompiled and compiled (eager, inductor), training and not."""
    folder = tmp_path_factory.mktemp("raise_if_format_runs")
    (folder / "original.py").write_text(FORMAT_ORIGINAL, encoding="utf-8")
    (folder / "rewritten.py").write_text(_format_rewritten(), encoding="utf-8")
    configs = [  # the original on the eager backend is the original uncompiled: not run
        (program, backend, train)
        for program in ("original", "rewritten")
        for backend in ("none", "eager", "inductor")
        for train in (True, False)
        if (program, backend) != ("original", "eager") and (program, backend, train) != ("rewritten", "none", False)
    ]
    return _two_at_a_time(folder, {c: [f"{c[0]}.py", c[1], str(int(c[2]))] for c in configs})


def test_a_message_made_at_run_time_reference(format_runs):
    """The original uncompiled: each input fails its check, the message formats the tensor
    as Python formats it (a 0-dim tensor as a number; str / repr as `tensor(...)`)."""
    lines, ref = format_runs[("original", "none", True)]
    assert ref == {
        "good": None,
        "nan": ["FloatingPointError", ["non-finite loss nan"]],
        "peak": ["OverflowError", ["peak 500 of tensor([500., 500.])"]],
        "low": ["ValueError", ["low tensor([-80., -80.])"]],
        "loss": ["ArithmeticError", ["loss tensor(2500., grad_fn=<MeanBackward0>)"]],
        "breaks": 0,
    }
    assert format_runs[("original", "none", False)][1]["loss"] == ["ArithmeticError", ["loss tensor(2500.)"]]
    assert lines == [
        "--- good", "loss computed", "checked", "--- nan", "loss computed", "--- peak", "loss computed",
        "--- low", "loss computed", "--- loss", "loss computed",
    ]


@pytest.mark.parametrize("backend", ["none", "eager", "inductor"])
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_a_message_made_at_run_time_raises_what_the_original_raised(format_runs, backend, train):
    """The rewritten program raises the original's class with the original's text and
    prints the same, on every backend; in the graph (no break left), except the `{!r}` of
    a loss that requires grad in training: there the helper keeps the `if` (one break), and
    the text is what the original compiled program gave (inductor's loss comes out of a
    compiled graph: its grad_fn is AOTAutograd's), which the op's detached copy of the loss
    could not give."""
    if backend == "none" and not train:
        pytest.skip("the rewritten program uncompiled: one mode is enough")
    lines, got = format_runs[("rewritten", backend, train)]
    original_lines, original = format_runs[("original", "none" if backend == "eager" else backend, train)]
    reference_lines, reference = format_runs[("original", "none", train)]
    assert lines == original_lines == reference_lines
    assert got == {**original, "breaks": got["breaks"]}
    by_text = train and backend == "inductor"
    assert {case for case in got if case != "breaks" and got[case] != reference[case]} == ({"loss"} if by_text else set())
    if backend != "none":
        assert (got["breaks"] > 0) is train  # the `{!r}` check in training only
    if backend == "inductor":
        assert original["breaks"] > 0


# ---------------------------------------------------------------- the loop counters a message may read

COUNTERS = {
    "for t in range(n)": True,
    "for t in reversed(range(n))": True,
    "for t, x in enumerate(xs)": True,
    "for x, t in enumerate(xs)": False,  # the item, not the index
    "for t in xs": False,
    "for t in sorted(range(n))": False,
}


@pytest.mark.parametrize("loop", COUNTERS)
def test_range_counter(loop):
    from gbfix.recipes.analysis import range_counter

    source = body(
        f"""
        def f(n, xs):
            {loop}:
                print(f"step {{t}}")
        """
    )
    ctx = site_context(source, 5, 8, 26, "GB0059")
    name = next(n for n in (ctx.node, *ctx.ancestors()) if isinstance(n, cst.Call))
    field = name.args[0].value.parts[1].expression
    assert field.value == "t" and range_counter(ctx, field) is COUNTERS[loop]


def test_range_counter_shadowed_or_rebound():
    from gbfix.recipes.analysis import range_counter

    for source in (
        """
        range = lambda n: [torch.ones(1)] * n
        def f(n):
            for t in range(n):
                print(f"step {t}")
        """,
        """
        def f(n, x):
            for t in range(n):
                t = x
                print(f"step {t}")
        """,
    ):
        text = body(source)
        line = next(i for i, ln in enumerate(text.splitlines(), 1) if "print(" in ln)
        ctx = site_context(text, line, 8, 26, "GB0059")
        call = next(n for n in (ctx.node, *ctx.ancestors()) if isinstance(n, cst.Call))
        assert range_counter(ctx, call.args[0].value.parts[1].expression) is False
