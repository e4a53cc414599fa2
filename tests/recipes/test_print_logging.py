"""Static tests of print-to-hop, logger-to-op/-leaf and warn-to-op/-leaf (no torch)."""

from __future__ import annotations

import contextlib
import io
import logging
import types
from pathlib import Path

import pytest

from gbfix import recipes
from gbfix.recipes.logging_call import LoggerToLeaf, LoggerToOp
from gbfix.recipes.print_call import PrintToHop, PrintToHopKeepTensor
from gbfix.recipes.print_op import PrintToOp
from gbfix.recipes.warn_call import WarnToLeaf, WarnToOp
from gbfix.rules import parse
from tests.helpers import ALL_CAPABILITIES, line_site, rewrite_at, rewrite_line, site_context

RULES = Path(__file__).resolve().parents[2] / "rules"


def _rule(code: str, title: str):
    return next(e for e in parse(RULES / f"{code}.md") if e.title.startswith(title))


# --- print -> torch._higher_order_ops.print -------------------------------------

PRINT_SITE = "import torch\n\n\ndef f(x, i, s):\n    {stmt}\n    return x\n"


def _print(stmt: str, head: str = "") -> str | None:
    """The rewritten statement, or None when the recipe declines."""
    source = head + PRINT_SITE.format(stmt=stmt)
    out = rewrite_at(source, PrintToHop, *line_site(source, stmt), "GB0059")
    if out is None:
        return None
    return out.splitlines()[source.splitlines().index("    " + stmt)].strip()


def test_print_rule_examples():
    first = _rule("GB0059", "f-string")
    assert rewrite_line(first.before, PrintToOp, "print(f", "GB0059") == first.after
    second = _rule("GB0059", "print with a separator")
    once = rewrite_line(second.before, PrintToOp, 'print("normalizing"', "GB0059")
    assert rewrite_line(once, PrintToOp, 'print("norms"', "GB0059") == second.after
    # print-to-hop writes the same call to torch's print op, without the helper
    hop = rewrite_line(first.before, PrintToHop, "print(f", "GB0059")
    assert 'torch._higher_order_ops.print("step {}: mean {:.4f} shape {}", step, logits.mean(), str(tuple(logits.shape)))' in hop


def test_print_rule_not_fixed():
    example = _rule("GB0059", "a progress line")
    assert rewrite_line(example.before, PrintToHop, "print(f", "GB0059") is None


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
    assert rewrite_at(source, PrintToHop, *line_site(source, "print(x)"), "GB0059", capabilities=frozenset()) is None


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


# --- print -> the print helper (library op for text known while tracing) ---------------


def _print_op(stmt: str, source: str = PRINT_SITE, **kw) -> str | None:
    source = source.format(stmt=stmt)
    return rewrite_at(source, PrintToOp, *line_site(source, stmt), "GB0059", **kw)


def test_print_op_calls_the_helper_with_print_to_hops_format():
    out = _print_op('print(f"block {i}: {tuple(x.shape)}")')
    assert '    gbfix_print("block {}: {}", i, str(tuple(x.shape)))\n' in out
    assert out.count("_gbfix_lib = torch.library.Library(") == 1
    assert '_gbfix_print_op = _gbfix_op("print", "str text", lambda text, sink: print(text))' in out
    # the helper picks the route while Dynamo traces: the op for constants, torch's print op otherwise
    assert "    if all([isinstance(v, (str, int, float, type(None))) for v in values]):\n" in out
    assert "        _gbfix_print_op(fmt.format(*values), _gbfix_sink)\n" in out
    assert "        torch._higher_order_ops.print(fmt, *values)\n" in out
    assert out.index("def gbfix_print(") < out.index("def f(")


def test_print_op_leaves_an_item_field_to_print_to_hop_keep_tensor():
    assert _print_op('print(f"loss {x.item():.4f}")') is None
    assert PrintToHopKeepTensor in recipes.candidates("GB0059", unsafe=False)


def test_print_op_is_preferred_and_declines_where_print_to_hop_does():
    order = [r.name for r in recipes.candidates("GB0059", unsafe=False)]
    assert order.index("print-to-op") < order.index("print-to-hop-keep-tensor") < order.index("print-to-hop")
    assert _print_op('print("x", file=s)') is None
    assert _print_op('print("x")', capabilities=ALL_CAPABILITIES - {"register_fake"}) is None
    assert _print_op('print("x")', PRINT_SITE.replace("def f(", "gbfix_print = None\n\n\ndef f(")) is None


# --- logger.<level>(...) -> library op, or leaf function ---------------------------

LOG_MODULE = """\
\"\"\"A model.\"\"\"
import logging

import torch

logger = logging.getLogger(__name__)


class M(torch.nn.Module):
    def forward(self, x):
        {stmt}
        return x
"""


def _log(stmt: str, module: str = LOG_MODULE, recipe=LoggerToOp, **kw) -> str | None:
    kw.setdefault("capabilities", ALL_CAPABILITIES)
    return rewrite_line(module.replace("{stmt}", stmt), recipe, stmt.splitlines()[0], "GB0291", **kw)


def _log_call(stmt: str, **kw) -> str | None:
    """The rewritten call alone, or None when the recipe declines."""
    out = _log(stmt, **kw)
    return None if out is None else out[out.index("def forward(") :].splitlines()[1].strip()


def test_logging_rule_example():
    example = _rule("GB0291", "deprecation warning")
    assert rewrite_line(example.before, LoggerToOp, "logger.warning(", "GB0291", capabilities=ALL_CAPABILITIES) == example.after


@pytest.mark.parametrize(
    "code, title, needle",
    [
        ("GB0291", "transformers' `warning_once`", "logger.warning_once("),
        ("GB0291", "a logger kept on `self`", "self.log.info("),
        ("GB6215", "a logger looked up inline", "logging.getLogger(__name__).warning("),
    ],
)
def test_logging_rule_examples_with_values_and_named_loggers(code, title, needle):
    from gbfix.records import ObservedCall, ValueSpec

    example = _rule(code, title)
    # what an uncompiled run shows of forward's calls (the step logged is an int)
    line = example.before.splitlines().index("    def forward(self, x, step):") + 1 if "step):" in example.before else 0
    args = (("self", ValueSpec("module")), ("x", ValueSpec("tensor")), ("step", ValueSpec("int", value=0)))
    observed = {line: (ObservedCall(args, ValueSpec("tensor")),)}
    after = rewrite_line(example.before, LoggerToOp, needle, code, capabilities=ALL_CAPABILITIES, observed=observed)
    assert after == example.after


def test_logging_leaf_takes_what_the_op_declines():
    # a torch.Size is neither plain nor a tensor: only the leaf (eager backend) takes it
    stmt = 'logger.info("shape %s", x.shape)'
    assert _log(stmt) is None
    assert _log_call(stmt, recipe=LoggerToLeaf) == '_gbfix_log_logger("info", "shape %s", x.shape)'


def test_logging_op_helper():
    out = _log('logger.warning("x")')
    lines = out.splitlines()
    at = lines.index("import torch") + 3
    # the op library and sink come first, with their comment, then the op and the helper
    assert lines[at] == "# Ops named after this module (ops are process-wide), each writing to this"
    assert '_gbfix_lib = torch.library.Library("gbfix", "FRAGMENT")' in lines
    assert lines.index("_gbfix_sink = torch.empty(0)") < lines.index("def _gbfix_log_body(logger, method, kinds, texts, numbers, tensors, sink):")
    assert lines.index("def _gbfix_op(name, schema, body, tags=()):") < lines.index("def gbfix_log(logger, method, *args, template=False):")
    # the op writes to the sink: that keeps it in inductor's graph, in order
    assert '        _gbfix_log_op(-1, method, ("f" if template else "") + kinds, texts, numbers, tensors, _gbfix_sink)' in lines
    assert "effects" not in out  # no private effect registration
    assert "gbfix_print" not in out and "gbfix_warn" not in out  # only the helper this site calls
    assert '        gbfix_log(logger, "warning", "x")' in lines
    assert "\n\n\nlogger = logging.getLogger(__name__)" in out
    assert "globals()" not in out  # the logger itself reaches the op, not its global's name


def test_logging_second_site_replaces_only_the_call():
    once = _log('logger.info("a")')
    twice = rewrite_line(once.replace('gbfix_log(logger, "info", "a")', 'logging.getLogger("x").debug("b %d", 1)'), LoggerToOp, 'logging.getLogger("x")', "GB0291", capabilities=ALL_CAPABILITIES)
    assert twice.count("def gbfix_log(") == 1 and twice.count("def _gbfix_op(") == 1
    assert 'gbfix_log("x", "debug", "b %d", 1)' in twice


def test_logging_op_and_leaf_helpers_side_by_side():
    once = _log('logger.info("a %s", x)', recipe=LoggerToLeaf)
    twice = rewrite_line(once.replace('_gbfix_log_logger("info", "a %s", x)', 'logger.info("b")'), LoggerToOp, 'logger.info("b")', "GB0291", capabilities=ALL_CAPABILITIES)
    assert twice.count("def gbfix_log_leaf(") == 1 and twice.count("def gbfix_log(") == 1
    assert twice.count("_gbfix_log_logger = gbfix_log_leaf(lambda: logger)\n") == 1


@pytest.mark.parametrize(
    "stmt, expected",
    [
        ('logger.warning("`use_cache` is deprecated")', 'gbfix_log(logger, "warning", "`use_cache` is deprecated")'),
        ('logger.info("step %d of %s", 3, "a")', 'gbfix_log(logger, "info", "step %d of %s", 3, "a")'),
        ('logger.error("a" "b")', 'gbfix_log(logger, "error", "a" "b")'),
        ('logger.warning_once("deprecated")', 'gbfix_log(logger, "warning_once", "deprecated")'),
        # what transformers writes: an f-string, whose template the op formats at run time
        # (Dynamo formats an f-string with a tensor field lazily: no text to hand the op)
        (
            'logger.warning_once(f"{type(self).__name__} does not support {x.shape[-1]} heads")',
            'gbfix_log(logger, "warning_once", "{} does not support {} heads", type(self).__name__, x.shape[-1], template=True)',
        ),
        ('logger.info(f"loss {x.mean():.4f} {x.shape} {{}}")', 'gbfix_log(logger, "info", "loss {:.4f} {} {{}}", x.mean(), str(x.shape), template=True)'),
        ('logger.info_once("n %d", x.size(0))', 'gbfix_log(logger, "info_once", "n %d", x.size(0))'),
        ('logger.log(logging.INFO, "a %s", 1)', 'gbfix_log(logger, "log", logging.INFO, "a %s", 1)'),
        ('logging.warning("root")', 'gbfix_log(logging, "warning", "root")'),  # the module: the op calls it
        # a logger looked up inline: by the name it is given
        ('logging.getLogger(__name__).warning("a")', 'gbfix_log(__name__, "warning", "a")'),
        ("logging.getLogger('x.y').info('a %s', 1)", "gbfix_log('x.y', \"info\", 'a %s', 1)"),
        ('logging.getLogger().info("a")', 'gbfix_log(None, "info", "a")'),
    ],
)
def test_logging_op_rewrites(stmt, expected):
    assert _log_call(stmt) == expected


def test_logging_op_keeps_a_multiline_call_layout():
    stmt = 'logger.warning(\n            "a %s",\n            1,\n        )'
    out = _log(stmt)
    assert '        gbfix_log(\n            logger,\n            "warning",\n            "a %s",\n            1,\n        )\n' in out


SELF_LOGGER = LOG_MODULE.replace(
    "class M(torch.nn.Module):\n",
    "class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        {init}\n\n",
)


@pytest.mark.parametrize(
    "init",
    [
        'self.log = logging.getLogger("m.self")',
        "self.log: logging.Logger = logging.getLogger(name)",  # a name known at run time only
        "pass\n\n    log = logging.getLogger(__name__)",  # class level
        "pass",  # never assigned in the class: set from outside
        'self.log = logging.Logger("not registered")',  # no name finds it: the object itself goes
    ],
)
def test_logging_op_self_logger(init):
    # the helper gets the logger the call names, whatever the class assigns: Dynamo pins it
    module = SELF_LOGGER.replace("{init}", init)
    out = _log('self.log.info("a")', module)
    assert '        gbfix_log(self.log, "info", "a")\n' in out and out.count("def gbfix_log(") == 1


@pytest.mark.parametrize(
    "stmt",
    [
        'logging.getLogger(name).info("a")',  # the name is known at run time only
        'logging.getLogger(f"m.{i}").info("a")',
        'get_logger(__name__).info("a")',  # not logging.getLogger
        'logger.info("a", exc_info=True)',
        'logger.info("a %s", **kw)',  # may hold exc_info=, extra=
        'logger.exception("failed")',
        'logger.setLevel("INFO")',
        'ok = logger.info("a")',  # the result is used
        "logger.info()",
        # values that may be neither plain nor a tensor: the helper would log them
        # itself, breaking in its own code
        'logger.info("x %s", x)',  # a parameter not seen in an uncompiled run
        'logger.info("shape %s", x.shape)',  # a torch.Size
        'logger.info("n %s", x.size())',
        'logger.info("xs %s", [x, x])',
        'logger.info("xs %s", x.tolist())',
        'logger.info("xs %s", tuple(x))',
        'logger.info("n %s", n)',  # a local bound by a for loop (not over range: an int)
        'logger.info("n %s", m)',  # a local assigned a torch.Size
        'logger.info(f"n {m}")',  # the same, as an f-string field
        'logger.info(f"n {x:{n}}")',  # a nested format spec
        'logger.log(logging.INFO, f"n {x}")',  # an f-string with arguments
    ],
)
def test_logging_op_declines(stmt):
    module = LOG_MODULE.replace("        {stmt}", "        m = x.shape\n        for n in x.shape:\n            {stmt}")
    assert _log(stmt, module) is None


def test_logging_op_takes_a_loop_counter_over_range():
    module = LOG_MODULE.replace("        {stmt}", "        for n in range(2):\n            {stmt}")
    assert 'gbfix_log(logger, "info", "n %s", n)' in _log('logger.info("n %s", n)', module)


def test_logging_op_takes_a_local_bound_by_walrus_like_an_assignment():
    # `(n := int(...))` binds a number, `(m := x.shape)` a torch.Size, as `=` would
    module = LOG_MODULE.replace(
        "        {stmt}", "        if (n := int(x.sum())) > 0 and (m := x.shape):\n            {stmt}"
    )
    assert 'gbfix_log(logger, "info", "n %d", n)' in _log('logger.info("n %d", n)', module)
    assert _log('logger.info("m %s", m)', module) is None


@pytest.mark.parametrize(
    "stmt",
    [
        # tensors go to the op as tensors: the logger formats them at run time
        'logger.debug("load %s", probs.mean(0))',
        'logger.info("t %s", torch.ones(1))',
        'logger.info("x %s", x[0])',
        'logger.info("loss %.4f", loss)',  # a local assigned a call
        'logger.info("w %s", self.weight)',  # an attribute chain (an nn.Parameter is logged by the logger itself)
    ],
)
def test_logging_op_takes_tensors(stmt):
    module = LOG_MODULE.replace("        {stmt}", "        probs = x.softmax(-1)\n        loss = (x * 2).mean()\n        {stmt}")
    out = _log(stmt, module)
    assert out is not None and f"gbfix_log(logger, \"{stmt.split('(')[0].split('.')[1]}\", " in out


@pytest.mark.parametrize("kind, fixed", [("int", True), ("float", True), ("tensor", True), ("list", False), ("other", False)])
def test_logging_op_parameter_kinds_from_an_uncompiled_run(kind, fixed):
    from gbfix.records import ObservedCall, ValueSpec

    module = LOG_MODULE.replace("def forward(self, x):", "def forward(self, x, step):")
    calls = (ObservedCall((("self", ValueSpec("module")), ("x", ValueSpec("tensor")), ("step", ValueSpec(kind))), ValueSpec("tensor")),)
    line = module.splitlines().index("    def forward(self, x, step):") + 1
    out = _log('logger.info("step %d", step)', module, observed={line: calls})
    assert (out is not None) == fixed
    # the recipe asks to see the function only when a parameter is logged
    source = module.replace("{stmt}", 'logger.info("step %d", step)')
    assert _observe(source, 'logger.info("step %d", step)') == "forward"
    assert _observe(module.replace("{stmt}", 'logger.info("a")'), 'logger.info("a")') is None
    # a site declined whatever the run shows asks for nothing (and raises nothing)
    assert _observe(module.replace("{stmt}", 'logger.info(f"{step:{x}}")'), 'logger.info(f"{step') is None


HOOK_FACTORY = LOG_MODULE.replace(
    "class M(torch.nn.Module):",
    "def make_hook(name):\n    def hook(module, args):\n        {stmt}\n    return hook\n\n\nclass M(torch.nn.Module):",
).replace("        {stmt}\n        return x", "        return x")


@pytest.mark.parametrize("kind, fixed", [("str", True), ("int", True), ("tensor", True), ("list", False), ("other", False)])
def test_logging_op_takes_a_factorys_argument_by_its_observed_kinds(kind, fixed):
    # a closure variable of the hook: the factory's calls (at import) tell what it is
    from gbfix.records import ObservedCall, ValueSpec

    line = HOOK_FACTORY.splitlines().index("def make_hook(name):") + 1
    calls = (ObservedCall((("name", ValueSpec(kind)),), ValueSpec("other")),)
    out = _log('logger.info("hook %s", name)', HOOK_FACTORY, observed={line: calls})
    assert (out is not None) == fixed
    assert out is None or '        gbfix_log(logger, "info", "hook %s", name)\n' in out
    assert _observe(HOOK_FACTORY.replace("{stmt}", 'logger.info("hook %s", name)'), 'logger.info("hook %s"') == "make_hook"


def _observe(source: str, needle: str, recipe=LoggerToOp, code: str = "GB0291") -> str | None:
    from gbfix.locate import ParsedFile
    from gbfix.recipes.base import SiteContext
    from gbfix.records import Break, Cause, Frame, Site
    from gbfix.sources import SourceFile

    parsed = ParsedFile(SourceFile(Path("/virtual/example.py"), source.encode(), source, "utf-8"))
    line, col, end = line_site(source, needle)
    brk = Break(causes=(Cause(code, code, ""),), stack=(Frame("/virtual/example.py", line, col, end, "f"),))
    site = Site(Path("/virtual/example.py"), line, col, end, brk)
    fn = recipe().observe(SiteContext(site, parsed.node_at(line, col, end), parsed, ALL_CAPABILITIES))
    return None if fn is None else fn.name.value


def _send(rewritten_module: str) -> dict:
    """The helper a rewrite added, run without torch as Dynamo would run it while
    tracing: the op's call is recorded, and the comptime callback after it pins the
    logger and runs the op's body with that call's arguments."""
    import ast as _ast
    import sys

    tree = _ast.parse(rewritten_module)
    defs = [n for n in tree.body if isinstance(n, _ast.FunctionDef) and n.name in ("gbfix_log", "_gbfix_log_body", "_gbfix_log_call", "_gbfix_pack", "_gbfix_unpack")]
    calls: list[tuple] = []

    def comptime(callback):
        env["_gbfix_pinned"][:] = [sys._getframe(1).f_locals["logger"]]
        _, *rest = calls.pop()
        env["_gbfix_log_body"](0, *rest)

    dynamo = types.SimpleNamespace(comptime=types.SimpleNamespace(comptime=comptime))
    compiler = types.SimpleNamespace(is_compiling=lambda: True)
    torch = types.SimpleNamespace(Tensor=type("Tensor", (), {}), compiler=compiler, _dynamo=dynamo)
    env: dict = {"_gbfix_sink": None, "_gbfix_pinned": [], "torch": torch, "logging": logging, "_gbfix_log_logger": None}
    exec(compile(_ast.Module(body=defs, type_ignores=[]), "<helpers>", "exec"), env)
    env["_gbfix_log_op"] = lambda *args: calls.append(args)
    return env


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.name, record.levelname, record.msg, record.args, record.getMessage()))


@pytest.mark.parametrize(
    "stmts",
    [
        ['logger.info("step %d of %s", 3, "a")'],
        ['logger.warning("%5.1f%% %r %x %s %s", 12.345, "q", 255, True, None)'],
        ["logger.error('100% %s')"],
        ['logger.log(logging.WARNING, "a" "%s", -2.5e3)'],
        ['logging.getLogger("gbfix.test").info("by name %d", 7)'],
        # once per distinct arguments, as the lru_cache compares them: 1 == 1.0, 1 != "1"
        ['logger.warning_once("n %s", 1)', 'logger.warning_once("n %s", 1.0)', 'logger.warning_once("n %s", "1")'],
        ['logger.warning_once("n %s", 1.0)', 'logger.warning_once("n 1.0")', 'logger.warning_once("n %s", 1.0)'],
        # an f-string: the op formats its template, the logger gets the same text (no args)
        ['logger.warning_once(f"{self.tag!r:>6} of {self.rate:.2f} {{x}}")', 'logger.info(f"{self.tag=} {self.rate}%")'],
    ],
)
def test_logging_op_rewrite_logs_the_same_record(stmts, monkeypatch):
    """The original and the rewritten calls, each run twice, on a logger with
    transformers' lru_cached warning_once: the same records (msg and args
    included) and the same once-per-distinct-arguments behaviour."""
    import functools

    @functools.lru_cache(None)
    def warning_once(self, *args, **kwargs):
        self.warning(*args, **kwargs)

    monkeypatch.setattr(logging.Logger, "warning_once", warning_once, raising=False)
    rewritten = [_log(stmt) for stmt in stmts]
    calls = [out[out.index("def forward(") :].splitlines()[1].strip() for out in rewritten]
    logger = logging.getLogger("gbfix.test")
    logger.setLevel(logging.DEBUG)
    handler = _Records()
    logger.addHandler(handler)
    seen = []
    try:
        for code in (stmts, calls):
            warning_once.cache_clear()
            handler.records.clear()
            env = _send(rewritten[0])  # the helpers' globals
            env.update(logger=logger, logging=logging, self=types.SimpleNamespace(tag="ab", rate=2.5))
            for line in code + code:
                exec(line, env)
            seen.append(list(handler.records))
    finally:
        logger.removeHandler(handler)
    assert calls != stmts and seen[0] and seen[0] == seen[1]


@pytest.mark.parametrize(
    "stmt, expected",
    [
        ('logger.log(logging.INFO, "a %s", x)', '_gbfix_log_logger("log", logging.INFO, "a %s", x)'),
        ('logger.warning_once("deprecated")', '_gbfix_log_logger("warning_once", "deprecated")'),
        ('logger.debug(f"x {x}")', '_gbfix_log_logger("debug", f"x {x}")'),
    ],
)
def test_logging_leaf_rewrites(stmt, expected):
    assert _log_call(stmt, recipe=LoggerToLeaf) == expected


@pytest.mark.parametrize(
    "stmt",
    [
        'self.logger.info("a")',
        'logger.info("a", exc_info=True)',
        'logger.info("a %s", **kw)',  # may hold exc_info=, extra=
        'logger.exception("failed")',
        'logger.setLevel("INFO")',
        'ok = logger.info("a")',
    ],
)
def test_logging_leaf_declines(stmt):
    assert _log(stmt, recipe=LoggerToLeaf) is None


def test_logging_star_arguments_go_through_as_they_are():
    # what `*values` holds is told apart at trace time (the helper's kinds), as before the call
    assert _log_call('logger.info("a %s %s", *x)') == 'gbfix_log(logger, "info", "a %s %s", *x)'
    assert _log_call('logger.info("%s %s", 3, *d.values())') == 'gbfix_log(logger, "info", "%s %s", 3, *d.values())'
    assert _log_call('logger.info("a %s %s", *x)', recipe=LoggerToLeaf) == '_gbfix_log_logger("info", "a %s %s", *x)'


def test_logging_op_takes_a_local_logger_and_the_leaf_declines_it():
    # the op's helper gets the logger object; the leaf's finds it by its global's name
    module = LOG_MODULE.replace("def forward(self, x):", "def forward(self, x, logger):")
    assert _log_call('logger.info("a")', module=module) == 'gbfix_log(logger, "info", "a")'
    assert _log('logger.info("a")', module, recipe=LoggerToLeaf) is None


@pytest.mark.parametrize("recipe", [LoggerToOp, LoggerToLeaf])
def test_logging_declines_when_the_helper_name_is_taken(recipe):
    module = LOG_MODULE.replace("logger = logging", f"{recipe.helper} = None\nlogger = logging")
    assert _log('logger.info("a")', module, recipe=recipe) is None


@pytest.mark.parametrize("recipe, capability", [(LoggerToOp, "register_fake"), (LoggerToLeaf, "leaf_function")])
def test_logging_needs_its_capability(recipe, capability):
    assert _log('logger.info("a")', recipe=recipe, capabilities=ALL_CAPABILITIES - {capability}) is None


# --- warnings.warn(...) -> library op, or leaf function -----------------------------

WARN_MODULE = """\
import warnings

import torch


class LegacyWarning(UserWarning):
    pass


def f(x, category):
    {stmt}
    return x
"""


def _warn(stmt: str, module: str = WARN_MODULE, recipe=WarnToOp) -> str | None:
    out = rewrite_line(module.replace("{stmt}", stmt), recipe, stmt.splitlines()[0], "GB0007", capabilities=ALL_CAPABILITIES)
    return None if out is None else out[out.index("def f(") :]


def _line_of(source: str, needle: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if needle in text)


def test_warn_rule_example():
    example = _rule("GB0007", "deprecation warning")
    after = rewrite_line(example.before, WarnToOp, "warnings.warn(", "GB0007", capabilities=ALL_CAPABILITIES)
    assert after == example.after
    # the call names the category and the stacklevel as before, and no line: the helper finds the frame
    assert 'instead", FutureWarning, stacklevel=2)\n' in after


def test_warn_rule_example_in_a_context_manager():
    example = _rule("GB0007", "a warning inside a context manager")
    assert rewrite_line(example.before, WarnToOp, "warnings.warn(", "GB0007", capabilities=ALL_CAPABILITIES) == example.after


def test_warn_op_declines_an_f_string_of_a_generators_parameters():
    # the uncompiled run does not observe generators (a context manager's body is one):
    # a parameter in the message might be a tensor, which Dynamo would format lazily
    assert rewrite_line(WARN_PLACES, WarnToOp, 'warnings.warn(f"legacy_scope', "GB0007", capabilities=ALL_CAPABILITIES) is None


def test_warn_rule_example_with_values():
    # the f-string is built while Dynamo traces (a static shape, an attribute): text for the op
    example = _rule("GB0007", "a message formatted with values")
    assert rewrite_line(example.before, WarnToOp, "warnings.warn(", "GB0007", capabilities=ALL_CAPABILITIES) == example.after
    # warn-to-leaf, tried when the op's edit is rejected, passes the same expression
    leaf = rewrite_line(example.before, WarnToLeaf, "warnings.warn(", "GB0007", capabilities=ALL_CAPABILITIES)
    assert '_gbfix_warn_UserWarning(f"got {tokens.shape[1]} tokens, keeping the first {self.max_len}")' in leaf


@pytest.mark.parametrize(
    "stmt, expected",
    [
        ('warnings.warn("m")', 'gbfix_warn("m")'),
        ('warnings.warn("m", FutureWarning, 2)', 'gbfix_warn("m", FutureWarning, 2)'),  # the helper takes the stacklevel
        ('warnings.warn("m", stacklevel=3)', 'gbfix_warn("m", stacklevel=3)'),
        ('warnings.warn(category=DeprecationWarning, message="m", stacklevel=1)', 'gbfix_warn(category=DeprecationWarning, message="m", stacklevel=1)'),
        # the warning names the frame the stacklevel names: the module's filters are the original's
        ('warnings.warn("m", DeprecationWarning, stacklevel=2)', 'gbfix_warn("m", DeprecationWarning, stacklevel=2)'),
        ('warnings.warn("m", PendingDeprecationWarning, 2)', 'gbfix_warn("m", PendingDeprecationWarning, 2)'),
        ('warnings.warn("m", LegacyWarning, stacklevel=2)', 'gbfix_warn("m", LegacyWarning, stacklevel=2)'),
        ('warnings.warn("m", LegacyWarning)', 'gbfix_warn("m", LegacyWarning)'),
        ("warnings.warn('a' 'b', RuntimeWarning)", "gbfix_warn('a' 'b', RuntimeWarning)"),
        # the category as the call names it: Dynamo hands the class to the helper
        ('warnings.warn("m", category)', 'gbfix_warn("m", category)'),
        ('warnings.warn("m", torch.jit.TracerWarning)', 'gbfix_warn("m", torch.jit.TracerWarning)'),
        # any message: built while Dynamo traces (the helper's arguments, a static shape)
        (
            'warnings.warn(f"`{LegacyWarning.__name__}` is deprecated", FutureWarning)',
            'gbfix_warn(f"`{LegacyWarning.__name__}` is deprecated", FutureWarning)',
        ),
        ('warnings.warn("m" + x, stacklevel=2)', 'gbfix_warn("m" + x, stacklevel=2)'),
    ],
)
def test_warn_op_rewrites(stmt, expected):
    out = rewrite_line(WARN_MODULE.replace("{stmt}", stmt), WarnToOp, stmt, "GB0007", capabilities=ALL_CAPABILITIES)
    assert out is not None
    assert f"    {expected}\n" in out


WARN_PLACES = """\
import contextlib
import warnings

import torch


def deprecate(name, version, message):
    warnings.warn(f"`{name}` is deprecated and will be removed in {version}. {message}", FutureWarning, stacklevel=2)


@contextlib.contextmanager
def legacy_scope(name):
    warnings.warn(f"legacy_scope({name!r}) is deprecated", DeprecationWarning)
    yield


def chunks(x, n):
    warnings.warn("chunks() is deprecated, use torch.chunk")
    for i in range(n):
        yield x[i]
"""


@pytest.mark.parametrize(
    "needle, expected",
    [
        # a helper of the package: its arguments are known while Dynamo traces each caller
        ("warnings.warn(f\"`{name}`", 'gbfix_warn(f"`{name}` is deprecated and will be removed in {version}. {message}", FutureWarning, stacklevel=2)'),
        # a context manager and a generator: Dynamo traces both
        ("warnings.warn(f\"legacy_scope", 'gbfix_warn(f"legacy_scope({name!r}) is deprecated", DeprecationWarning)'),
        ('warnings.warn("chunks()', 'gbfix_warn("chunks() is deprecated, use torch.chunk")'),
    ],
)
def test_warn_op_in_helpers_context_managers_and_generators(needle, expected):
    from gbfix.records import ObservedCall, ValueSpec

    # what an uncompiled run shows of the helpers' calls: text
    lines = WARN_PLACES.splitlines()
    text = ValueSpec("str", value="v")
    observed = {
        lines.index("def deprecate(name, version, message):") + 1: (ObservedCall((("name", text), ("version", text), ("message", text)), ValueSpec("none")),),
        lines.index("@contextlib.contextmanager") + 1: (ObservedCall((("name", text),), ValueSpec("other")),),
    }
    out = rewrite_line(WARN_PLACES, WarnToOp, needle, "GB0007", capabilities=ALL_CAPABILITIES, observed=observed)
    assert out is not None
    call = next(line for line in out.splitlines() if line.startswith("    gbfix_warn("))
    assert call == "    " + expected


# A decorator factory's wrapper warns with the factory's arguments (closure variables):
# the uncompiled run observes the factory's calls (at import, when it decorates).
WARN_FACTORIES = """\
import functools
import warnings

import torch


def deprecated_kwarg(old, new):
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if old in kwargs:
                warnings.warn(f"`{old}` is deprecated, use `{new}`", DeprecationWarning)
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)
        return wrapper
    return deco


def deprecated(message, *, category=FutureWarning):
    def deco(fn):
        def wrapper(*args, **kwargs):
            warnings.warn(message, category, stacklevel=2)
            return fn(*args, **kwargs)
        return wrapper
    return deco


def make_hook(name):
    def hook(module, args):
        warnings.warn(f"hook {name!r} ran", stacklevel=2)
    return hook


def renamed(old):
    old = old.lower()
    def deco(fn):
        def wrapper(*args, **kwargs):
            warnings.warn(f"{old} was renamed")
            return fn(*args, **kwargs)
        return wrapper
    return deco


def retitled(old):
    def deco(fn):
        def wrapper(*args, **kwargs):
            warnings.warn(f"{old} was retitled")
            return fn(*args, **kwargs)
        def rename(to):
            nonlocal old
            old = to
        wrapper.rename = rename
        return wrapper
    return deco


def by_lambda(fn):
    return lambda old: warnings.warn(f"{old} is gone")
"""


def _factory_calls(source: str, **params) -> dict[int, tuple]:
    """What an uncompiled run shows of each factory's calls: kinds by parameter, by factory name."""
    from gbfix.records import ObservedCall, ValueSpec

    lines = source.splitlines()
    first = {fn: next(i for i, line in enumerate(lines, 1) if line.startswith(f"def {fn}(")) for fn in params}
    return {
        first[fn]: (ObservedCall(tuple((n, ValueSpec(kind, value="v" if kind == "str" else None)) for n, kind in args.items()), ValueSpec("other")),)
        for fn, args in params.items()
    }


TEXT_FACTORIES = dict(
    deprecated_kwarg={"old": "str", "new": "str"},
    deprecated={"message": "str", "category": "other"},
    make_hook={"name": "str"},
    renamed={"old": "str"},
    retitled={"old": "str"},
)


@pytest.mark.parametrize(
    "needle, expected",
    [
        ("warnings.warn(f\"`{old}`", 'gbfix_warn(f"`{old}` is deprecated, use `{new}`", DeprecationWarning)'),  # two levels up
        ("warnings.warn(message", "gbfix_warn(message, category, stacklevel=2)"),  # the message itself, a keyword-only category
        ('warnings.warn(f"hook', 'gbfix_warn(f"hook {name!r} ran", stacklevel=2)'),  # a hook made by a function
    ],
)
def test_warn_op_takes_a_factorys_arguments(needle, expected):
    out = rewrite_line(WARN_FACTORIES, WarnToOp, needle, "GB0007", observed=_factory_calls(WARN_FACTORIES, **TEXT_FACTORIES))
    assert out is not None
    assert next(line.strip() for line in out.splitlines() if line.strip().startswith("gbfix_warn(")) == expected


def test_warn_op_observes_the_factory():
    # the factory's calls tell what its arguments are, not the wrapper's (which has no `old`)
    ctx = site_context(WARN_FACTORIES, *line_site(WARN_FACTORIES, "warnings.warn(f\"`{old}`"), "GB0007")
    fn = WarnToOp().observe(ctx)
    assert fn is not None and fn.name.value == "deprecated_kwarg"


@pytest.mark.parametrize(
    "needle, calls",
    [
        ("warnings.warn(f\"`{old}`", {}),  # no observation: may be a tensor
        ("warnings.warn(f\"`{old}`", {**TEXT_FACTORIES, "deprecated_kwarg": {"old": "tensor", "new": "str"}}),
        ("warnings.warn(message", {**TEXT_FACTORIES, "deprecated": {"message": "other", "category": "other"}}),
        ('warnings.warn(f"{old} was renamed', TEXT_FACTORIES),  # rebound in the factory: the call saw another value
        ('warnings.warn(f"{old} was retitled', TEXT_FACTORIES),  # rebound by a nonlocal
        ('warnings.warn(f"{old} is gone', TEXT_FACTORIES),  # a lambda's parameter, never observed
    ],
)
def test_warn_op_declines_a_closure_it_cannot_vouch_for(needle, calls):
    assert rewrite_line(WARN_FACTORIES, WarnToOp, needle, "GB0007", observed=_factory_calls(WARN_FACTORIES, **calls)) is None


def test_warn_op_second_site_shares_the_helper():
    once = rewrite_line(WARN_MODULE.replace("{stmt}", 'warnings.warn("a")\n    warnings.warn("b")'), WarnToOp, 'warnings.warn("a")', "GB0007", capabilities=ALL_CAPABILITIES)
    twice = rewrite_line(once, WarnToOp, 'warnings.warn("b")', "GB0007", capabilities=ALL_CAPABILITIES)
    assert twice.count("def gbfix_warn(") == 1
    assert '    gbfix_warn("a")\n    gbfix_warn("b")\n' in twice


def test_a_second_helper_goes_after_the_first():
    module = LOG_MODULE.replace("import logging\n", "import logging\nimport warnings\n")
    module = module.replace("{stmt}", 'warnings.warn("w")\n        logger.info("a")')
    once = rewrite_line(module, WarnToOp, "warnings.warn(", "GB0007", capabilities=ALL_CAPABILITIES)
    twice = rewrite_line(once, LoggerToOp, "logger.info(", "GB0291", capabilities=ALL_CAPABILITIES)
    # the log helper goes after the helpers already there (it uses their library), above the call
    assert twice.count("_gbfix_lib = torch.library.Library(") == 1
    assert twice.index("_gbfix_sink = ") < twice.index("def gbfix_warn(") < twice.index("def gbfix_log(")
    assert twice.index("def gbfix_log(") < twice.index("class M(")
    assert '        gbfix_warn("w")\n        gbfix_log(logger, "info", "a")\n' in twice


def test_warn_op_keeps_a_multiline_call_layout():
    for stmt in ('warnings.warn(\n        "m",\n        FutureWarning,\n        stacklevel=2,\n    )', 'warnings.warn(\n        "m",\n        FutureWarning,\n    )'):
        out = rewrite_line(WARN_MODULE.replace("{stmt}", stmt), WarnToOp, "warnings.warn(", "GB0007", capabilities=ALL_CAPABILITIES)
        assert "    " + stmt.replace("warnings.warn(", "gbfix_warn(") + "\n" in out


def test_warn_op_helper_and_imports():
    out = rewrite_line(WARN_MODULE.replace("{stmt}", 'warnings.warn("m")'), WarnToOp, "warnings.warn(", "GB0007", capabilities=ALL_CAPABILITIES)
    assert out.startswith("import io\nimport sys\nimport warnings\n\nimport torch\n\n\n# Ops named after this module")
    assert "builtins" not in out and "globals()[" not in out
    assert out.count("def gbfix_warn(") == 1
    assert "    warnings.warn_explicit(\n" in out
    assert '_gbfix_warn_op = _gbfix_op("warn", "int where, str message", _gbfix_warn_body)\n' in out
    assert "        _gbfix_warn_op(-1, message, _gbfix_sink)\n" in out
    assert out.index("def gbfix_warn(") < out.index("class LegacyWarning")


@pytest.mark.parametrize(
    "stmt",
    [
        # a message that may hold a tensor: Dynamo formats it lazily, not text for the op
        "warnings.warn(x)",  # a parameter an uncompiled run did not show as text
        'warnings.warn(f"mean {x.mean():.3f} is large")',
        'warnings.warn(f"x is {x}")',
        'warnings.warn("m", FutureWarning, stacklevel=0)',  # names warnings.warn's own frame
        'warnings.warn("m", categories[0])',  # not a name: evaluated once, as before, but kept simple
        'warnings.warn("m", FutureWarning, stacklevel=x)',
        'warnings.warn("m", FutureWarning, source=x)',
        'warnings.warn(LegacyWarning("m"))',  # a Warning instance carries its category
        "warnings.warn(*x)",
        'ok = warnings.warn("m")',
        "t0 = time.perf_counter()",  # GB0007 too, but not warnings.warn
    ],
)
def test_warn_op_declines(stmt):
    assert _warn(stmt) is None


@pytest.mark.parametrize(
    "stmt, expected",
    [
        ('warnings.warn("m")', '_gbfix_warn_UserWarning("m")'),
        ('warnings.warn("m", FutureWarning, 2)', '_gbfix_warn_FutureWarning("m", 2)'),
        ('warnings.warn(category=DeprecationWarning, message=f"m {x}", stacklevel=1)', '_gbfix_warn_DeprecationWarning(f"m {x}", 1)'),
        ('warnings.warn("m", LegacyWarning, stacklevel=2)', '_gbfix_warn_LegacyWarning("m", 2)'),
    ],
)
def test_warn_leaf_rewrites(stmt, expected):
    out = _warn(stmt, recipe=WarnToLeaf)
    assert out is not None and f"    {expected}\n" in out


def test_warn_leaf_keeps_a_multiline_call_layout():
    stmt = 'warnings.warn(\n        "m",\n        FutureWarning,\n        stacklevel=2,\n    )'
    assert '    _gbfix_warn_FutureWarning(\n        "m",\n        2,\n    )\n' in _warn(stmt, recipe=WarnToLeaf)


def test_warn_leaf_helper_and_imports():
    # a script: the factory, then the module's helper for the category, built from the class itself
    out = rewrite_line(WARN_MODULE.replace("{stmt}", 'warnings.warn("m", LegacyWarning)'), WarnToLeaf, "warnings.warn(", "GB0007", capabilities=ALL_CAPABILITIES)
    assert "import builtins" not in out and "globals()" not in out and '"LegacyWarning"' not in out
    assert out.count("def gbfix_warn_leaf(") == 1
    # the lambda looks the class up when the helper runs: the line may come before the class
    line = "_gbfix_warn_LegacyWarning = gbfix_warn_leaf(lambda: LegacyWarning)\n"
    assert out.count(line) == 1
    assert out.index("def gbfix_warn_leaf(") < out.index(line) < out.index("class LegacyWarning")


@pytest.mark.parametrize("recipe", [WarnToOp, WarnToLeaf])
@pytest.mark.parametrize(
    "head, stmt",
    [
        ("from warnings import warn\n", 'warn("m", RuntimeWarning)'),
        ("import warnings as w\n", 'w.warn("m")'),
    ],
)
def test_warn_other_spellings(recipe, head, stmt):
    out = _warn(stmt, head + WARN_MODULE, recipe=recipe)
    assert out is not None and ("gbfix_warn(" if recipe is WarnToOp else "_gbfix_warn_") in out


@pytest.mark.parametrize(
    "stmt",
    [
        'warnings.warn("m", category)',
        'warnings.warn("m", torch.jit.TracerWarning)',
        'warnings.warn("m", FutureWarning, stacklevel=x)',
        'warnings.warn("m", FutureWarning, source=x)',
        'warnings.warn(LegacyWarning("m"))',
        "warnings.warn(*x)",
        'ok = warnings.warn("m")',
        "t0 = time.perf_counter()",
    ],
)
def test_warn_leaf_declines(stmt):
    assert _warn(stmt, recipe=WarnToLeaf) is None


@pytest.mark.parametrize("recipe", [WarnToOp, WarnToLeaf])
def test_warn_declines_a_shadowed_warnings_module(recipe):
    module = WARN_MODULE.replace("def f(x, category):", "def f(x, warnings):")
    assert _warn('warnings.warn("m")', module, recipe=recipe) is None


def test_warn_op_needs_register_fake():
    source = WARN_MODULE.replace("{stmt}", 'warnings.warn("m")')
    assert rewrite_line(source, WarnToOp, "warnings.warn(", "GB0007", capabilities=ALL_CAPABILITIES - {"register_fake"}) is None


def test_keep_tensor_passes_the_tensor_for_an_item_field():
    from gbfix.recipes.print_call import PrintToHopKeepTensor

    src = 'import torch\n\ndef f(loss):\n    print(f"loss {loss.item():.4f} step {loss.item()}")\n'
    out = rewrite_at(src, PrintToHopKeepTensor, 4, 4, 55, "GB0059")
    assert 'torch._higher_order_ops.print("loss {:.4f} step {}", loss, loss)' in out
    # A conversion formats the tensor's str(), not its item's: not kept.
    assert rewrite_at(src.replace("loss.item()}", "loss.item()!r}"), PrintToHopKeepTensor, 4, 4, 57, "GB0059") is not None
    plain = 'import torch\n\ndef f(x):\n    print(f"x {x.item()!s}")\n'
    assert rewrite_at(plain, PrintToHopKeepTensor, 4, 4, 27, "GB0059") is None  # nothing to keep: print-to-hop's job


@pytest.mark.parametrize("kind, fixed", [("str", True), ("tensor", False), (None, False)])
def test_warn_op_helper_parameters_by_an_uncompiled_run(kind, fixed):
    from gbfix.records import ObservedCall, ValueSpec

    lines = WARN_PLACES.splitlines()
    line = lines.index("def deprecate(name, version, message):") + 1
    args = tuple((n, ValueSpec(kind or "str")) for n in ("name", "version", "message"))
    observed = {} if kind is None else {line: (ObservedCall(args, ValueSpec("none")),)}
    out = rewrite_line(WARN_PLACES, WarnToOp, 'warnings.warn(f"`{name}`', "GB0007", capabilities=ALL_CAPABILITIES, observed=observed)
    assert (out is not None) == fixed


def test_warn_op_asks_to_observe_a_helper_whose_parameters_make_the_message():
    assert _observe(WARN_PLACES, 'warnings.warn(f"`{name}`', WarnToOp, "GB0007") == "deprecate"
    assert _observe(WARN_PLACES, 'warnings.warn("chunks()', WarnToOp, "GB0007") is None
    nested = WARN_PLACES.replace("{version}. {message}", "{version:{message}}")
    assert _observe(nested, 'warnings.warn(f"`{name}`', WarnToOp, "GB0007") is None


TRANSFORMERS_MODULE = '''\
import torch
from torch import nn

from ...utils import LossKwargs, logging

logger = logging.get_logger(__name__)


class LlamaForSequenceClassification(nn.Module):
    def forward(self, input_ids=None, inputs_embeds=None):
        if input_ids is None:
            logger.warning_once(
                f"{self.__class__.__name__} will not detect padding tokens in `inputs_embeds`. Results may be "
                "unexpected if using padding tokens in conjunction with `inputs_embeds.`"
            )
        return inputs_embeds
'''


def test_logging_op_on_transformers_own_spelling(tmp_path):
    """transformers 4.52's modeling_llama.py, in its package: its own `logging` module
    (untouched), get_logger, and an f-string concatenated with a string. The module
    gets one import and the call; the helper is in the package's generated module."""
    folder = tmp_path / "transformers" / "models" / "llama"
    folder.mkdir(parents=True)
    for d in (folder, folder.parent, folder.parent.parent):
        (d / "__init__.py").write_text("")
    path = folder / "modeling_llama.py"
    out = rewrite_line(TRANSFORMERS_MODULE, LoggerToOp, "logger.warning_once(", "GB0291", capabilities=ALL_CAPABILITIES, path=path)
    assert out.startswith("import torch\nfrom torch import nn\n\nfrom ...utils import LossKwargs, logging\nfrom ..._gbfix import gbfix_log\n\nlogger = ")
    assert "def " not in out.replace("    def forward(", "")
    call = out[out.index("            gbfix_log(") :]
    assert call.startswith(
        '            gbfix_log(\n                logger,\n                "warning_once",\n'
        '                "{} will not detect padding tokens in `inputs_embeds`. Results may be unexpected if using '
        'padding tokens in conjunction with `inputs_embeds.`",\n'
        "                self.__class__.__name__,\n                template=True\n            )\n"
    )


def test_in_a_file_the_log_helper_declines_a_module_whose_logging_is_another():
    # outside a package the helper would be added to the file with `import logging`
    assert rewrite_line(TRANSFORMERS_MODULE, LoggerToOp, "logger.warning_once(", "GB0291", capabilities=ALL_CAPABILITIES) is None


def test_leaf_helpers_are_declined_where_their_line_cannot_go(tmp_path):
    # the name of the module's helper is taken by something else
    taken = LOG_MODULE.replace("{stmt}", 'logger.info("a")').replace("logger = logging", "_gbfix_log_logger = 3\nlogger = logging")
    assert rewrite_line(taken, LoggerToLeaf, "logger.info(", "GB0291", capabilities=ALL_CAPABILITIES) is None
    # a package module without `import torch`: the line building the helper would import it
    (tmp_path / "__init__.py").write_text("")
    module = WARN_MODULE.replace("import torch\n", "").replace("{stmt}", 'warnings.warn("m")')
    path = tmp_path / "m.py"
    assert rewrite_line(module, WarnToOp, "warnings.warn(", "GB0007", capabilities=ALL_CAPABILITIES, path=path) is not None
    assert rewrite_line(module, WarnToLeaf, "warnings.warn(", "GB0007", capabilities=ALL_CAPABILITIES, path=path) is None
