"""report-if on a call of a function that only reports (recipes/report_function.py).

Static: which functions count (several spellings of a `warn_once` / rank-0 print /
flag-guarded log wrapper, in the module or imported from one beside it) and which do not
(what they do may reach the graph, or name another frame). Real run
(tests/fixtures/report_functions): three such calls under tensor tests become
gbfix_call_if, each wrapper firing on some calls; a call of a function that writes an
attribute stays as it is; the fixed program prints, logs and warns as the original does
uncompiled, on the eager and inductor backends.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from gbfix import engine
from gbfix.entry import parse as parse_entry
from gbfix.recipes.report_function import report_function
from gbfix.recipes.report_if import ReportIf
from tests.helpers import line_site, site_context

FIXTURE = Path(__file__).parent.parent / "fixtures" / "report_functions"

HELPERS = """\
import logging
import warnings

logger = logging.getLogger(__name__)
RANK = 0
STEP = 0
_warned = False
_counts = {}


def warn_once(msg, _seen=set()):
    \"\"\"Warn once per message.\"\"\"
    if msg not in _seen:
        _seen.add(msg)
        warnings.warn(msg, UserWarning)


def rank0_print(*parts):
    if RANK == 0:
        print("[rank0]", *parts, flush=True)


def warn_flag(n):
    global _warned
    if not _warned:
        _warned = True
        logger.warning("%d rows overflow (%s)", n, ", ".join(str(i) for i in range(min(n, 3))))


def count(key):
    _counts[key] = _counts.get(key, 0) + 1
    if _counts[key] % 100 == 1:
        logging.info("%s seen %d times", key, _counts[key])


def warn_caller(msg):
    warnings.warn(msg, UserWarning, stacklevel=2)


def log_caller(msg):
    logger.warning(msg, stacklevel=2)


def remember(model):
    model.flag = True


def reset(buf):
    buf.zero_()


def delegate(msg):
    warn_once(msg)


def stack_print(msg):
    import traceback
    traceback.print_stack()


def step_print(msg):
    print(msg, STEP)


def bump():
    global STEP
    STEP += 1


def guarded(msg):
    try:
        print(msg)
    except OSError:
        pass
"""


def _verdict(tmp_path: Path, call: str, imports: str = "from helpers import *") -> bool:
    """Whether ``call`` in a script beside helpers.py calls a function that only reports."""
    (tmp_path / "helpers.py").write_text(HELPERS)
    source = f"{imports}\n\n\ndef step(x):\n    if x.max() > 1:\n        {call}\n    return x\n"
    names = call.split("(")[0]
    source = source.replace("from helpers import *", f"from helpers import {names}")
    script = tmp_path / "main.py"
    script.write_text(source)
    line, col, end = line_site(source, call)
    ctx = site_context(source, line, col, end, "GB0170", path=script)
    node = ctx.node
    while not isinstance(node, cst.Call):
        node = ctx.file.parent(node)
    return report_function(ctx, node) is not None


@pytest.mark.parametrize(
    "call",
    [
        'warn_once("overflow risk")',  # a mutable default no call passes
        'rank0_print("mean", 3.5)',  # reads a module constant, *args
        "warn_flag(7)",  # a module-level flag of its own, a logger, a generator in a join
        'count("nan")',  # a dict of its own, updated by item; logging's own function
    ],
)
def test_functions_that_only_report(tmp_path: Path, call: str):
    assert _verdict(tmp_path, call)


@pytest.mark.parametrize(
    "call",
    [
        'warn_once("overflow risk", set())',  # the default passed: not state of its own
        'warn_caller("x")',  # stacklevel 2: would name the op's frame
        'log_caller("x")',
        "remember(x)",  # writes an attribute the graph may read
        "reset(x)",  # an in-place op
        'delegate("x")',  # another function of the program
        'stack_print("x")',  # reads the stack
        'guarded("x")',  # try
        'step_print("x")',  # reads a global another function rebinds (the graph may have, before the op runs)
        "rank0_print(*[1, 2])",  # a starred argument
    ],
)
def test_functions_that_do_more(tmp_path: Path, call: str):
    assert not _verdict(tmp_path, call)


def test_the_function_in_the_same_module_or_a_package_module(tmp_path: Path):
    # a def of the module itself; `from .utils import` in a package; an alias
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "utils.py").write_text(HELPERS)
    source = textwrap.dedent(
        """\
        import warnings

        from .utils import warn_once as once
        from pkg.utils import remember


        def note(msg):
            warnings.warn(msg)


        def step(x):
            if x.max() > 1:
                note("big")
                once("big")
                remember(x)
            return x
        """
    )
    path = pkg / "model.py"
    path.write_text(source)
    verdicts = {}
    for call in ('note("big")', 'once("big")', "remember(x)"):
        line, col, end = line_site(source, call)
        ctx = site_context(source, line, col, end, "GB0170", path=path)
        node = ctx.node
        while not isinstance(node, cst.Call):
            node = ctx.file.parent(node)
        verdicts[call] = report_function(ctx, node) is not None
    assert verdicts == {'note("big")': True, 'once("big")': True, "remember(x)": False}


def test_a_tensor_argument_is_declined(tmp_path: Path):
    # the function would get it detached from the op (its str() without the grad_fn);
    # a number read from it (`int(t)`, a cast made at run time) is taken
    (tmp_path / "helpers.py").write_text(HELPERS)
    source = textwrap.dedent(
        """\
        import torch

        from helpers import warn_flag


        def step(x):
            if x.max() > 1:
                warn_flag(x.sum())
            if x.min() < -1:
                warn_flag(int(x.sum()))
            return x
        """
    )
    script = tmp_path / "main.py"
    script.write_text(source)
    out = {}
    for needle in ("x.max() > 1", "x.min() < -1"):
        line = next(i for i, text in enumerate(source.splitlines(), 1) if needle in text)
        col = source.splitlines()[line - 1].index(needle)
        recipe = ReportIf()
        out[needle] = recipe.propose(site_context(source, line, col, col + len(needle), "GB0170", path=script)), recipe.declined
    assert out["x.max() > 1"][0] is None and "the function gets text and numbers" in out["x.max() > 1"][1]
    assert out["x.min() < -1"][0] is not None


# --- the real run ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    work = tmp_path_factory.mktemp("report_functions").resolve()
    shutil.copytree(FIXTURE, work, dirs_exist_ok=True)
    result = engine.fix([work], parse_entry("python run.py", work), engine.Options())
    after = tmp_path_factory.mktemp("report_functions_fixed").resolve()
    shutil.copytree(FIXTURE, after, dirs_exist_ok=True)
    for path, data in result.fixed.items():
        (after / path.relative_to(work)).write_bytes(data)
    return work, result, after


def test_real_run_each_reporting_call_is_called_from_the_op(fixed):
    work, result, _ = fixed
    model = result.fixed[work / "pkg" / "model.py"].decode()
    assert '        gbfix_call_if(h.abs().max() > 2.0, warn_once, "large activations")\n' in model
    assert '        gbfix_call_if(big.any(), _report_overflow, big.sum(), cast={0: "int"})\n' in model
    assert 'cast={1: "item,round:3"}' in model  # rank0_print(..., round(h.mean().item(), 3))
    # the function that writes an attribute: its `if` stays, and breaks
    assert "        if torch.isnan(h).any():\n            _remember(self)\n" in model
    left = [(f.line, f.code) for f in result.findings if f.status != "fixed" and f.code.startswith("GB")]
    assert left == [(37, "GB0170")]
    calls = [o for o in result.outcomes if o.status == "applied" and o.edit.recipe == "report-if"]
    assert len(calls) == 3


def _run(folder: Path, backend: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-W", "default", "run.py", backend], cwd=folder, capture_output=True, text=True, timeout=600,
        env={**os.environ, **env},
    )


def test_real_run_reports_as_the_original_does(fixed):
    # (the op is gbfix_log_if's, which report-if's own test runs on inductor too)
    work, _, after = fixed
    backend = "eager"
    expected = _run(work, backend, TORCHDYNAMO_DISABLE="1")  # the original, uncompiled
    got = _run(after, backend)
    assert got.returncode == 0, got.stderr
    assert got.stdout == expected.stdout
    assert "[rank0] negative mean -0.712" in got.stdout and got.stdout.count("overflow in 2 rows") == 1

    def warned(err: str) -> list[str]:
        return [line.split(": ", 1)[1] for line in err.splitlines() if "UserWarning: " in line]

    # warn_once's warning, once, from its own line (utils.py's lines moved by an import)
    assert warned(got.stderr) == warned(expected.stderr) == ["UserWarning: large activations"]
