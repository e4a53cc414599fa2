"""Warnings and log lines reached through helpers of another module: one real gbfix run.

The breaks' innermost user frames are in ``pkg/deprecation.py``; the helpers are
fixed there (every caller keeps working) and the model's code is left alone. The
program compiles with aot_eager, so only the op routes are offered (no leaf_function).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from gbfix import engine
from gbfix.entry import parse as parse_entry

FIXTURE = Path(__file__).parent / "fixtures" / "logging_wrappers"


def test_helpers_in_another_module_are_fixed_in_place(tmp_path: Path):
    shutil.copytree(FIXTURE, tmp_path / "case")
    case = (tmp_path / "case").resolve()
    result = engine.fix([case], parse_entry("python run.py", case), engine.Options())
    applied = sorted(o.edit.recipe for o in result.outcomes if o.status == "applied")
    assert applied == ["logger-to-op", "warn-to-op"]
    assert set(result.fixed) == {case / "pkg" / "deprecation.py"}
    fixed = result.fixed[case / "pkg" / "deprecation.py"].decode()
    # the f-string of the helper's arguments is built while Dynamo traces, as text for the op
    assert "\n    _gbfix_warn(f\"`{name}` is deprecated and will be removed in {version}. {message}\", \"FutureWarning\", " in fixed
    assert '\n    _gbfix_log("logger", "warning_once", message)\n' in fixed
    assert "warnings.warn(" not in fixed.split("def _gbfix_warn(")[1]
    assert result.remaining == 0


def test_a_fixed_log_call_in_a_frame_dynamo_skips(tmp_path: Path):
    """After the edit, a break in a loop makes Dynamo skip Net.forward: the helper runs
    eagerly, the op's body is not compiled as a frame of its own (its logger lookup would
    break, GB0059), nor are the helper's comprehensions (GB0003 for a generator)."""
    shutil.copytree(FIXTURE.parent / "logging_skipped_frame", tmp_path / "case")
    case = (tmp_path / "case").resolve()
    result = engine.fix([case], parse_entry("python run.py", case), engine.Options())
    assert [o.edit.recipe for o in result.outcomes if o.status == "applied"] == ["logger-to-op"]
    left = sorted((f.code, f.line) for f in result.findings if f.status != "fixed")
    assert left == [("GB0025", 14)]  # the author's graph_break(), nothing in gbfix's helpers
