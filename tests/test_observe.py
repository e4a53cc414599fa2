"""Observed calls: what a wrapper recipe learns about a helper from one real uncompiled run."""

from __future__ import annotations

import textwrap
from pathlib import Path

from gbfix.detect import Prober
from gbfix.entry import parse
from gbfix.records import ValueSpec

SCRIPT = textwrap.dedent(
    """
    import torch


    @torch.no_grad()
    def helper(x: torch.Tensor, k: int, *rest, scale=None):
        return x.sum(0) * k, [x[:2]]


    def gen(x):
        yield x


    @torch.compile(backend="eager")
    def f(x):
        a, b = helper(x, 3, "extra")
        return a + next(gen(x))[0]


    if __name__ == "__main__":
        for n in (4, 5):
            print(f(torch.ones(n, 3)))
    """
)


def test_calls_of_the_chosen_functions_are_recorded(tmp_path: Path):
    script = tmp_path / "ex.py"
    script.write_text(SCRIPT)
    first_line = SCRIPT.splitlines().index("@torch.no_grad()") + 1  # the code object starts at its decorator
    generator = SCRIPT.splitlines().index("def gen(x):") + 1
    run = Prober(parse("python ex.py", tmp_path), tmp_path / "work").run(
        backend="none", observe=((script, first_line), (script, generator))
    )
    calls = run.observed[(str(script.resolve()), first_line)]
    assert len(calls) == 2
    tensor = ValueSpec("tensor", (5, 3), "torch.float32", "cpu")
    assert dict(calls[1].args) == {
        "x": tensor,
        "k": ValueSpec("int", value=3),
        "rest": ValueSpec("tuple", items=(ValueSpec("str", value="extra"),)),
        "scale": ValueSpec("none"),
    }
    assert calls[1].result == ValueSpec(
        "tuple", items=(ValueSpec("tensor", (3,), "torch.float32", "cpu"), ValueSpec("list", items=(ValueSpec("tensor", (2, 3), "torch.float32", "cpu"),)))
    )
    # A generator's frame returns at each yield: it is no function to wrap, and not recorded.
    assert run.observed[(str(script.resolve()), generator)] == ()
    assert run.stdout.splitlines() == ["tensor([13., 13., 13.])", "tensor([16., 16., 16.])"]
