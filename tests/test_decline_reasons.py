"""A site no recipe fixes says what the recipes that looked at it found (a real run)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gbfix import engine
from gbfix.entry import parse as parse_entry

PROGRAM = textwrap.dedent(
    """\
    import zlib

    import torch

    CALLS = 0


    def checksum(x):
        global CALLS
        CALLS += 1
        return zlib.crc32(b"gbfix") % 7


    @torch.compile(backend="eager")
    def step(x):
        return x + checksum(x)


    print(step(torch.ones(2)))
    """
)


@pytest.mark.slow
def test_an_unfixed_site_carries_the_recipes_reasons(tmp_path: Path):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    result = engine.fix([script], parse_entry("python prog.py", tmp_path), engine.Options())
    [finding] = [f for f in result.findings if f.status == "unfixed"]
    assert finding.code == "GB0007" and finding.line == 11
    assert finding.detail.startswith("no recipe applies (")
    assert "wrap-custom-op: rebinds a global" in finding.detail
    assert result.fixed == {}
