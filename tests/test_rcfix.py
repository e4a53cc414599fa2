"""Recompiles fixed at the source, verified (issue 17, part 2).

tests/fixtures/rcfix/: programs whose recompiles a recipe fixes (counters on modules,
float arguments, sizes that automatic dynamic shapes does not settle) and uses that must
be left alone, run together by run_all.py: one real gbfix run covers them all.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gbfix import engine, recipes, recompiles, report
from gbfix.entry import parse as parse_entry
from gbfix.rccodes import CODES
from gbfix.suppress import Filter
from tests.helpers import fixture_copy

FIXTURE = Path(__file__).parent / "fixtures" / "rcfix"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return fixture_copy(tmp_path_factory, "rcfix")


@pytest.fixture(scope="module")
def result(folder: Path) -> engine.Result:
    # counter-as-buffer and float-argument-as-tensor are unsafe (a path not run may see a tensor)
    return engine.fix([folder], parse_entry("python run_all.py", folder), engine.Options(unsafe_fixes=True))


def test_only_the_settings_and_mark_dynamic_are_safe():
    safe = {r.name for code in ("RC001", "RC002", "RC003") for r in recipes.candidates(code, unsafe=False)}
    assert safe == {"allow-unspec-int-on-nn-module", "mark-dynamic"}


def _fixed(result: engine.Result, folder: Path, name: str) -> str:
    path = folder / name
    return result.fixed.get(path, path.read_bytes()).decode()


def _applied(result: engine.Result) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for o in result.outcomes:
        if o.status == "applied":
            out.setdefault(o.edit.recipe, set()).add(o.edit.path.name)
    return out


def test_counters_stepped_only_by_the_module_are_settled_by_the_setting_then_a_buffer(result, folder):
    """The safe setting is tried first and settles Tally's counter; Countdown's `-=` still
    recompiles under it, and (with --unsafe-fixes) its counter becomes a buffer."""
    text = _fixed(result, folder, "counts.py")
    assert "        self.seen = 0\n" in text
    assert 'self.register_buffer("left", torch.tensor(100), persistent=False)' in text and "self.left -= 2" in text
    assert _applied(result)["counter-as-buffer"] == {"counts.py"}


def test_a_counter_python_tests_gets_the_setting_in_the_entry_script(result, folder):
    assert "self.step = 0" in _fixed(result, folder, "steps.py")  # `if self.step % 2`: not a buffer
    assert "torch._dynamo.config.allow_unspec_int_on_nn_module = True" in _fixed(result, folder, "run_all.py")
    assert _applied(result)["allow-unspec-int-on-nn-module"] == {"run_all.py"}


def test_float_arguments_are_passed_as_tensors_at_the_call(result, folder):
    text = _fixed(result, folder, "floats.py")
    assert "scale(x, torch.tensor(0.1 * (i + 1), dtype=torch.float64))" in text
    assert "soften(x, temperature=torch.tensor(1.0 + i / 3, dtype=torch.float64))" in text
    assert "clip(x, 0.3 + 0.25 * i)" in text  # tested by Python: left
    assert "shift(x, i)" in text  # an int: automatic dynamic shapes settles it


def _left(result: engine.Result, folder: Path, name: str, function: str) -> engine.Finding:
    return next(f for f in result.findings if f.path == folder / name and f.status == recompiles.STATUS and f.recompiles[-1].function == function)


def test_a_recompile_left_says_what_was_tried_as_a_break_left_does(result, folder):
    """Why the recipes declined, or which kept edit leaves it, then what to do by hand."""
    title, hand = CODES["RC002"]
    # the int: the recipe looked and declined; its reason is the detail's
    shift = _left(result, folder, "floats.py", "shift").detail
    assert shift.startswith(f"{title}; no recipe applies (float-argument-as-tensor: not a float") and shift.endswith(f"; by hand: {hand}")
    # pool's first dimension, settled by automatic dynamic shapes, at the place of the second's site
    title, hand = CODES["RC003"]
    pool = _left(result, folder, "sizes.py", "pool")
    assert recompiles.site_of(pool.recompiles[-1])[3] == "x.size()[0]"
    assert pool.detail == f"{title}; no recipe applies (mark-dynamic: automatic dynamic shapes settled it with one recompile); by hand: {hand}"


def test_sizes_get_mark_dynamic_only_where_automatic_dynamic_did_not_settle(result, folder):
    text = _fixed(result, folder, "sizes.py")
    assert text.count("mark_dynamic") == 1
    assert "        torch._dynamo.mark_dynamic(x, 1)\n        out.append(pool(x)" in text


def test_fixed_sites_are_reported_fixed_and_at_most_one_recompile_per_frame_is_left(result, folder):
    by_code = {}
    for f in result.findings:
        by_code.setdefault((f.path.name, f.code), []).append(f.status)
    assert by_code[("counts.py", "RC100")] == ["fixed", "fixed"]
    assert by_code[("steps.py", "RC100")] == ["fixed"]
    assert by_code[("counts.py", "RC001")] == ["fixed", "fixed"]
    assert "fixed" in by_code[("floats.py", "RC002")]
    per_frame = {}
    for rc in result.final.recompiles:
        per_frame[Path(rc.file).name] = per_frame.get(Path(rc.file).name, 0) + 1
    # steps.py branches on the counter's parity: one compile for each branch is left
    assert per_frame == {"counts.py": 1, "floats.py": 1, "sizes.py": 1, "steps.py": 2}
    assert not recompiles.limited(result.final.recompiles)
    assert result.remaining == 0


def test_the_fixed_program_prints_the_same(result, folder, tmp_path):
    shutil.copytree(folder, tmp_path, dirs_exist_ok=True)
    for path, data in result.fixed.items():
        (tmp_path / path.name).write_bytes(data)
    after = subprocess.run([sys.executable, "run_all.py"], cwd=tmp_path, capture_output=True, text=True, check=True)
    # the original as gbfix's first run recorded it (a run of its own would say the same)
    assert after.stdout == result.baseline.stdout
    assert recompiles.limited(result.baseline.recompiles) and "recompile_limit" not in after.stderr


def test_without_unsafe_fixes_a_site_only_an_unsafe_recipe_fixes_says_so(tmp_path):
    """No safe recipe answers a float argument: no edit is tried, and the site says which
    unsafe recipe would fix it (as a break left does); the summary counts them."""
    shutil.copy(FIXTURE / "floats.py", tmp_path / "floats.py")
    result = engine.fix([tmp_path / "floats.py"], parse_entry("python floats.py", tmp_path), engine.Options())
    assert not result.outcomes
    left = {f.recompiles[-1].function: f.detail for f in result.findings if f.code == "RC002"}
    title, hand = CODES["RC002"]
    assert sorted(left) == ["scale", "shift", "soften"]  # clip: no recompile recorded (torch 2.13)
    for function in ("scale", "soften"):
        assert left[function] == f"{title}; {recompiles.UNSAFE} (float-argument-as-tensor)"
    assert left["shift"] == f"{title}; no recipe applies; by hand: {hand}"  # an int: no recipe would
    n = sum(len(f.recompiles) for f in result.findings)
    assert report.summary(result, applied=False).endswith(f"Found {n} recompiles at 3 sites: 2 {recompiles.UNSAFE}, 1 not fixable.")


# --- the proof: --zero-recompiles ------------------------------------------------

SCHEDULE = '''\
import math

import torch


@torch.compile(backend="eager")
def sgd_step(w: torch.Tensor, grad: torch.Tensor, lr: float) -> torch.Tensor:
    return w - lr * grad


@torch.compile(backend="eager")
def ramp(lr: float) -> torch.Tensor:
    return torch.arange(3) * lr  # float32; times a float64 tensor it would be float64


if __name__ == "__main__":
    w = torch.ones(4)
    for step in range(4):
        w = sgd_step(w, 2 * w, 0.05 * (1 + math.cos(math.pi * step / 4)))
        print(ramp(0.1 * (step + 1)).tolist())
    print(w.tolist())
'''

# The main block picks another mode each time it runs: warm, the second pass compiles again.
NEW_MODE = '''\
import torch

PASSES = [0]


@torch.compile(backend="eager")
def activate(x: torch.Tensor, name: str) -> torch.Tensor:
    return getattr(torch, name)(x)


if __name__ == "__main__":
    PASSES[0] += 1
    print(activate(torch.ones(2), ("relu", "tanh")[PASSES[0] % 2]).tolist())
'''


def _proof(tmp_path: Path, source: str) -> engine.Result:
    (tmp_path / "prog.py").write_text(source)
    return engine.fix([tmp_path / "prog.py"], parse_entry("python prog.py", tmp_path), engine.Options(zero_recompiles=True, unsafe_fixes=True))


def test_zero_recompiles_is_proven_after_the_fix(tmp_path):
    result = _proof(tmp_path, SCHEDULE)
    text = result.fixed[(tmp_path / "prog.py").resolve()].decode()
    assert "torch.tensor(0.05 * (1 + math.cos(math.pi * step / 4)), dtype=torch.float64)" in text
    assert "ramp(0.1 * (step + 1))" in text  # as a float64 tensor it prints other numbers: rejected
    rejected = next(o for o in result.outcomes if o.status != "applied")
    assert rejected.status == "rejected:output-mismatch" and rejected.edit.recipe == "float-argument-as-tensor"
    ramp = next(f for f in result.findings if f.status == recompiles.STATUS)
    title, hand = CODES["RC002"]
    assert ramp.recompiles[-1].function == "ramp"  # the site left says what was tried, as a break left does
    assert ramp.detail == f"{title}; {rejected.status}: {rejected.detail}; by hand: {hand}"
    assert result.recompiles_proven is True  # ramp recompiles once: automatic dynamic shapes
    assert any('proven by running the main block again under torch.compiler.set_stance("fail_on_recompile")' in n for n in result.notes)


def test_zero_recompiles_fails_on_a_recompile_of_the_warm_program(tmp_path):
    result = _proof(tmp_path, NEW_MODE)
    assert result.recompiles_proven is False
    note = next(n for n in result.notes if n.startswith("no recompile after warm-up not proven"))
    assert "fail_on_recompile" in note and "activate" in note


def test_zero_recompiles_is_not_tried_while_a_frame_recompiles_more_than_once(tmp_path):
    (tmp_path / "steps.py").write_text((FIXTURE / "steps.py").read_text())
    result = engine.fix(
        [tmp_path / "steps.py"], parse_entry("python steps.py", tmp_path),
        engine.Options(zero_recompiles=True, selection=Filter(ignore=("RC",))),  # left unfixed: 8 recompiles
    )
    assert result.recompiles_proven is False
    assert any("recompiles are left beyond the automatic-dynamic one per frame" in n for n in result.notes)
