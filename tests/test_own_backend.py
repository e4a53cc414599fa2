"""The own-backend check: one run for the edits of all rounds; when the program's own
backend rejects an edit that eager accepted, only that edit is dropped (a real run with
a user backend that, like some vendor backends, cannot compile torch.where)."""

from __future__ import annotations

import textwrap

import pytest

from gbfix import engine
from gbfix.entry import parse

PROGRAM = textwrap.dedent(
    """
    import torch


    def no_where(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "call_function" and "where" in str(node.target):
                raise NotImplementedError("no_where cannot compile torch.where")
        return gm.forward


    @torch.compile(backend=no_where)
    def step(x):
        print("step")
        if x.sum() > 0:
            y = x * 2
        else:
            y = x - 1
        return y.relu()


    torch.manual_seed(0)
    for i in range(3):
        print(step(torch.randn(4)).sum().item())
    """
)


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("own_backend")
    (root / "prog.py").write_text(PROGRAM)
    messages: list[str] = []
    result = engine.fix([root / "prog.py"], parse("python prog.py", root), progress=messages.append)
    return result, messages


def test_an_edit_its_backend_cannot_compile_is_dropped_and_the_rest_kept(fixed):
    result, _ = fixed
    status = {o.edit.recipe: (o.status, o.detail) for o in result.outcomes}
    assert status["print-to-op"][0] == "applied"
    where = [v for k, v in status.items() if k != "print-to-op"]
    assert [s for s, _ in where] == ["rejected:backend"]
    assert "no_where cannot compile torch.where" in where[0][1]  # the reason, not just "raised:"
    [new] = result.fixed.values()
    assert b'gbfix_print("step")' in new and b"torch.where(" not in new
    assert result.remaining == 1  # the branch, counted on the program's own backend
    assert result.final is not None and not result.final.output_mismatch


def test_the_failed_check_of_all_edits_is_not_run_again_when_halving(fixed):
    _, messages = fixed
    own = [m for m in messages if m.startswith("own-backend run")]
    assert own == [
        "own-backend run with every accepted edit (2): started alongside the trial",
        "own-backend run with 1 edit(s)",
        "own-backend run with 2 edit(s)",
    ]
    assert any(m.startswith("checking the edits round by round") for m in messages)
