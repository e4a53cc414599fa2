"""Static tests (no torch) of compile-generator-body (generator) and
timing-under-compile (timing): the rules/ examples, the real-world fixtures,
variants, and the cases each must decline."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from gbfix import rules
from gbfix.recipes import timing
from gbfix.recipes.generator import CompileGeneratorBody
from gbfix.recipes.timing import ClockIntoBranch, ClockUnderCompile, SkipTiming
from tests.helpers import rewrite_at

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"
FIXTURES = ROOT / "tests" / "fixtures" / "realworld"


def _example(code: str, title: str) -> rules.RuleExample:
    return next(e for e in rules.parse(RULES / f"{code}.md") if e.title.startswith(title))


# ---- compile-generator-body ----------------------------------------------------------


def gen(source: str, line_of: str = "@") -> str | None:
    """Rewrite at the first line starting with ``line_of``: Dynamo reports GB0003 on the
    code object's first line (the first decorator's), without a column."""
    source = textwrap.dedent(source)
    line = next(n for n, text in enumerate(source.splitlines(), 1) if text.strip().startswith(line_of))
    return rewrite_at(source, CompileGeneratorBody, line, None, None, "GB0003")


def test_gb0003_rule_examples():
    for ex in rules.parse(RULES / "GB0003.md"):
        assert gen(ex.before) == ex.after, ex.title


def test_streaming_fixture():
    source = (FIXTURES / "generator_compiled" / "streaming.py").read_text()
    assert gen(source) == textwrap.dedent(
        '''\
        """Chunked streaming inference: yield each denoised chunk as soon as it is ready."""
        import torch


        @torch.compile(backend="eager")
        def _stream_denoise_step(model, piece):
            # Added by gbfix: what stream_denoise yields, compiled here (Dynamo skips a generator whole).
            return model(piece) * torch.hann_window(piece.shape[-1], periodic=False).clamp(min=0.5)


        def stream_denoise(model, audio: torch.Tensor, chunk: int):
            for start in range(0, audio.shape[-1], chunk):
                piece = audio[..., start : start + chunk]
                yield _stream_denoise_step(model, piece)
        '''
    )


GEN = """\
import torch
{imports}

SCALE = 2.0


# chunks, one at a time
{decorators}
def stream(model, xs, dim=-1):
{body}
"""


def gen_module(body: str, decorators: str = "@torch.compile", imports: str = "") -> str | None:
    body = textwrap.indent(textwrap.dedent(body), "    ")
    return gen(GEN.format(body=body, decorators=decorators, imports=imports))


def helper_of(out: str | None) -> tuple[str, str]:
    """The helper's signature line and its return line."""
    assert out is not None, "the recipe declined"
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("def _stream_step"))
    return lines[at], lines[at + 2].strip()


def test_bare_decorator_blank_lines_and_comments():
    out = gen_module("for x in xs:\n    yield model(x).softmax(dim)")
    assert out is not None
    # blank lines above the helper, the comment stays with the generator
    assert "SCALE = 2.0\n\n\n@torch.compile\ndef _stream_step(model, x, dim):\n" in out
    assert "\n\n\n# chunks, one at a time\ndef stream(model, xs, dim=-1):\n" in out
    assert "yield _stream_step(model, x, dim)" in out
    ast.parse(out)


def test_decorator_arguments_move_verbatim():
    out = gen_module("for x in xs:\n    yield model(x) * 2", decorators='@torch.compile(mode="max-autotune", dynamic=True)')
    assert '@torch.compile(mode="max-autotune", dynamic=True)\ndef _stream_step(model, x):' in out
    assert "\n@torch.compile(mode" not in out.split("def _stream_step")[1]


def test_compile_imported_from_torch():
    out = gen_module("for x in xs:\n    yield model(x) * 2", decorators="@compile()", imports="from torch import compile")
    assert helper_of(out) == ("def _stream_step(model, x):", "return model(x) * 2")


def test_globals_builtins_comprehension_and_keywords_stay_free():
    body = """
    for i, x in enumerate(xs):
        yield torch.stack([model(x[j]) * SCALE for j in range(len(x))]).sum(dim=dim) + i
    """
    # `j` is the comprehension's, `dim=` a keyword, SCALE/torch/range/len free
    assert helper_of(gen_module(body)) == (
        "def _stream_step(model, x, dim, i):",
        "return torch.stack([model(x[j]) * SCALE for j in range(len(x))]).sum(dim=dim) + i",
    )


def test_loop_carried_local_bound_below_the_yield_is_passed():
    body = """
    for x in xs:
        if x.numel():
            yield model(x) + prev
        prev = x
    """
    assert helper_of(gen_module(body))[0] == "def _stream_step(model, x, prev):"


def test_attribute_named_like_a_local_is_no_read():
    body = """
    for x in xs:
        yield model.norm(x)
        norm = x
    """
    assert helper_of(gen_module(body))[0] == "def _stream_step(model, x):"


def test_global_declaration_stays_free():
    body = """
    global SCALE
    SCALE = 3.0
    for x in xs:
        yield model(x) * SCALE
    """
    assert helper_of(gen_module(body))[0] == "def _stream_step(model, x):"


def test_trivial_yields_around_the_working_one():
    body = """
    yield
    for x in xs:
        out = yield model(x).relu()
        if out is not None:
            yield out
    yield None
    """
    out = gen_module(body)
    assert "out = yield _stream_step(model, x)" in out
    assert "        yield out\n    yield None\n" in out


def test_multiline_value_gets_parentheses():
    body = """
    for x in xs:
        got = (yield model(x) +
               1)
    """
    out = gen_module(body)
    assert "return (model(x) +\n" in out
    ast.parse(out)


def test_method_helper_goes_before_the_class():
    source = """
    import torch


    class Streamer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        @torch.compile(backend="eager")
        def _stream(self, xs):
            for x in xs:
                yield self.lin(x).relu()
    """
    out = gen(source)
    assert '\n\n\n@torch.compile(backend="eager")\ndef _Streamer_stream_step(self, x):\n' in out
    assert out.index("def _Streamer_stream_step") < out.index("class Streamer")
    assert "        def _stream(self, xs):" not in out and "    def _stream(self, xs):" in out
    assert "yield _Streamer_stream_step(self, x)" in out


@pytest.mark.parametrize(
    "body",
    [
        "for x in xs:\n    yield from model(x)",
        "for x in xs:\n    yield model(x)\n    yield model(x) * 2",  # two values to compile
        "for x in xs:\n    yield x",  # nothing to compile in the value
        "for x in xs:\n    yield",
        "for x in xs:\n    yield model(y := x) + y",
        "for x in xs:\n    yield model(x).apply(lambda t: t * 2)",
        "for x in xs:\n    yield sum(model(t) for t in x)",  # lazy: reads the locals later
        "for x in xs:\n    yield model(x, **locals())",
        "for x in xs:\n    yield super().forward(x)",
        "def scale(t):\n    return t * 2\nfor x in xs:\n    yield scale(model(x))",
        "for x in xs:\n    yield model(x) + (yield x)",
        "return model(xs)",  # not a generator
    ],
)
def test_declines(body):
    assert gen_module(body) is None


def test_declines_other_decorators_and_async():
    body = "for x in xs:\n    yield model(x) * 2"
    assert gen_module(body, decorators="@torch.no_grad()\n@torch.compile") is None
    assert gen_module(body, decorators="@torch.compile\n@torch.no_grad()") is None
    source = GEN.format(body="    async for x in xs:\n        yield model(x) * 2", decorators="@torch.compile", imports="")
    assert gen(source.replace("def stream", "async def stream")) is None


def test_declines_compile_by_assignment():
    source = """
    import torch


    def stream(model, xs):
        for x in xs:
            yield model(x) * 2


    stream = torch.compile(stream)
    """
    assert gen(source, line_of="def stream") is None


def test_declines_a_used_helper_name():
    body = "for x in xs:\n    yield model(x) * 2"
    assert gen_module(body, imports="from helpers import _stream_step") is None


def test_declines_a_generator_inside_a_function():
    source = """
    import torch


    def make(scale):
        @torch.compile
        def stream(model, xs):
            for x in xs:
                yield model(x) * scale
        return stream
    """
    assert gen(source) is None


def test_declines_mangled_names_and_class_names_in_the_decorator():
    method = """
    import torch


    class Streamer:
        BACKEND = "eager"

        {decorator}
        def stream(self, xs):
            for x in xs:
                yield {value}
    """
    ok = gen(method.format(decorator="@torch.compile", value="self.lin(x) * 2"))
    assert ok is not None
    assert gen(method.format(decorator="@torch.compile", value="self.__lin(x) * 2")) is None
    assert gen(method.format(decorator="@torch.compile(backend=BACKEND)", value="self.lin(x) * 2")) is None


# ---- timing-under-compile ---------------------------------------------------------


def clock(source: str, needle: str, recipe=ClockUnderCompile, nth: int = 0) -> str | None:
    """Rewrite at the nth line holding ``needle``, with the span of the call there."""
    source = textwrap.dedent(source)
    hits = [(n, line) for n, line in enumerate(source.splitlines(), 1) if needle in line]
    number, line = hits[nth]
    col = line.index(needle)
    return rewrite_at(source, recipe, number, col, col + len(needle), "GB0007")


def test_the_safe_move_comes_first_then_timing_under_compile():
    assert timing.RECIPES == (ClockIntoBranch, ClockUnderCompile, SkipTiming)
    assert ClockIntoBranch.safety == "safe" and ClockIntoBranch.codes == ("GB0007",)
    assert ClockUnderCompile.safety == "unsafe" and ClockUnderCompile.codes == ("GB0007",)


def test_gb0007_rule_example():
    ex = _example("GB0007", "per-stage timing")
    out = ex.before
    for nth in reversed(range(4)):  # the engine applies the four sites together; last first here
        out = clock(out, "time.perf_counter()", nth=nth)
        assert out is not None
    assert out == ex.after


def test_perf_counter_fixture():
    source = (FIXTURES / "perf_counter_profile" / "model.py").read_text()
    out = clock(source, "time.perf_counter()", nth=1)
    assert '        self.times.add("subsample", (0.0 if torch.compiler.is_compiling() else time.perf_counter()) - t0)\n' in out


def test_rate_is_left_to_skip_timing():
    ex = _example("GB0007", "samples per second")
    assert clock(ex.before, "time.perf_counter()") is None
    assert clock(ex.before, "time.perf_counter()", nth=1) is None
    assert clock(ex.before, "time.perf_counter()", recipe=SkipTiming) == ex.after


def test_not_fixed_example_declined():
    ex = _example("GB0007", "the elapsed time is part of the result")
    for nth in range(2):
        assert clock(ex.before, "time.perf_counter()", nth=nth) is None


TIMED = """\
import time
from time import perf_counter as pc, monotonic_ns

import torch


class Layer(torch.nn.Module):
    def forward(self, x):
        {stmts}
        return x
"""


def timed(stmts: str, needle: str, nth: int = 0) -> str | None:
    return clock(TIMED.format(stmts=stmts.replace("\n", "\n        ")), needle, nth=nth)


@pytest.mark.parametrize(
    "stmts, needle, expected",
    [
        (
            "t0 = pc()\nx = x * 2\nself.stats.append(pc() - t0)",
            "pc()",
            "t0 = (0.0 if torch.compiler.is_compiling() else pc())",
        ),
        (
            "t0 = monotonic_ns()\nx = x * 2\nself.ns += monotonic_ns() - t0",
            "monotonic_ns()",
            "t0 = (0 if torch.compiler.is_compiling() else monotonic_ns())",
        ),
        (
            "t0 = time.time()\nx = x * 2\nlogger.info('took %.3f', time.time() - t0)",
            "time.time()",
            "t0 = (0.0 if torch.compiler.is_compiling() else time.time())",
        ),
        (
            "self.last = (time.process_time())",
            "time.process_time()",
            "self.last = (0.0 if torch.compiler.is_compiling() else time.process_time())",
        ),
    ],
)
def test_clock_variants(stmts, needle, expected):
    out = timed(stmts, needle)
    assert out is not None and expected in out
    ast.parse(out)


def test_second_read_in_an_expression():
    out = timed("t0 = time.perf_counter()\nx = x * 2\nself.stats['mlp'] += 1e3 * (time.perf_counter() - t0)", "time.perf_counter()", nth=1)
    assert "self.stats['mlp'] += 1e3 * ((0.0 if torch.compiler.is_compiling() else time.perf_counter()) - t0)" in out


def test_adds_the_torch_import():
    source = """\
    import time


    def step(model, x, stats):
        t0 = time.perf_counter()
        y = model(x)
        stats.append(time.perf_counter() - t0)
        return y
    """
    out = clock(source, "time.perf_counter()")
    assert out.startswith("import time\nimport torch\n")


@pytest.mark.parametrize(
    "stmts, needle",
    [
        ("t0 = time.perf_counter()\nx = x * 2\nself.rates.append(x.shape[0] / (time.perf_counter() - t0))", "time.perf_counter()"),
        ("t0 = time.perf_counter()\nx = x * 2\ndt = time.perf_counter() - t0\nself.tps.append(8 // dt)", "time.perf_counter()"),
        ("t0 = time.perf_counter()\nx = x * 2\nself.rate /= time.perf_counter() - t0", "time.perf_counter()"),
        ("t0 = time.perf_counter()\nif time.perf_counter() - t0 > 1.0:\n    x = x * 0", "time.perf_counter()"),
        ("seed = int(time.time())\ntorch.manual_seed(seed)", "time.time()"),
        ("time.sleep(0.1)", "time.sleep(0.1)"),
    ],
)
def test_timing_declines(stmts, needle):
    assert timed(stmts, needle) is None


# ---- clock-into-branch -----------------------------------------------------------


def test_clock_into_branch_rule_example():
    ex = _example("GB0007", "wall time printed only under a profiling flag")
    assert clock(ex.before, "time.perf_counter()", recipe=ClockIntoBranch) == ex.after


def test_clock_into_branch_leaves_the_other_timing_examples():
    for title in ("samples per second", "per-stage timing", "the elapsed time is part of the result"):
        assert clock(_example("GB0007", title).before, "time.perf_counter()", recipe=ClockIntoBranch) is None


FLAGGED = """\
import time
from time import monotonic

import torch

PROFILE = False
LOG_EVERY = 10


class Layer(torch.nn.Module):
    def __init__(self, debug=False):
        super().__init__()
        self.debug = debug
        self.quiet = True

    def forward(self, x, step: int = 0):
        {stmts}
        return x


def helper(x, verbose=False):
    {helper}
    return x
"""


def flagged(stmts: str = "pass", helper: str = "pass", needle: str = "time.perf_counter()") -> str | None:
    source = FLAGGED.format(stmts=stmts.replace("\n", "\n        "), helper=helper.replace("\n", "\n    "))
    return clock(source, needle, recipe=ClockIntoBranch)


@pytest.mark.parametrize(
    "stmts, needle, guarded",
    [
        ("t0 = time.perf_counter()\nx = x * 2\nif self.debug:\n    print(time.perf_counter() - t0)", "time.perf_counter()", "if self.debug:"),
        ("t0 = monotonic()\nx = x * 2\nif not self.quiet:\n    self.log.append(monotonic() - t0)", "monotonic()", "if not self.quiet:"),
        ("t0 = time.time()\nx = x * 2\nif PROFILE and self.debug:\n    print(time.time() - t0)", "time.time()", "if PROFILE and self.debug:"),
        (
            "start = time.perf_counter()\nx = x * 2\nif step % LOG_EVERY == 0:\n    print(step, time.perf_counter() - start)",
            "time.perf_counter()",
            "if step % LOG_EVERY == 0:",
        ),
        (  # two uses under two `if`s with the same test
            "t0 = time.perf_counter()\nif self.debug:\n    print(t0)\nx = x * 2\nif self.debug:\n    print(time.perf_counter() - t0)",
            "time.perf_counter()",
            "if self.debug:",
        ),
    ],
)
def test_clock_into_branch_methods(stmts, needle, guarded):
    out = flagged(stmts, needle=needle)
    assert out is not None
    read = stmts.splitlines()[0]
    assert f"        {guarded}\n            {read}\n" in out
    ast.parse(out)


def test_clock_into_branch_with_the_variable_timed_again():
    stages = (
        "t0 = time.perf_counter()\nx = x * 2\nif self.debug:\n    print('a', time.perf_counter() - t0)\n"
        "t0 = time.perf_counter()\nx = x + 1\nif self.debug:\n    print('b', time.perf_counter() - t0)"
    )
    for nth in (0, 2):  # the two reads; lines 1 and 3 are the prints
        source = FLAGGED.format(stmts=stages.replace("\n", "\n        "), helper="pass")
        out = clock(source, "time.perf_counter()", recipe=ClockIntoBranch, nth=nth)
        assert out is not None
        guarded = out.count("        if self.debug:\n            t0 = time.perf_counter()\n")
        assert guarded == 1 and out.count("t0 = time.perf_counter()") == 2
    # a use after the loop reads the last binding of the loop body: not this block's straight line
    looped = "for _ in range(2):\n    t0 = time.perf_counter()\n    x = x * 2\n    if self.debug:\n        print(t0)\nprint(t0)"
    assert flagged(looped) is None
    # the second stage reads the first binding unguarded
    mixed = "t0 = time.perf_counter()\nx = x * 2\nif self.debug:\n    print(t0)\nself.last = t0\nt0 = time.perf_counter()\nif self.debug:\n    print(t0)"
    assert flagged(mixed) is None
    # a binding inside an `if` may or may not have run
    nested = "t0 = time.perf_counter()\nif self.quiet:\n    t0 = 0.0\nif self.debug:\n    print(t0)"
    assert flagged(nested) is None


def test_clock_into_branch_in_a_function_with_a_flag_parameter():
    out = flagged(helper="t0 = time.perf_counter()\nx = x + 1\nif verbose:\n    print('took', time.perf_counter() - t0)")
    assert "    if verbose:\n        t0 = time.perf_counter()\n    x = x + 1\n" in out


def test_clock_into_branch_keeps_a_comment_and_blank_line_above_the_read():
    out = flagged("x = x * 2\n\n# time the rest\nt0 = time.perf_counter()\nif self.debug:\n    print(time.perf_counter() - t0)")
    assert "x = x * 2\n\n        # time the rest\n        if self.debug:\n            t0 = time.perf_counter()\n" in out


@pytest.mark.parametrize(
    "stmts",
    [
        "t0 = time.perf_counter()\nx = x * 2\nprint(time.perf_counter() - t0)",  # used unconditionally
        "t0 = time.perf_counter()\nif self.debug:\n    print(t0)\nself.last = t0",  # also used outside the if
        "t0 = time.perf_counter()\nif self.debug:\n    print(t0)\nif self.quiet:\n    print(t0)",  # two different tests
        "t0 = time.perf_counter()\nif x.sum() > 0:\n    print(time.perf_counter() - t0)",  # a call in the test
        "t0 = time.perf_counter()\nif self.steps:\n    print(time.perf_counter() - t0)",  # self.steps is not set in __init__
        "t0 = time.perf_counter()\nflag = step > 3\nif flag:\n    print(time.perf_counter() - t0)",  # a local the function binds
        "t0 = time.perf_counter()\nif self.debug:\n    pass\nelse:\n    print(time.perf_counter() - t0)",  # in the else
        "t0 = time.perf_counter()\nif self.quiet:\n    pass\nelif self.debug:\n    print(time.perf_counter() - t0)",  # an elif
        "t0 = time.perf_counter()\nx = x * 2\nt0 = time.perf_counter() - t0\nif self.debug:\n    print(t0)",  # bound twice
        "t0 = time.perf_counter(); x = x * 2\nif self.debug:\n    print(time.perf_counter() - t0)",  # two statements on the line
        "t0 = time.sleep(0)\nif self.debug:\n    print(t0)",  # not a clock
    ],
)
def test_clock_into_branch_declines(stmts):
    needle = "time.sleep(0)" if "sleep" in stmts else "time.perf_counter()"
    assert flagged(stmts, needle=needle) is None


def test_clock_into_branch_declines_a_flag_changed_outside_init():
    source = FLAGGED.replace("        self.quiet = True\n", "        self.quiet = True\n\n    def train(self, mode=True):\n        self.debug = mode\n        return self\n")
    source = source.format(stmts="t0 = time.perf_counter()\n        if self.debug:\n            print(time.perf_counter() - t0)", helper="pass")
    assert clock(source, "time.perf_counter()", recipe=ClockIntoBranch) is None
    assert clock(source.replace("self.debug = mode", "self.other = mode"), "time.perf_counter()", recipe=ClockIntoBranch) is not None


def test_clock_into_branch_declines_a_rebound_parameter_and_a_global_declared_elsewhere():
    helper = "verbose = not verbose\nt0 = time.perf_counter()\nif verbose:\n    print(time.perf_counter() - t0)"
    assert flagged(helper=helper) is None
    source = FLAGGED.format(stmts="pass", helper="t0 = time.perf_counter()\n    if PROFILE:\n        print(time.perf_counter() - t0)")
    assert clock(source, "time.perf_counter()", recipe=ClockIntoBranch) is not None
    source += "\n\ndef enable():\n    global PROFILE\n    PROFILE = True\n"
    assert clock(source, "time.perf_counter()", recipe=ClockIntoBranch) is None
