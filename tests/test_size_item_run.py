"""item-for-size for real (tests/fixtures/size_item): a module with two tensors given as
sizes (bloom's key length, converted in three places; funnel-style arange bounds made of
full reductions), compiled from an entry script. Each conversion alone only moves its
break, and capture_scalar_outputs alone makes torch 2.13 fail inside
(PendingUnbackedSymbolNotFound): the conversions and the setting are verified together,
in one trial (compound.pair)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gbfix import engine
from gbfix.entry import parse as parse_entry

FIXTURE = Path(__file__).parent / "fixtures" / "size_item"


@pytest.fixture(scope="module")
def fixed(tmp_path_factory) -> tuple[engine.Result, Path]:
    work = tmp_path_factory.mktemp("size_item")
    shutil.copytree(FIXTURE, work, dirs_exist_ok=True)
    return engine.fix([work.resolve()], parse_entry("python main.py", work), engine.Options()), work.resolve()


def test_the_reads_and_the_setting_are_kept_together(fixed):
    result, work = fixed
    assert {(f.line, f.code): f.status for f in result.findings} == {
        (16, "GB0033"): "fixed", (17, "GB0124"): "fixed", (28, "GB0033"): "fixed",
    }
    assert result.remaining == 0
    applied = sorted(o.edit.recipe for o in result.outcomes if o.status == "applied")
    assert applied == ["capture-scalar-outputs", "item-for-size", "item-for-size"]
    # the setting alone was tried first and failed inside torch: that is why it needs the reads
    assert any(
        o.edit.recipe == "capture-scalar-outputs" and "PendingUnbackedSymbolNotFound" in o.detail
        for o in result.outcomes if o.status == "rejected:output-mismatch"
    )


def test_the_diff(fixed):
    result, work = fixed
    model = result.fixed[work / "model.py"].decode()
    # `cache_position[-1]` may have more dims than 0: converted as the sizes do, by __index__
    assert "        kv_length = operator.index(cache_position[-1] + 1)\n" in model
    # with the standard library's imports, in order: before `from typing import Optional`
    assert model.startswith("import operator\nfrom typing import Optional\n")
    # full reductions are 0-dim: .item() gives arange the number it took from the tensor
    assert (  # too long for a line: one argument a line
        "    return torch.arange(\n"
        "        max_dist.item(),\n"
        "        (min_dist - 1).item(),\n"
        "        -stride,\n"
        "        dtype=torch.long,\n"
        "        device=pos.device,\n"
        "    )\n"
    ) in model
    assert model.count(".item()") == 2
    assert "torch._dynamo.config.capture_scalar_outputs = True\n" in result.fixed[work / "main.py"].decode()
