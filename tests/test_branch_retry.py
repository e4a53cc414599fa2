"""A branch whose arm holds another break is proposed again once that break is fixed:
declined (the file's version is remembered in ``hopeless``) or rejected while its
span held other breaks (``rejected`` remembers the version too).

tests/fixtures/branch_retry: round 1 tries branch-to-cond for the `if`, whose
false branch holds `h[m > 0]` (GB0036); torch.cond cannot capture that and the
edit fails. The GB0036 is fixed in the same round (capture-dynamic-output-shape-ops),
and the engine must propose branch-to-cond again in round 2, where it passes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from gbfix import engine
from gbfix.entry import parse as parse_entry

FIXTURE = Path(__file__).parent / "fixtures" / "branch_retry"


def test_rejected_branch_is_retried_after_its_inner_break_is_fixed(tmp_path: Path):
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    script = (tmp_path / "prog.py").resolve()
    result = engine.fix([script], parse_entry("python prog.py", tmp_path), engine.Options())
    cond = [(o.status, o.edit.site.code) for o in result.outcomes if o.edit.recipe == "branch-to-cond"]
    # first attempt fails inside torch.cond; the second, after the GB0036 fix, is applied
    assert cond[0][0] == "rejected:output-mismatch" and "UncapturedHigherOrderOpError" in result.outcomes[0].detail
    assert cond[-1][0] == "applied"
    breaks = {f.code: f.status for f in result.findings if not f.code.startswith("RC")}  # it also recompiles (RC003)
    assert breaks == {"GB0170": "fixed", "GB0036": "fixed"}
    assert result.remaining == 0
    fixed = result.fixed[script].decode()
    assert "    return torch.cond((m == 0).all(), lambda: h.mean(), lambda: h[m > 0].sum())\n" in fixed


def test_a_rejection_with_nothing_inside_its_span_is_final(tmp_path: Path):
    # A torch.cond whose branches return different shapes fails on its own: it is not
    # tried again after an unrelated edit (the print) changes the file.
    (tmp_path / "prog.py").write_text(
        "import torch\n\n\n"
        "def f(x):\n"
        "    if x.sum() > 0:\n"
        "        return x * 2\n"
        "    return x.mean()\n\n\n"
        "def g(x):\n"
        "    print('g')\n"
        "    return x + 1\n\n\n"
        "f_c = torch.compile(f, backend='eager')\n"
        "g_c = torch.compile(g, backend='eager')\n\n"
        "if __name__ == '__main__':\n"
        "    torch.manual_seed(0)\n"
        "    for step in range(2):\n"
        "        x = torch.randn(4)\n"
        "        print(f_c(x), g_c(x))\n"
    )
    script = (tmp_path / "prog.py").resolve()
    result = engine.fix([script], parse_entry("python prog.py", tmp_path), engine.Options())
    outcomes = [(o.edit.recipe, o.status) for o in result.outcomes]
    assert ("print-to-op", "applied") in outcomes and result.fixed  # the file changed in round 1
    assert [r for r, _ in outcomes].count("branch-to-cond") == 1
    assert ("branch-to-cond", "rejected:output-mismatch") in outcomes


def test_declined_branch_is_proposed_again_once_its_arm_is_fixed(tmp_path: Path):
    # Round 1: the `if` declines (its arm calls .item()); item-to-tensor fixes the read.
    # Round 2: the file changed, so the `if` is proposed again and becomes a torch.where.
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    script = (tmp_path / "item_arm.py").resolve()
    result = engine.fix([script], parse_entry("python item_arm.py", tmp_path), engine.Options())
    breaks = {f.code: f.status for f in result.findings if not f.code.startswith("RC")}  # it also recompiles (RC002)
    assert breaks == {"GB0170": "fixed", "GB0124": "fixed"}
    applied = [o.edit.recipe for o in result.outcomes if o.status == "applied"]
    assert applied[-1] == "branch-to-where" and len(applied) == 2
    assert "    h = torch.where(h.abs().max() > 0.5, h * ref.max()" in result.fixed[script].decode()
