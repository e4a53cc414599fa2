"""Static tests of print-to-hop, logger-to-leaf and warn-to-leaf (no torch)."""

from __future__ import annotations

import contextlib
import io
import textwrap
import types
from pathlib import Path

import pytest

from gbfix.recipes.logging_call import LoggerToLeaf
from gbfix.recipes.print_call import PrintToHop
from gbfix.recipes.warn_call import WarnToLeaf
from gbfix.rules import parse
from tests.helpers import ALL_CAPABILITIES, rewrite_at

RULES = Path(__file__).resolve().parents[2] / "rules"


def _site(source: str, needle: str, nth: int = 0) -> tuple[int, int, int]:
    """(line, col, end_col) of the nth line holding ``needle``: the span Dynamo gives a call."""
    hits = [(i, text) for i, text in enumerate(source.splitlines(), 1) if needle in text]
    line, text = hits[nth]
    return line, text.index(needle), len(text.rstrip())


def _rewrite(source: str, recipe, needle: str, code: str, nth: int = 0, **kw) -> str | None:
    source = textwrap.dedent(source)
    return rewrite_at(source, recipe, *_site(source, needle, nth), code, **kw)


def _rule(code: str, title: str):
    return next(e for e in parse(RULES / f"{code}.md") if e.title.startswith(title))


# --- print -> torch._higher_order_ops.print -------------------------------------

PRINT_SITE = "import torch\n\n\ndef f(x, i, s):\n    {stmt}\n    return x\n"


def _print(stmt: str, head: str = "") -> str | None:
    """The rewritten statement, or None when the recipe declines."""
    source = head + PRINT_SITE.format(stmt=stmt)
    out = rewrite_at(source, PrintToHop, *_site(source, stmt), "GB0059")
    if out is None:
        return None
    return out.splitlines()[source.splitlines().index("    " + stmt)].strip()


def test_print_rule_examples():
    first = _rule("GB0059", "f-string")
    assert _rewrite(first.before, PrintToHop, "print(f", "GB0059") == first.after
    second = _rule("GB0059", "print with a separator")
    once = _rewrite(second.before, PrintToHop, 'print("normalizing"', "GB0059")
    assert _rewrite(once, PrintToHop, 'print("norms"', "GB0059") == second.after


def test_print_rule_not_fixed():
    example = _rule("GB0059", "a progress line")
    assert _rewrite(example.before, PrintToHop, "print(f", "GB0059") is None


@pytest.mark.parametrize(
    "stmt, expected",
    [
        ('print("a", x)', 'torch._higher_order_ops.print("a {!s}", x)'),
        ("print()", 'torch._higher_order_ops.print("")'),
        ('print("{a}", 1, -2.5, None, True)', 'torch._higher_order_ops.print("{{a}} 1 -2.5 None True")'),
        ('print("a" "b", x, sep="")', 'torch._higher_order_ops.print("ab{!s}", x)'),
        ('print(x, i, sep=" | ", end="\\n", flush=True)', 'torch._higher_order_ops.print("{!s} | {!s}", x, i)'),
        ("print(x, sep=None, end=None)", 'torch._higher_order_ops.print("{!s}", x)'),
        ('print(f"loss {x:.3f} {x!r} {i:>4d}")', 'torch._higher_order_ops.print("loss {:.3f} {!r} {:>4d}", x, x, i)'),
        ('print(f"{x=} {i=:03d}")', 'torch._higher_order_ops.print("x={!r} i={:03d}", x, i)'),
        ('print(f"{{x}} {x}" "}")', 'torch._higher_order_ops.print("{{x}} {}}}", x)'),
        ('print(f"block {s.idx}: {tuple(x.shape)}")', 'torch._higher_order_ops.print("block {}: {}", s.idx, str(tuple(x.shape)))'),
        ('print("shape", x.shape, x.size(), [i, i])', 'torch._higher_order_ops.print("shape {} {} {}", str(x.shape), str(x.size()), str([i, i]))'),
        ('print(f"{x.shape!r}", x.size(0))', 'torch._higher_order_ops.print("{} {!s}", repr(x.shape), x.size(0))'),
        ("print('it\\'s', \"q\\\"\")", "torch._higher_order_ops.print('it\\'s q\"')"),
    ],
)
def test_print_rewrites(stmt, expected):
    assert _print(stmt) == expected


@pytest.mark.parametrize(
    "stmt",
    [
        'print(x, end="")',  # the op always ends the line
        "print(x, file=sys.stderr)",  # the op always writes to sys.stdout
        "print(x, sep=s)",
        "print(*x)",
        "print(**s)",
        "print(x, flush=s.flush)",
        'print(f"{x:{i}}")',  # nested field in the format spec
        'print(f"{x.shape:>10}")',  # spec on a container
        "print(self)",
        'print(b"raw")',
        "print(i for i in x)",
        "print(lambda: x)",
        "print(x.tolist())",
    ],
)
def test_print_declines(stmt):
    assert _print(stmt) is None


@pytest.mark.parametrize(
    "head, stmt",
    [
        ("print = lambda *a: None\n", "print(x)"),
        ("from rich import print\n", "print(x)"),
        ("from helpers import *\n", "print(x)"),
        ("str = repr\n", "print(x.shape)"),
    ],
)
def test_print_declines_when_not_the_builtin(head, stmt):
    assert _print(stmt, head) is None


def test_print_declines_a_local_print():
    source = "import torch\n\n\ndef f(x, print=None):\n    print(x)\n"
    assert rewrite_at(source, PrintToHop, 5, 4, 12, "GB0059") is None


def test_print_declines_a_break_inside_its_arguments():
    # the span is `x.item()` (GB0124): the print is not the call that broke
    source = "import torch\n\n\ndef f(x):\n    print(x.item())\n"
    assert rewrite_at(source, PrintToHop, 5, 10, 18, "GB0059") is None


def test_print_needs_the_op():
    source = PRINT_SITE.format(stmt="print(x)")
    assert rewrite_at(source, PrintToHop, *_site(source, "print(x)"), "GB0059", capabilities=frozenset()) is None


def test_print_multiline_call_and_import_added():
    source = 'def f(x):\n    print(\n        "value",\n        x,\n    )\n'
    out = rewrite_at(source, PrintToHop, 2, 4, None, "GB0059")
    assert out == 'import torch\n\ndef f(x):\n    torch._higher_order_ops.print("value {!s}", x)\n'


class _Scalar:
    """Formats like a 0-dim tensor: str() differs from format(v, "")."""

    def __str__(self) -> str:
        return "tensor(0.5000)"

    def __format__(self, spec: str) -> str:
        return format(0.5, spec)


@pytest.mark.parametrize(
    "stmt",
    [
        'print("loss", x, i, sep=": ")',
        'print(f"loss {x} {x:.2f} {x!s} {x!r} {i=} {s=!s:>8}")',
        'print("{braces}", f"{{ {i} }}", s, 3, -1.5, None)',
        'print(f"""multi\\n{i:#x}""", "tab\\t", f"{s!a}")',
        'print("dims", (i, i), [i], f"{(i, i)}")',
    ],
)
def test_print_rewrite_prints_the_same_text(stmt):
    """Run the original and the rewritten statement, with a stand-in for the op."""
    rewritten = _print(stmt)
    assert rewritten is not None

    def hop(fmt, *args):
        print(fmt.format(*args))

    torch = types.SimpleNamespace(_higher_order_ops=types.SimpleNamespace(print=hop))
    env = {"x": _Scalar(), "i": 7, "s": "né{}"}
    outputs = []
    for code in (stmt, rewritten):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(code, {"torch": torch}, dict(env))
        outputs.append(buf.getvalue())
    assert outputs[0] == outputs[1]


# --- logger.<level>(...) -> leaf function -----------------------------------------

LOG_MODULE = '''\
"""A model."""
import logging

import torch

logger = logging.getLogger(__name__)


class M(torch.nn.Module):
    def forward(self, x):
        {stmt}
        return x
'''


def _log(stmt: str, module: str = LOG_MODULE, **kw) -> str | None:
    return _rewrite(module.replace("{stmt}", stmt), LoggerToLeaf, stmt, "GB0291", **kw)


def test_logging_rule_example_in_two_rounds():
    example = _rule("GB0291", "deprecation warning")
    # first site: the helper is missing, the edit adds it and rewrites the call
    once = _rewrite(example.before, LoggerToLeaf, "logger.info(", "GB0291")
    assert once.count("def _gbfix_log(") == 1
    # second site: the helper is there, only the call changes
    assert _rewrite(once, LoggerToLeaf, "logger.warning(", "GB0291") == example.after


def test_logging_helper_goes_after_the_imports():
    out = _log('logger.warning("x %s", x)')
    assert out is not None
    lines = out.splitlines()
    assert lines[lines.index("import torch") + 3] == "@torch._dynamo.decorators.leaf_function"
    assert '        _gbfix_log("logger", "warning", "x %s", x)' in lines
    assert "\n\n\nlogger = logging.getLogger(__name__)" in out


def test_logging_second_site_replaces_only_the_call():
    once = _log('logger.info("a")')
    twice = _rewrite(once.replace('_gbfix_log("logger", "info", "a")', 'logger.debug("b %d", 1)'), LoggerToLeaf, "logger.debug(", "GB0291")
    assert twice.count("def _gbfix_log(") == 1
    assert '_gbfix_log("logger", "debug", "b %d", 1)' in twice


@pytest.mark.parametrize(
    "stmt, expected",
    [
        ('logger.log(logging.INFO, "a %s", x)', '_gbfix_log("logger", "log", logging.INFO, "a %s", x)'),
        ('logger.warning_once("deprecated")', '_gbfix_log("logger", "warning_once", "deprecated")'),
        ('logger.debug(f"x {x}")', '_gbfix_log("logger", "debug", f"x {x}")'),
    ],
)
def test_logging_rewrites(stmt, expected):
    assert expected in _log(stmt)


@pytest.mark.parametrize(
    "stmt",
    [
        'self.logger.info("a")',  # not a module global: Dynamo cannot pass a Logger
        'logger.info("a", exc_info=True)',
        'logger.info("a %s", *x)',
        'logger.exception("failed")',
        'logger.setLevel("INFO")',
        'ok = logger.info("a")',  # the result is used
    ],
)
def test_logging_declines(stmt):
    assert _log(stmt) is None


def test_logging_declines_a_local_logger():
    module = LOG_MODULE.replace("def forward(self, x):", "def forward(self, x, logger):")
    assert _log('logger.info("a")', module) is None


def test_logging_declines_when_the_helper_name_is_taken():
    module = LOG_MODULE.replace("logger = logging", "_gbfix_log = None\nlogger = logging")
    assert _log('logger.info("a")', module) is None


def test_logging_needs_leaf_function():
    assert _log('logger.info("a")', capabilities=ALL_CAPABILITIES - {"leaf_function"}) is None


# --- warnings.warn(...) -> leaf function ------------------------------------------

WARN_MODULE = '''\
import warnings

import torch


class LegacyWarning(UserWarning):
    pass


def f(x, category):
    {stmt}
    return x
'''


def _warn(stmt: str, module: str = WARN_MODULE) -> str | None:
    out = _rewrite(module.replace("{stmt}", stmt), WarnToLeaf, stmt.splitlines()[0], "GB0007")
    return None if out is None else out[out.index("def f(") :]


def test_warn_rule_example():
    example = _rule("GB0007", "deprecation warning")
    assert _rewrite(example.before, WarnToLeaf, "warnings.warn(", "GB0007") == example.after


@pytest.mark.parametrize(
    "stmt, expected",
    [
        ('warnings.warn("m")', '_gbfix_warn("m", "UserWarning")'),
        ('warnings.warn("m", FutureWarning, 2)', '_gbfix_warn("m", "FutureWarning", 2)'),
        ('warnings.warn(category=DeprecationWarning, message=f"m {x}", stacklevel=1)', '_gbfix_warn(f"m {x}", "DeprecationWarning", 1)'),
        ('warnings.warn("m", LegacyWarning)', '_gbfix_warn("m", "LegacyWarning")'),
    ],
)
def test_warn_rewrites(stmt, expected):
    out = _warn(stmt)
    assert out is not None and f"    {expected}\n" in out


def test_warn_keeps_a_multiline_call_layout():
    stmt = 'warnings.warn(\n        "m",\n        FutureWarning,\n        stacklevel=2,\n    )'
    assert '    _gbfix_warn(\n        "m",\n        "FutureWarning",\n        2,\n    )\n' in _warn(stmt)


def test_warn_helper_and_imports():
    out = _rewrite(WARN_MODULE.replace("{stmt}", 'warnings.warn("m")'), WarnToLeaf, "warnings.warn(", "GB0007")
    assert "import builtins" in out
    assert out.count("def _gbfix_warn(") == 1
    assert out.index("def _gbfix_warn(") < out.index("class LegacyWarning")


@pytest.mark.parametrize(
    "head, stmt",
    [
        ("from warnings import warn\n", 'warn("m", RuntimeWarning)'),
        ("import warnings as w\n", 'w.warn("m")'),
    ],
)
def test_warn_other_spellings(head, stmt):
    out = _warn(stmt, head + WARN_MODULE)
    assert out is not None and "_gbfix_warn(" in out


@pytest.mark.parametrize(
    "stmt",
    [
        'warnings.warn("m", category)',  # a local: the helper cannot find it by name
        'warnings.warn("m", torch.jit.TracerWarning)',  # dotted category
        'warnings.warn("m", FutureWarning, stacklevel=x)',
        'warnings.warn("m", FutureWarning, source=x)',
        'warnings.warn(LegacyWarning("m"))',  # a Warning instance carries its category
        'warnings.warn(*x)',
        'ok = warnings.warn("m")',
        "t0 = time.perf_counter()",  # GB0007 too, but not warnings.warn
    ],
)
def test_warn_declines(stmt):
    assert _warn(stmt) is None


def test_warn_declines_a_shadowed_warnings_module():
    module = WARN_MODULE.replace("def f(x, category):", "def f(x, warnings):")
    assert _warn('warnings.warn("m")', module) is None
