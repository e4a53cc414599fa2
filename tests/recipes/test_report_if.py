"""report-if: `if <tensor>: <reports>` as conditional report helpers (static tests, no torch).

The module under test sits in a package, so the helpers go to its generated
``_gbfix.py`` and the rewritten module only imports them: the expected sources below
are the whole module. A script keeps the helpers in the file (its own test).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from gbfix import engine, generated
from gbfix.entry import parse
from gbfix.recipes import message, op_helpers
from gbfix.recipes.base import Decline
from gbfix.recipes.report_if import ReportIf
from gbfix.recipes.tree import walk
from gbfix.records import ObservedCall, ValueSpec
from tests.helpers import generated_function, rewrite_at, site_context

HEAD = "import logging\nimport math\nimport warnings\n\nimport torch\n\nlogger = logging.getLogger(__name__)\n\n\n"


@pytest.fixture(scope="module")
def pkg(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("reportif") / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    return root / "model.py"


def _site(source: str, needle: str) -> tuple[int, int, int]:
    """The span Dynamo reports for an `if` test: the needle, on the line of the `if`."""
    lines = source.splitlines()
    line = next(i for i, text in enumerate(lines, 1) if needle in text and text.lstrip().startswith(("if ", "elif ")))
    col = lines[line - 1].index(needle)
    return line, col, col + len(needle)


def _rewrite(body: str, needle: str, path: Path, observed: dict | None = None, **kinds: str) -> str | None:
    """The module rewritten at the `if` of ``needle``; ``kinds``: the parameters of the
    function an uncompiled run showed (name -> kind: "int", "str", "tensor", ...)."""
    source = HEAD + textwrap.dedent(body).lstrip("\n")
    if kinds:
        line = next(i for i, text in enumerate(source.splitlines(), 1) if text.lstrip().startswith("def "))
        observed = {line: (ObservedCall(tuple((n, ValueSpec(k)) for n, k in kinds.items()), ValueSpec("tensor")),)}
    return rewrite_at(source, ReportIf, *_site(source, needle), "GB0170", path=path, observed=observed)


def _declined(body: str, needle: str, path: Path) -> str | None:
    """Why the recipe declines (None: it proposed an edit, or found nothing to take)."""
    source = HEAD + textwrap.dedent(body).lstrip("\n")
    recipe = ReportIf()
    ctx = site_context(source, *_site(source, needle), "GB0170", path=path)
    assert recipe.propose(ctx) is None
    return recipe.declined


def _expect(helpers: str, body: str) -> str:
    head = HEAD.replace("import torch\n", f"import torch\nfrom ._gbfix import {helpers}\n")
    return head + textwrap.dedent(body).lstrip("\n")


# --- print -----------------------------------------------------------------------

PRINTS = {
    "inline comparison, an f-string with a format spec": (
        """
        def step(it, grad_norm):
            if grad_norm > 10.0:
                print(f"iter {it}: large grad norm {grad_norm:.3f}")
            return grad_norm
        """,
        "grad_norm > 10.0",
        """
        def step(it, grad_norm):
            gbfix_print_if(grad_norm > 10.0, "iter {}: large grad norm {:.3f}", it, grad_norm)
            return grad_norm
        """,
    ),
    "a local flag": (
        """
        def step(x):
            bad = torch.isnan(x).any()
            if bad:
                print("NaN in x")
            return x
        """,
        "bad",
        """
        def step(x):
            bad = torch.isnan(x).any()
            gbfix_print_if(bad, "NaN in x")
            return x
        """,
    ),
    "`not` of a torch predicate (a literal message)": (
        """
        def step(loss):
            if not torch.isfinite(loss):
                print("warning: non-finite loss")
            return loss
        """,
        "not torch.isfinite(loss)",
        """
        def step(loss):
            gbfix_print_if(torch.logical_not(torch.isfinite(loss)), "warning: non-finite loss")
            return loss
        """,
    ),
    "a static part kept as an `if`, `.item()` moved to run time": (
        """
        class Net(torch.nn.Module):
            def forward(self, loss):
                if self.training and loss > 10:  # spike
                    print(f"loss spike {loss.item():.2f}")
                return loss
        """,
        "self.training and loss > 10",
        """
        class Net(torch.nn.Module):
            def forward(self, loss):
                if self.training:  # spike
                    gbfix_print_if(loss > 10, "loss spike {:.2f}", loss, cast={0: "item"})
                return loss
        """,
    ),
    "a `%` message, several arguments and a separator": (
        """
        def step(x):
            if (x.abs() > 1e4).any():
                print("total %.1f" % x.abs().sum())
                print("rows", (x.abs() > 1e4).sum(-1), sep=": ")
            return x
        """,
        "(x.abs() > 1e4).any()",
        """
        def step(x):
            pred = (x.abs() > 1e4).any()
            gbfix_print_if(pred, "total %.1f", x.abs().sum(), percent=True)
            gbfix_print_if(pred, "rows: {!s}", (x.abs() > 1e4).sum(-1))
            return x
        """,
    ),
    "str.format, an else of reports": (
        """
        def step(x):
            if x.mean() > 0:
                print("mean {:.2f} of {}".format(x.mean(), x.numel()))
            else:
                print("not positive")
            return x
        """,
        "x.mean() > 0",
        """
        def step(x):
            pred = x.mean() > 0
            gbfix_print_if(pred, "mean {:.2f} of {}", x.mean(), x.numel())
            gbfix_print_if(torch.logical_not(pred), "not positive")
            return x
        """,
    ),
    "a one-line `if` (the `elif` of a Python test), int() at run time": (
        """
        def step(x, verbose):
            if verbose > 1:
                print("verbose")
            elif torch.isnan(x).any(): print(f"{int(torch.isnan(x).sum())} NaN")
            return x
        """,
        "torch.isnan(x).any()",
        """
        def step(x, verbose):
            if verbose > 1:
                print("verbose")
            else: gbfix_print_if(torch.isnan(x).any(), "{} NaN", torch.isnan(x).sum(), cast={0: "int"})
            return x
        """,
    ),
}


@pytest.mark.parametrize("case", PRINTS)
def test_print(case, pkg):
    before, needle, after = PRINTS[case]
    assert _rewrite(before, needle, pkg, it="int", verbose="int") == _expect("gbfix_print_if", after)


def test_round_in_a_message_is_made_at_run_time(pkg):
    # round(v, n) of a read (a cast of a cast: innermost first), of a number, without digits
    before = """
    def clip_report(total, max_norm):
        if total > max_norm:
            print("clipping: norm", round(total.item(), 3), "of", round(max_norm, -1), round(max_norm))
        return total
    """
    after = """
    def clip_report(total, max_norm):
        gbfix_print_if(
            total > max_norm,
            "clipping: norm {!s} of {!s} {!s}",
            total,
            max_norm,
            max_norm,
            cast={0: "item,round:3", 1: "round:-1", 2: "round"},
        )
        return total
    """
    assert _rewrite(before, "total > max_norm", pkg, total="tensor", max_norm="float") == _expect("gbfix_print_if", after)


def test_a_name_the_test_binds_is_bound_for_the_message(pkg):
    # `:=` in the test runs before the message's values (the test is the helper's first
    # argument); not on the right of an `and`, which may not run
    before = """
    def step(x):
        if (total := x.sum()) > 10:
            print("total", total)
        return x
    """
    after = """
    def step(x):
        gbfix_print_if((total := x.sum()) > 10, "total {!s}", total)
        return x
    """
    assert _rewrite(before, "(total := x.sum()) > 10", pkg) == _expect("gbfix_print_if", after)
    for test, bound in [
        ("(total := x.sum()) > 10 and x.any()", True),
        ("x.any() and (total := x.sum()) > 10", False),
        ("(total := x.sum()) if x.any() else 0", False),
    ]:
        source = f"def step(x):\n    if {test}:\n        print(total)\n"
        ctx = site_context(source, 2, 7, 7 + len(test), "GB0170")
        if_node = next(n for n in walk(ctx.module) if isinstance(n, cst.If))
        assert (message.risk(ctx, cst.Name("total"), if_node, if_node.test) is None) == bound, test


def test_a_parameter_in_the_message_is_observed_first(pkg):
    # `it` may be anything the op cannot take (a list, a torch.Size): an uncompiled run shows it
    before, needle, _ = PRINTS["inline comparison, an f-string with a format spec"]
    source = HEAD + textwrap.dedent(before).lstrip("\n")
    recipe = ReportIf()
    ctx = site_context(source, *_site(source, needle), "GB0170", path=pkg)
    assert recipe.observation(ctx) is not None
    assert recipe.propose(ctx) is None and "`it` in `print(f" in recipe.declined and "not seen" in recipe.declined
    assert _rewrite(before, needle, pkg, it="list") is None
    # the tested value needs no run: the test broke on it, so it is a tensor
    assert _rewrite(before, needle, pkg, it="int", grad_norm="other") is not None


# --- warnings.warn ----------------------------------------------------------------

WARNS = {
    "a `%` message (switch_moe): the test takes the `if` line, the warning keeps its own": (
        """
        def entropy_check(route_prob):
            ent = -(route_prob * route_prob.clamp_min(1e-9).log()).sum(-1).mean()
            if ent < 0.1 * math.log(route_prob.shape[-1]):
                warnings.warn("router collapsed: entropy %.3f" % ent)
            return ent
        """,
        "ent < 0.1 * math.log(route_prob.shape[-1])",
        """
        def entropy_check(route_prob):
            ent = -(route_prob * route_prob.clamp_min(1e-9).log()).sum(-1).mean()
            pred = ent < 0.1 * math.log(route_prob.shape[-1])
            gbfix_warn_if(pred, "router collapsed: entropy %.3f", ent, percent=True)
            return ent
        """,
    ),
    "an f-string with int() of a sum, `.any()` of a local": (
        """
        def attend(scores):
            fully_masked = torch.isinf(scores).all(dim=-1)
            if fully_masked.any():
                warnings.warn(f"{int(fully_masked.sum())} rows are fully masked")
            return scores.softmax(-1)
        """,
        "fully_masked.any()",
        """
        def attend(scores):
            fully_masked = torch.isinf(scores).all(dim=-1)
            pred = fully_masked.any()
            gbfix_warn_if(pred, "{} rows are fully masked", fully_masked.sum(), cast={0: "int"})
            return scores.softmax(-1)
        """,
    ),
    "torch.isnan(...).any(), a category and a stacklevel (the caller's line: no `pred`)": (
        """
        def step(sample, t):
            if torch.isnan(sample).any():
                warnings.warn(f"NaN in sample at t={t}", RuntimeWarning, stacklevel=2)
            return sample
        """,
        "torch.isnan(sample).any()",
        """
        def step(sample, t):
            gbfix_warn_if(
                torch.isnan(sample).any(),
                "NaN in sample at t={}",
                t,
                category=RuntimeWarning,
                stacklevel=2,
            )
            return sample
        """,
    ),
    "str.format of a float(), under a static part": (
        """
        def step(x, check):
            if check and x.std() < 1e-6:
                warnings.warn("collapsed: std {:.2e}".format(float(x.std())), UserWarning)
            return x
        """,
        "check and x.std() < 1e-6",
        """
        def step(x, check):
            if check:
                gbfix_warn_if(
                    x.std() < 1e-6,
                    "collapsed: std {:.2e}",
                    x.std(),
                    cast={0: "float"},
                    category=UserWarning,
                )
            return x
        """,
    ),
    "a body warn-to-op rewrote already (wav2vec_mask), braces in the text": (
        """
        from ._gbfix import gbfix_warn


        def forward(input_values):
            if input_values.abs().max() > 1.0:
                gbfix_warn("input_values not normalized to {-1, 1}")
            return input_values
        """,
        "input_values.abs().max() > 1.0",
        """
        from ._gbfix import gbfix_warn, gbfix_warn_if


        def forward(input_values):
            pred = input_values.abs().max() > 1.0
            gbfix_warn_if(pred, "input_values not normalized to {{-1, 1}}")
            return input_values
        """,
    ),
}


def _warn_source(after: str) -> str:
    """The expected module: its own import from the generated module, or the one added."""
    if "from ._gbfix import" in after:
        return HEAD + textwrap.dedent(after).lstrip("\n")
    return _expect("gbfix_warn_if", after)


def test_str_and_repr_in_a_message_are_made_at_run_time(pkg):
    # `str(t)` / `repr(t)` (also in a `+` of text) are casts the op applies where the test
    # holds, as int(t) is; `str(x.shape)` stays a value (text while Dynamo traces); a loop
    # counter over range is an int
    before = """
    def step(x, steps: int):
        for i in range(steps):
            total = x.sum()
            if total > 10:
                warnings.warn("sum " + str(total) + " at " + repr(i))
            if x.isnan().any():
                print(f"NaN in {str(x.shape)} at {i}: {repr(total)}")
        return x
    """
    warned = _rewrite(before, "total > 10", pkg)
    assert '        pred = total > 10\n        gbfix_warn_if(pred, "sum {} at {}", total, i, cast={0: "str", 1: "repr"})\n' in warned
    printed = _rewrite(before, "x.isnan().any()", pkg)
    call = 'gbfix_print_if(x.isnan().any(), "NaN in {} at {}: {}", str(x.shape), i, total, cast={2: "repr"},)'
    assert call.replace(" ", "") in "".join(printed.split())  # laid out one argument a line


@pytest.mark.parametrize("case", WARNS)
def test_warn(case, pkg):
    before, needle, after = WARNS[case]
    assert _rewrite(before, needle, pkg, t="int") == _warn_source(after)


def test_warn_message_from_a_helpers_parameter(pkg):
    # `check(x, msg)`: what msg holds, an uncompiled run shows (text: no Warning instance)
    body = """
    def check(x, msg):
        if x.isnan().any():
            warnings.warn(msg)
        return x
    """
    source = HEAD + textwrap.dedent(body).lstrip("\n")
    line = source.splitlines().index("def check(x, msg):") + 1
    recipe = ReportIf()
    ctx = site_context(source, *_site(source, "x.isnan().any()"), "GB0170", path=pkg)
    assert recipe.observation(ctx) is not None  # the engine observes `check` first
    assert recipe.propose(ctx) is None and "the message `msg` was not seen in an uncompiled run" in recipe.declined
    args = (("x", ValueSpec("tensor")), ("msg", ValueSpec("str")))
    text = {line: (ObservedCall(args, ValueSpec("tensor")),)}
    assert _rewrite(body, "x.isnan().any()", pkg, observed=text) == _expect(
        "gbfix_warn_if",
        """
        def check(x, msg):
            pred = x.isnan().any()
            gbfix_warn_if(pred, "{}", msg)
            return x
        """,
    )
    other = {line: (ObservedCall((args[0], ("msg", ValueSpec("other", type_name="UserWarning"))), ValueSpec("tensor")),)}
    assert _rewrite(body, "x.isnan().any()", pkg, observed=other) is None


# --- logger calls -------------------------------------------------------------------

LOGS = {
    "logging.getLogger(name) inline, a `%` message (mixtral_moe)": (
        """
        def forward(h, logits):
            aux = (logits.softmax(-1) ** 2).sum(-1).mean()
            if aux > 2.0:
                logging.getLogger("moe").info("high aux loss %.3f", aux)
            return h + aux
        """,
        "aux > 2.0",
        """
        def forward(h, logits):
            aux = (logits.softmax(-1) ** 2).sum(-1).mean()
            gbfix_log_if(aux > 2.0, "moe", "info", "high aux loss %.3f", aux)
            return h + aux
        """,
    ),
    "a value unpacked from a call: the test shows it is a tensor": (
        """
        class Model(torch.nn.Module):
            def forward(self, ids):
                out, router_logits, aux = self.moe(ids)
                if aux > 2.0:
                    logging.getLogger("moe").info("high aux loss %.3f", aux)
                return out, aux
        """,
        "aux > 2.0",
        """
        class Model(torch.nn.Module):
            def forward(self, ids):
                out, router_logits, aux = self.moe(ids)
                gbfix_log_if(aux > 2.0, "moe", "info", "high aux loss %.3f", aux)
                return out, aux
        """,
    ),
    "a logger on self, an f-string with int()": (
        """
        class Router(torch.nn.Module):
            def forward(self, mask):
                if (mask.sum(-1) == 0).any():
                    self.logger.warning(f"{int((mask.sum(-1) == 0).sum())} tokens unrouted")
                return mask
        """,
        "(mask.sum(-1) == 0).any()",
        """
        class Router(torch.nn.Module):
            def forward(self, mask):
                gbfix_log_if(
                    (mask.sum(-1) == 0).any(),
                    self.logger,
                    "warning",
                    "{} tokens unrouted",
                    (mask.sum(-1) == 0).sum(),
                    cast={1: "int"},
                    template=True,
                )
                return mask
        """,
    ),
    "the module's logger, an `or` with a static part": (
        """
        def step(x, debug):
            if debug or torch.isinf(x).any():
                logger.warning("inf count %d", int(torch.isinf(x).sum()))
            return x
        """,
        "debug or torch.isinf(x).any()",
        """
        def step(x, debug):
            if debug:
                logger.warning("inf count %d", int(torch.isinf(x).sum()))
            else:
                gbfix_log_if(
                    torch.isinf(x).any(),
                    logger,
                    "warning",
                    "inf count %d",
                    torch.isinf(x).sum(),
                    cast={1: "int"},
                )
            return x
        """,
    ),
    "a body logger-to-op rewrote already": (
        """
        from ._gbfix import gbfix_log


        def step(x):
            if x.max() > 100:
                gbfix_log(logger, "info", "max %s", x.max())
            return x
        """,
        "x.max() > 100",
        """
        from ._gbfix import gbfix_log, gbfix_log_if


        def step(x):
            gbfix_log_if(x.max() > 100, logger, "info", "max %s", x.max())
            return x
        """,
    ),
}


@pytest.mark.parametrize("case", LOGS)
def test_log(case, pkg):
    before, needle, after = LOGS[case]
    expected = HEAD + textwrap.dedent(after).lstrip("\n") if "from ._gbfix" in after else _expect("gbfix_log_if", after)
    assert _rewrite(before, needle, pkg) == expected


def test_reports_of_every_kind_in_one_if(pkg):
    body = """
    def step(x, it):
        if torch.isnan(x).any():  # NaN guard
            print(f"iter {it}: NaN")
            # the warning names this line
            warnings.warn("NaN in x")
            logger.error("NaN count %s", torch.isnan(x).sum())
        return x
    """
    assert _rewrite(body, "torch.isnan(x).any()", pkg, x="tensor", it="int") == _expect(
        "gbfix_log_if, gbfix_print_if, gbfix_warn_if",
        """
        def step(x, it):
            pred = torch.isnan(x).any()  # NaN guard
            gbfix_print_if(pred, "iter {}: NaN", it)
            # the warning names this line
            gbfix_warn_if(pred, "NaN in x")
            gbfix_log_if(pred, logger, "error", "NaN count %s", torch.isnan(x).sum())
            return x
        """,
    )


def test_an_else_of_warnings_keeps_their_lines(pkg):
    body = """
    def step(x):
        if x.isfinite().all():
            warnings.warn("finite")
        else:
            warnings.warn("not finite")
        return x
    """
    assert _rewrite(body, "x.isfinite().all()", pkg) == _expect(
        "gbfix_warn_if",
        """
        def step(x):
            pred = x.isfinite().all()
            gbfix_warn_if(pred, "finite")
            not_pred = torch.logical_not(pred)
            gbfix_warn_if(not_pred, "not finite")
            return x
        """,
    )


# --- reports beside an update that is the identity where the test is false ---------------

# `if M.any(): <report>; x = x.masked_fill(M, v)`: the update changes nothing where M is
# all False (branch-to-general-path's updates), so it runs always, after or before the
# report as written; the report is made conditional.
UPDATES = {
    "a warning and a masked_fill at a view of the mask (blind probe topk_attn)": (
        """
        def attend(scores):
            fully_masked = torch.isinf(scores).all(dim=-1)
            if fully_masked.any():
                warnings.warn(f"{int(fully_masked.sum())} query rows are fully masked; zeroing them")
                scores = scores.masked_fill(fully_masked[..., None], 0.0)
            return scores.softmax(-1)
        """,
        "fully_masked.any()",
        "gbfix_warn_if",
        """
        def attend(scores):
            fully_masked = torch.isinf(scores).all(dim=-1)
            pred = fully_masked.any()
            gbfix_warn_if(
                pred,
                "{} query rows are fully masked; zeroing them",
                fully_masked.sum(),
                cast={0: "int"},
            )
            scores = scores.masked_fill(fully_masked[..., None], 0.0)
            return scores.softmax(-1)
        """,
    ),
    "a method: a Python part kept, a log call, nan_to_num": (
        """
        class Block(torch.nn.Module):
            def forward(self, x):
                if self.training and not torch.isfinite(x).all():
                    logger.warning("non-finite activations")
                    x = torch.nan_to_num(x)
                return x
        """,
        "not torch.isfinite(x).all()",
        "gbfix_log_if",
        """
        class Block(torch.nn.Module):
            def forward(self, x):
                if self.training:
                    gbfix_log_if(
                        torch.logical_not(torch.isfinite(x).all()),
                        logger,
                        "warning",
                        "non-finite activations",
                    )
                    x = torch.nan_to_num(x)
                return x
        """,
    ),
    "a flag in a local, `* (1 - m.type_as(h))`": (
        """
        def pad(h, mask):
            has_pad = (mask == 0).any()
            if has_pad:
                print("padding found")
                h = h * (1 - (mask == 0).type_as(h))
            return h
        """,
        "has_pad",
        "gbfix_print_if",
        """
        def pad(h, mask):
            has_pad = (mask == 0).any()
            gbfix_print_if(has_pad, "padding found")
            h = h * (1 - (mask == 0).type_as(h))
            return h
        """,
    ),
    "the update first, of what the test reads: the test is bound before it": (
        """
        def clean(x):
            if not torch.isfinite(x).all():
                x = torch.nan_to_num(x)
                print("cleaned")
            return x
        """,
        "not torch.isfinite(x).all()",
        "gbfix_print_if",
        """
        def clean(x):
            pred = torch.logical_not(torch.isfinite(x).all())
            x = torch.nan_to_num(x)
            gbfix_print_if(pred, "cleaned")
            return x
        """,
    ),
    "torch.any and torch.where with zeros_like": (
        """
        def drop(x, m):
            if torch.any(m > 0.5):
                x = torch.where(m > 0.5, torch.zeros_like(x), x)
                warnings.warn("dropped")
            return x
        """,
        "torch.any(m > 0.5)",
        "gbfix_warn_if",
        """
        def drop(x, m):
            pred = torch.any(m > 0.5)
            x = torch.where(m > 0.5, torch.zeros_like(x), x)
            gbfix_warn_if(pred, "dropped")
            return x
        """,
    ),
}


@pytest.mark.parametrize("case", UPDATES)
def test_reports_beside_an_update_that_is_then_the_identity(case, pkg):
    before, needle, helpers, after = UPDATES[case]
    assert _rewrite(before, needle, pkg) == _expect(helpers, after)


def test_reports_beside_updates_declined(pkg):
    # an update that changes x where the test is false
    body = """
    def f(x, m):
        if m.any():
            print("m")
            x = x + 1
        return x
    """
    assert "`x + 1` or `x` shows no sign of a tensor" in _declined(body, "m.any()", pkg)
    # under `if P:` each report tests where it stands: one after an update of what the test reads
    body = """
    def f(x, on: bool):
        if on and not torch.isfinite(x).all():
            x = torch.nan_to_num(x)
            print("cleaned")
        return x
    """
    assert "a report comes after an update of what the test reads" in _declined(body, "not torch.isfinite(x).all()", pkg)
    # an update in the `else:`, where the test holds
    body = """
    def f(x, m):
        if not m.any():
            print("none")
        else:
            x = x.masked_fill(m, 0.0)
        return x
    """
    assert "the `if` does more than report: `x = x.masked_fill(m, 0.0)`" in _declined(body, "not m.any()", pkg)


# Other assignments beside the reports, in an `if` without `else:`: each a select by the
# bound test, as branch-to-where writes an arm of assignments.
SELECTS = {
    "a log record, then the loss zeroed (a skip-step guard)": (
        """
        def check_finite(loss):
            if not torch.isfinite(loss):
                logger.warning("non-finite loss %s, skipping", loss.item())
                loss = torch.zeros_like(loss)
            return loss
        """,
        "not torch.isfinite(loss)",
        "gbfix_log_if, gbfix_where",
        """
        def check_finite(loss):
            pred = torch.logical_not(torch.isfinite(loss))
            gbfix_log_if(
                pred,
                logger,
                "warning",
                "non-finite loss %s, skipping",
                loss,
                cast={1: "item"},
            )
            loss = gbfix_where(pred, torch.zeros_like(loss), loss)
            return loss
        """,
    ),
    "a warning, then a clip through a temporary": (
        """
        def clip(grads, max_norm: float):
            norm = grads.norm()
            if norm > max_norm:
                warnings.warn("clipping gradients")
                coef = max_norm / (norm + 1e-6)
                grads = grads * coef
            return grads
        """,
        "norm > max_norm",
        "gbfix_warn_if",
        """
        def clip(grads, max_norm: float):
            norm = grads.norm()
            pred = norm > max_norm
            gbfix_warn_if(pred, "clipping gradients")
            coef = max_norm / (norm + 1e-6)
            grads = torch.where(pred, grads * coef, grads)
            return grads
        """,
    ),
    "a method: the update first, then a print of the updated value": (
        """
        class Guard(torch.nn.Module):
            def forward(self, h):
                if torch.isnan(h).any():
                    h = torch.nan_to_num(h, nan=0.0)
                    print(f"replaced NaNs, sum {h.sum().item():.3f}")
                return h
        """,
        "torch.isnan(h).any()",
        "gbfix_print_if",
        """
        class Guard(torch.nn.Module):
            def forward(self, h):
                pred = torch.isnan(h).any()
                h = torch.where(pred, torch.nan_to_num(h, nan=0.0), h)
                gbfix_print_if(pred, "replaced NaNs, sum {:.3f}", h.sum(), cast={0: "item"})
                return h
        """,
    ),
    "a scale that may be a tensor: the checked select": (
        """
        def damp(h, scale):
            if h.abs().max() > 1e4:
                print("damping")
                h = h * scale
            return h
        """,
        "h.abs().max() > 1e4",
        "gbfix_print_if, gbfix_where",
        """
        def damp(h, scale):
            pred = h.abs().max() > 1e4
            gbfix_print_if(pred, "damping")
            h = gbfix_where(pred, h * scale, h)
            return h
        """,
    ),
}


def test_reports_beside_assignments_declined(pkg):
    # after a Python part of the test, the reports stay under `if P:`, unbound
    body = """
    def f(loss, on: bool):
        if on and not torch.isfinite(loss):
            print("skip")
            loss = torch.zeros_like(loss)
        return loss
    """
    assert "an assignment or a return beside the report, after a Python part of the test" in _declined(body, "not torch.isfinite(loss)", pkg)
    # an `else:`
    body = """
    def f(loss):
        if not torch.isfinite(loss):
            print("skip")
            loss = torch.zeros_like(loss)
        else:
            loss = loss * 2
        return loss
    """
    assert "the `if` does more than report: `loss = torch.zeros_like(loss)`" in _declined(body, "not torch.isfinite(loss)", pkg)
    # a random draw, which torch.where would make on both paths
    body = """
    def f(x):
        if not torch.isfinite(x).all():
            print("reset")
            x = torch.randn_like(x)
        return x
    """
    assert "may have effects or draw random numbers" in _declined(body, "not torch.isfinite(x).all()", pkg)


# `if c: <reports>; return a` + `return b`: one return of a select by the bound test.
RETURNS = {
    "a warning, then the old value returned (an EMA that skips NaN input)": (
        """
        def ema_update(ema, x, decay: float = 0.99):
            if torch.isnan(x).any():
                warnings.warn("NaN in EMA input, skipped")
                return ema
            return ema * decay + x * (1 - decay)
        """,
        "torch.isnan(x).any()",
        "gbfix_warn_if, gbfix_where",
        """
        def ema_update(ema, x, decay: float = 0.99):
            pred = torch.isnan(x).any()
            gbfix_warn_if(pred, "NaN in EMA input, skipped")
            return gbfix_where(pred, ema, ema * decay + x * (1 - decay))
        """,
    ),
    "a method: a log record with the value, then a zero loss": (
        """
        class Loss(torch.nn.Module):
            def forward(self, pred_y, y):
                loss = (pred_y - y).pow(2).mean()
                if not torch.isfinite(loss):
                    logger.warning("loss is %s, using 0", loss.item())
                    return torch.zeros_like(loss)
                # the usual case
                return loss * self.weight
        """,
        "not torch.isfinite(loss)",
        "gbfix_log_if, gbfix_where",
        """
        class Loss(torch.nn.Module):
            def forward(self, pred_y, y):
                loss = (pred_y - y).pow(2).mean()
                pred = torch.logical_not(torch.isfinite(loss))
                gbfix_log_if(
                    pred,
                    logger,
                    "warning",
                    "loss is %s, using 0",
                    loss,
                    cast={1: "item"},
                )
                # the usual case
                return gbfix_where(pred, torch.zeros_like(loss), loss * self.weight)
        """,
    ),
    "a print before the return; the fallthrough divides by what the test finds zero": (
        """
        def masked_mean(x, mask):
            n = mask.sum()
            if n == 0:
                print("empty mask, returning zeros")
                return torch.zeros_like(x[0])
            return (x * mask[:, None]).sum(0) / n
        """,
        "n == 0",
        "gbfix_print_if, gbfix_where",
        """
        def masked_mean(x, mask):
            n = mask.sum()
            pred = n == 0
            gbfix_print_if(pred, "empty mask, returning zeros")
            return gbfix_where(
                pred,
                torch.zeros_like(x[0]),
                (x * mask[:, None]).sum(0) / torch.where(pred, 1, n),
            )
        """,
    ),
}


@pytest.mark.parametrize("case", [*SELECTS, *RETURNS])
def test_reports_beside_assignments_and_returns_that_become_selects(case, pkg):
    before, needle, helpers, after = {**SELECTS, **RETURNS}[case]
    assert _rewrite(before, needle, pkg) == _expect(helpers, after)


def test_reports_then_a_return_declined(pkg):
    # nothing returned after the `if`
    body = """
    def f(x):
        if torch.isnan(x).any():
            print("nan")
            return x
        x.mul_(2)
    """
    assert "the `if` returns, and no `return` of a value follows it" in _declined(body, "torch.isnan(x).any()", pkg)
    # the fallback draws random numbers, which a select would draw on both paths
    body = """
    def f(x):
        if torch.isnan(x).any():
            print("nan")
            return torch.randn_like(x)
        return x
    """
    assert "may have effects or draw random numbers" in _declined(body, "torch.isnan(x).any()", pkg)


def test_a_script_gets_the_helpers():
    source = "import torch\n\n\ndef f(x):\n    if x.sum() > 0:\n        print(f\"sum {x.sum():.2f}\")\n    return x\n\n\nif __name__ == \"__main__\":\n    f(torch.ones(2))\n"
    out = rewrite_at(source, ReportIf, *_site(source, "x.sum() > 0"), "GB0170")
    assert out is not None
    names = [p.name for p in generated.closure(["gbfix_print_if"])]
    assert names == ["_gbfix_op", "_gbfix_pack", "_gbfix_message", "gbfix_print_if"]
    assert all(f"def {n}(" in out for n in ("_gbfix_op", "_gbfix_pack", "_gbfix_message", "_gbfix_print_if_body", "gbfix_print_if"))
    assert '    gbfix_print_if(x.sum() > 0, "sum {:.2f}", x.sum())\n' in out
    # a script that does not import torch at module level cannot take the helper
    bare = source.replace("import torch\n", "").replace("    f(torch.ones(2))", "    import torch\n    f(torch.ones(2))")
    recipe = ReportIf()
    assert recipe.propose(site_context(bare, *_site(bare, "x.sum() > 0"), "GB0170")) is None
    assert "does not import torch" in recipe.declined


# --- declines ---------------------------------------------------------------------------

DECLINES = {
    "an else that does more than report": (
        """
        def step(x):
            if x.sum() > 0:
                print("positive")
            else:
                x = -x
            return x
        """,
        "x.sum() > 0",
        "the `if` does more than report: `x = -x`",
    ),
    "a body that also counts (module state)": (
        """
        class Net(torch.nn.Module):
            def forward(self, x):
                if torch.isnan(x).any():
                    warnings.warn("NaN")
                    self.nan_steps += 1
                return x
        """,
        "torch.isnan(x).any()",
        "the `if` does more than report: `self.nan_steps += 1`",
    ),
    "an elif": (
        """
        def step(x):
            if x.sum() > 0:
                print("positive")
            elif x.sum() < 0:
                print("negative")
            return x
        """,
        "x.sum() > 0",
        "an `elif`",
    ),
    "a message value that indexes": (
        """
        def step(x):
            if torch.isnan(x).any():
                print(f"first row {x[0]}")
            return x
        """,
        "torch.isnan(x).any()",
        "`x[0]` in `print(f\"first row {x[0]}\")` indexes",
    ),
    "a message value with an effect": (
        """
        def step(x, it):
            if torch.isnan(x).any():
                print(f"batch {next(it)}")
            return x
        """,
        "torch.isnan(x).any()",
        "calls `next`, which may have effects or raise",
    ),
    "a message value that may raise on an empty tensor (max)": (
        """
        def step(x, m):
            if m.any():
                print(f"max {x.max()}")
            return x
        """,
        "m.any()",
        "calls `x.max`, which may have effects or raise",
    ),
    "a message value bound only where a test held": (
        """
        def step(x, deep):
            if deep:
                peak = x.abs()
            if torch.isnan(x).any():
                print(f"peak {peak}")
            return x
        """,
        "torch.isnan(x).any()",
        "reads `peak`, which may not be bound there",
    ),
    "a message value that may be a container (unpacked, not the one tested)": (
        """
        def step(x, moe):
            out, stats = moe(x)
            if torch.isnan(out).any():
                print(f"NaN, stats {stats}")
            return out
        """,
        "torch.isnan(out).any()",
        "`stats` in `print(f\"NaN, stats {stats}\")` is unpacked: the op takes text, numbers, tensors and None",
    ),
    "a division in the message": (
        """
        def step(x, n):
            if torch.isnan(x).any():
                print(f"{torch.isnan(x).sum() / n:.1%} NaN")
            return x
        """,
        "torch.isnan(x).any()",
        "divides",
    ),
    "a Python part after the tensor one": (
        """
        class Net(torch.nn.Module):
            def forward(self, x):
                if x.isnan().any() and self.training:
                    print("NaN while training")
                return x
        """,
        "x.isnan().any() and self.training",
        "a Python part of the test comes after the tensor one",
    ),
    "two tensor operands not shown to hold one element": (
        """
        def step(x, m):
            if x.any() and (m.sum(-1) > 0):
                print("both")
            return x
        """,
        "x.any() and (m.sum(-1) > 0)",
        "not each shown to hold one element",
    ),
    "a warning under an `or` test would move": (
        """
        def step(x, debug):
            if debug or x.isnan().any():
                warnings.warn("NaN or debug")
            return x
        """,
        "debug or x.isnan().any()",
        "an `or` test",
    ),
    "a warning under a test over two lines would move": (
        """
        def step(x):
            if (x.isnan().any()
                    or x.isinf().any()):
                warnings.warn("not finite")
            return x
        """,
        "x.isnan().any()",
        "the test spans several lines",
    ),
    "a logger call with a keyword argument": (
        """
        def step(x):
            if x.isnan().any():
                logger.warning("NaN", exc_info=True)
            return x
        """,
        "x.isnan().any()",
        "is not a logger call logger-to-op takes",
    ),
    "a Warning instance as the message": (
        """
        def step(x):
            if x.isnan().any():
                warnings.warn(RuntimeWarning("NaN"))
            return x
        """,
        "x.isnan().any()",
        "a warning warn-to-op does not take",
    ),
    "a `%` template with a mapping key": (
        """
        def step(x):
            if x.isnan().any():
                print("%(n)d NaN" % {"n": 1})
            return x
        """,
        "x.isnan().any()",
        "a `%` template with a mapping key",
    ),
}


@pytest.mark.parametrize("case", DECLINES)
def test_declines(case, pkg):
    before, needle, why = DECLINES[case]
    declined = _declined(before, needle, pkg)
    assert declined is not None and why in declined, declined


def test_not_a_report_is_left_to_the_branch_recipes(pkg):
    # no report in the body: nothing to say (branch-to-where says why it declines)
    body = """
    def step(x, cache):
        if x.sum() > 0:
            cache.append(x)
        return x
    """
    assert _declined(body, "x.sum() > 0", pkg) is None
    # a test Dynamo's break does not show to be a tensor's (two operands, one a plain name)
    body = """
    def step(x, flag):
        if x.any() and flag.value:
            print("both")
        return x
    """
    assert _declined(body, "x.any() and flag.value", pkg) is None


def test_decline_is_the_reason_not_an_exception(pkg):
    # Decline is caught by propose: the reason is kept for the report
    assert issubclass(Decline, Exception)
    assert _declined(DECLINES["an elif"][0], "x.sum() > 0", pkg).startswith("an `elif`")


# --- real runs: real torch, the engine end to end ------------------------------------------


MODEL = """\
import logging
import warnings

import torch

log = logging.getLogger("train")


def step(x, it):
    print("step start")
    y = x.nan_to_num(0.0) * 2
    grad_norm = y.abs().sum()
    if grad_norm > 10.0:
        print(f"iter {it}: large grad norm {grad_norm:.3f}")
    nan_rows = torch.isnan(x).any(-1)
    if nan_rows.any():
        warnings.warn(f"{int(nan_rows.sum())} rows hold NaN")
        x = x.masked_fill(nan_rows[:, None], 0.0)
    if y.mean() > 0.5:
        log.info("high mean %.3f", y.mean())
    if not torch.isfinite(x).all():
        print("non-finite input")
    else:
        print(f"finite input, sum {y.sum() + 0:.2f}")
    print("step end")
    return y.sum() + x.sum()
"""

RUN = """\
import logging
import sys
import warnings

import torch

from pkg.model import step

logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(levelname)s %(message)s")
warnings.simplefilter("default")  # once per location: the registry of the line the warning names
warnings.showwarning = lambda message, category, filename, lineno, *rest: filename.endswith("model.py") and print(
    f"WARN {category.__name__} {filename.rsplit('/', 1)[-1]}:{lineno} {message}"
)
f = torch.compile(step, backend=sys.argv[1] if len(sys.argv) > 1 else "inductor")
torch.manual_seed(0)
for it in range(4):
    x = torch.randn(3, 4) * (it + 1) / 4 + it * 0.2
    if it in (1, 3):
        x[it % 3, 0] = float("nan")
    print(f"out {f(x, it).item():.4f}")
"""


def _run(folder: Path, *args: str, **env: str) -> str:
    run = subprocess.run(
        [sys.executable, "run.py", *args], cwd=folder, capture_output=True, text=True, timeout=600,
        env={**os.environ, **env},
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    """The program, gbfix's result on it (own backend: inductor), and the folder of the fixed copy."""
    root = tmp_path_factory.mktemp("reportif_run").resolve()
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "model.py").write_text(MODEL)
    (root / "run.py").write_text(RUN)
    result = engine.fix([root / "pkg"], parse("python run.py", root))
    after = tmp_path_factory.mktemp("reportif_fixed").resolve()
    (after / "pkg").mkdir()
    (after / "pkg" / "__init__.py").write_text("")
    (after / "run.py").write_text(RUN)
    (after / "pkg" / "model.py").write_text(MODEL)
    for path, data in result.fixed.items():
        (after / path.relative_to(root)).write_bytes(data)
    return root, result, after


def test_real_run_every_break_fixed_with_report_if(fixed):
    root, result, _ = fixed
    applied = [o.edit.recipe for o in result.outcomes if o.status == "applied"]
    assert applied.count("report-if") == 4, [(o.edit.recipe, o.status, o.detail) for o in result.outcomes]
    assert result.remaining == 0 and all(f.status == "fixed" for f in result.findings)
    # the final check ran the program's own backend, inductor, and it behaved the same
    assert result.final is not None and not result.final.output_mismatch
    model = result.fixed[root / "pkg" / "model.py"].decode()
    assert "    pred = torch.isnan(x).any(-1).any()" not in model  # the test as written, a flag of its own
    assert '    gbfix_print_if(grad_norm > 10.0, "iter {}: large grad norm {:.3f}", it, grad_norm)\n' in model
    assert '    gbfix_warn_if(pred, "{} rows hold NaN", nan_rows.sum(), cast={0: "int"})\n' in model
    assert "    x = x.masked_fill(nan_rows[:, None], 0.0)\n" in model  # runs always: nothing to fill where no row holds NaN
    assert '    gbfix_log_if(y.mean() > 0.5, log, "info", "high mean %.3f", y.mean())\n' in model
    assert "if " not in model.split("def step")[1]  # no data-dependent `if` left
    generated_module = result.fixed[root / "pkg" / "_gbfix.py"].decode()
    assert all(f"def {n}(" in generated_module for n in ("gbfix_print_if", "gbfix_warn_if", "gbfix_log_if", "gbfix_print"))


def test_real_run_the_reports_inside_the_ifs_broke_too_and_are_fixed(fixed):
    # round 1: the `if`s break first, and the prints, the `%` formatting and the int() in
    # their bodies break when the tests hold; report-if's edit of each `if` fixes both
    _, result, _ = fixed
    lines = MODEL.splitlines()
    inner = {lines.index('        print(f"iter {it}: large grad norm {grad_norm:.3f}")') + 1}
    found = {(f.line, f.code) for f in result.findings}
    assert any(line in inner for line, code in found if code != "GB0170"), found
    assert {code for _, code in found} >= {"GB0170", "GB0059"}


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_real_run_same_output_in_the_same_order(fixed, backend):
    root, _, after = fixed
    expected = _run(root, backend, TORCHDYNAMO_DISABLE="1")  # the original, uncompiled: the ground truth
    got = _run(after, backend)
    # a warning names the line of its call: one below the `if` line in the original, one
    # below the line `pred = <test>` took in the rewrite (lines above moved: an import
    # added, an `if` of two lines made one)
    model = (after / "pkg" / "model.py").read_text().splitlines()
    warn_line = next(i for i, text in enumerate(model, 1) if "gbfix_warn_if(" in text)
    assert model[warn_line - 2] == "    pred = nan_rows.any()"
    original_line = MODEL.splitlines().index('        warnings.warn(f"{int(nan_rows.sum())} rows hold NaN")') + 1
    assert MODEL.splitlines()[original_line - 2] == "    if nan_rows.any():"
    assert f"model.py:{original_line} " in expected
    assert got == expected.replace(f"model.py:{original_line} ", f"model.py:{warn_line} ")
    # the reports, in order between the prints before and after the ifs; the NaN warning
    # once, though two calls warn it at that line (its registry, as the original's)
    assert got.count("1 rows hold NaN") == 1 and got.count("step start") == got.count("step end") == 4
    inside, reports = False, 0
    for line in got.splitlines():  # each call's reports between its prints before and after them
        if line in ("step start", "step end"):
            assert inside == (line == "step end")
            inside = not inside
        elif not line.startswith("out "):
            assert inside, line
            reports += 1
    assert reports >= 8


def test_conditional_helpers_keep_pythons_truth_value():
    # a condition of several elements raises as the `if` does, uncompiled and compiled
    # (the op tests it at run time); one of one element, 0-dim or not, reports or not
    import torch

    report = generated_function(op_helpers.PRINT_IF)

    def original(x):
        if x > 0:
            print(f"sum {x.sum():.1f} {int(x.sum())}", round(x.sum().item() / 3, 2), round(x.sum().item()))
        return x + 1

    def rewritten(x):
        s = x.sum()
        report(x > 0, "sum {:.1f} {} {!s} {!s}", s, s, s / 3, s, cast={1: "int", 2: "item,round:2", 3: "item,round"})
        return x + 1

    def outcome(fn, x):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                fn(x)
                return out.getvalue(), None
            except RuntimeError as e:
                return out.getvalue(), str(e)

    for backend in (None, "eager", "inductor"):
        for x in (torch.tensor([1.0, 2.0]), torch.tensor([2.5]), torch.tensor(-1.0)):
            torch._dynamo.reset()
            fn = rewritten if backend is None else torch.compile(rewritten, backend=backend, fullgraph=True)
            assert outcome(fn, x) == outcome(original, x), (backend, x)
    assert outcome(original, torch.tensor([1.0, 2.0]))[1].startswith("Boolean value of Tensor with more than one value")


def _warn_if_outer(fn, x):
    return fn(x)  # the line a stacklevel of 2 names


def test_warn_if_names_the_place_warnings_warn_names():
    # stacklevel 1: the line of the call (the warning's own line, kept by the rewrite);
    # 2: its caller's line, inside the compiled function or not; uncompiled and compiled
    import inspect
    import warnings

    import torch

    warn_if = generated_function(op_helpers.WARN_IF, warnings=warnings, io=io, sys=sys)

    def original(x):
        if x.sum() > 0:
            warnings.warn("pos", RuntimeWarning)  # noqa: B028 - stacklevel 1 on purpose: this line
        if x.sum() > 1:
            warnings.warn("two", RuntimeWarning, stacklevel=2)
        return x + 1

    def rewritten(x):
        pred = x.sum() > 0
        warn_if(pred, "pos", category=RuntimeWarning)
        warn_if(x.sum() > 1, "two", category=RuntimeWarning, stacklevel=2)
        return x + 1

    def places(fn, backend):
        torch._dynamo.reset()
        outer = _warn_if_outer if backend is None else torch.compile(_warn_if_outer, backend=backend)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            outer(fn, torch.tensor([3.0]))
        first = inspect.getsourcelines(fn)[1]
        return [(w.category, str(w.message), w.filename, w.lineno - (first if w.lineno >= first else 0)) for w in seen if w.filename == __file__]

    expected = places(original, None)
    assert [m for _, m, _, _ in expected] == ["pos", "two"]
    assert expected[1][3] == inspect.getsourcelines(_warn_if_outer)[1] + 1  # the caller's line
    for backend in (None, "eager", "inductor"):
        assert places(rewritten, backend) == expected, backend


COMPOSED = """\
import torch


def step(x, it):
    loss = (x * x).mean()
    if loss > 1.0:
        print(f"iter {it}: loss {loss:.3f}")
    return loss


if __name__ == "__main__":
    f = torch.compile(step, backend="eager")
    for it in range(3):
        print(f"out {f(torch.ones(4) * it, it).item():.3f}")
"""


def test_real_run_an_if_around_what_print_to_op_wrote(tmp_path: Path):
    # the other order of the rounds: print-to-op fixed the print (its own break) first;
    # the `if` is then taken with the gbfix_print call in it
    from gbfix.recipes.print_op import PrintToOp
    from tests.helpers import rewrite_line

    source = rewrite_line(COMPOSED, PrintToOp, "print(f\"iter", "GB0059")
    assert source is not None and '        gbfix_print("iter {}: loss {:.3f}", it, loss)\n' in source
    (tmp_path / "prog.py").write_text(source)
    result = engine.fix([tmp_path / "prog.py"], parse("python prog.py", tmp_path))
    assert [(o.edit.recipe, o.status) for o in result.outcomes] == [("report-if", "applied")]
    assert result.remaining == 0
    fixed = result.fixed[tmp_path / "prog.py"].decode()
    assert '    gbfix_print_if(loss > 1.0, "iter {}: loss {:.3f}", it, loss)\n' in fixed
    assert "    if loss" not in fixed
    run = subprocess.run([sys.executable, "-c", fixed], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.stdout == "out 0.000\nout 1.000\niter 2: loss 4.000\nout 4.000\n", run.stderr


ELIF_CHAIN = """\
import torch


def gate(x, t):
    frac = (x > t).float().mean()
    if frac == 0:
        print("gate closed")
    elif frac == 1:
        print(f"gate open at {t}")
    else:
        print("gate partly open")
    return x * (x > t)


if __name__ == "__main__":
    f = torch.compile(gate, backend="eager")
    x = torch.arange(4.0)
    for t in (9.0, -1.0, 1.5):
        print(f(x, t).sum().item())
"""


def test_real_run_an_elif_chain_of_reports(tmp_path: Path):
    # round 1 takes the `elif` (its own `if` with an `else:`: `else: gbfix_print_if(c, ...)`,
    # `not_pred = torch.logical_not(c)` on the old `else:` line, `gbfix_print_if(not_pred, ...)`)
    # and the first print (print-to-op); round 2 the `if` around them, whose `else:` now holds
    # what round 1 wrote: the calls' tests join `torch.logical_not(pred)`, not_pred runs always
    (tmp_path / "prog.py").write_text(ELIF_CHAIN)
    result = engine.fix([tmp_path / "prog.py"], parse("python prog.py", tmp_path))
    applied = sorted(o.edit.recipe for o in result.outcomes if o.status == "applied")
    assert applied == ["print-to-op", "report-if", "report-if"]
    assert result.remaining == 0
    fixed = result.fixed[tmp_path / "prog.py"].decode()
    assert "    if " not in fixed.split("def gate")[1].split("__main__")[0]
    assert "torch.logical_and(torch.logical_not(pred), " in fixed
    run = subprocess.run([sys.executable, "-c", fixed], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "torch.logical_and(torch.logical_not(pred), not_pred)" in fixed
    assert run.stdout == "gate closed\n0.0\ngate open at -1.0\n6.0\ngate partly open\n5.0\n", run.stderr


def test_tried_before_the_branch_recipes():
    # branch-to-where declines these `if`s ("may have effects"); report-if comes first, and
    # before library-class / library-patch, which run the recipes listed before them
    from gbfix import recipes

    order = [r.name for r in recipes.candidates("GB0170", unsafe=True)]
    assert order.index("report-if") < min(order.index(n) for n in ("branch-to-general-path", "branch-to-where", "branch-to-check"))
    assert ReportIf in recipes.listed_before("library_class")


def test_no_torch_written_into_a_module_that_keeps_it_optional(pkg):
    # the module imports torch only where it runs: torch.logical_not would need it at module level
    source = "def step(x):\n    if not x.isfinite().all():\n        print('non-finite')\n    return x\n"
    recipe = ReportIf()
    assert recipe.propose(site_context(source, *_site(source, "not x.isfinite().all()"), "GB0170", path=pkg)) is None
    assert "does not import torch at module level" in recipe.declined
    # a test that names torch already, or one with no `not`, writes no new torch
    for test in ("not torch.isfinite(x).all()", "x.isnan().any()"):
        source = f"def step(x):\n    import torch\n    if {test}:\n        print('bad')\n    return x\n"
        out = rewrite_at(source, ReportIf, *_site(source, test), "GB0170", path=pkg)
        assert out is not None and "\nimport torch" not in out and "gbfix_print_if(" in out


def test_an_or_of_two_comparisons_of_a_reduction_bound_to_a_name():
    """`pos_rate = labels.mean()` then `if pos_rate == 0 or pos_rate == 1:` (blind probe
    dlrm_embbag): neither operand has a call, so the break does not tell which one is a
    tensor; the name's binding shows both are, and each holds one element."""
    from gbfix.recipes.report_if import ReportIf
    from tests.helpers import rewrite_at

    source = (
        "import logging\n\nimport torch\n\nlog = logging.getLogger('dlrm')\n\n\n"
        "def f(logits, labels):\n"
        "    pos_rate = labels.mean()\n"
        "    if pos_rate == 0 or pos_rate == 1:\n"
        "        log.warning('batch has a single class; AUC undefined')\n"
        "    return logits\n"
    )
    line = 10
    fixed = rewrite_at(source, ReportIf, line, 7, 37, "GB0170")
    assert fixed is not None
    assert "torch.logical_or(pos_rate == 0, pos_rate == 1)" in fixed
    assert "if pos_rate" not in fixed
