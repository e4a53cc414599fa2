"""What the child records for breaks Dynamo reports in unusual ways (one real run)."""

from __future__ import annotations

import textwrap

import pytest

from gbfix.detect import Prober
from gbfix.entry import parse

SCRIPT = textwrap.dedent(
    """
    import torch

    torch._dynamo.config.capture_scalar_outputs = True
    CACHE = {}


    @torch.compile(backend="eager")
    def cached(lengths):
        n = int(lengths.max())
        if n not in CACHE:  # a guard on an unbacked int: no registry entry, no GB code
            CACHE[n] = torch.arange(n)
        return CACHE[n] * 2


    @torch.compile(backend="eager")
    def layerdrop(x, layers):
        for w in layers:
            if torch.rand(()) < 0.5:  # GB0170 inside a loop: reported as GB7000
                continue
            x = x @ w
        return x


    if __name__ == "__main__":
        torch.manual_seed(0)
        print(cached(torch.tensor([3, 2])).tolist())
        print(layerdrop(torch.ones(2, 2), [torch.eye(2)] * 3).tolist())
    """
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("detect")
    (root / "ex.py").write_text(SCRIPT)
    return Prober(parse("python ex.py", root), root / "work").run()


def line_of(fragment: str) -> int:
    return next(i for i, line in enumerate(SCRIPT.splitlines(), 1) if fragment in line)


def test_a_break_without_a_registry_entry_is_recorded(run):
    found = [b for b in run.breaks if b.leaf.line == line_of("if n not in CACHE")]
    assert found, [(b.root.gb_type, b.leaf.line) for b in run.breaks]
    assert found[0].root.code is None
    assert found[0].root.gb_type == "Data-dependent expression"
    assert "data-dependent" in found[0].root.explanation


def test_a_break_in_a_loop_carries_its_root_cause(run):
    found = [b for b in run.breaks if b.leaf.line == line_of("torch.rand(()) < 0.5")]
    assert [c.code for c in found[0].causes] == ["GB7000", "GB0170"]
    assert found[0].root.gb_type == "Data-dependent branching"
