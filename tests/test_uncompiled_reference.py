"""The uncompiled reference run, with real torch runs: a trial that restores what the
program prints or warns uncompiled is judged against it, and it starts with the trial."""

from __future__ import annotations

import textwrap

from gbfix import engine
from gbfix.entry import parse

WARNS_AGAIN = textwrap.dedent(
    """
    import warnings

    import torch


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x):
            warnings.warn("`Net` is deprecated", FutureWarning)
            return self.lin(x).relu()


    net = Net()
    step = torch.compile(net, backend="eager")
    for i in range(2):
        print(f"out {step(torch.ones(2) * i).sum().item():.4f}")
    net.eval()
    print(f"eval {step(torch.ones(2)).sum().item():.4f}")
    """
)


def test_a_trial_that_warns_as_uncompiled_is_judged_by_the_reference_started_with_it(tmp_path):
    # Compiled, the original warns again after the eval-mode recompile resets the warning
    # registries; the fixed program warns once, as it does uncompiled. Every compile uses
    # the eager backend, so no own-backend run goes beside the trial: the uncompiled
    # reference starts with it, and no run is added when the trial differs.
    (tmp_path / "prog.py").write_text(WARNS_AGAIN)
    progress: list[str] = []
    res = engine.fix([tmp_path / "prog.py"], parse("python prog.py", tmp_path), progress=progress.append)
    assert [(o.edit.recipe, o.status) for o in res.outcomes] == [("warn-to-op", "applied")]
    assert "the run differs: comparing with the original run without compile (started with the trial)" in progress
    assert not any("running the original without compile" in p for p in progress)
    assert res.runs == 3  # baseline, trial, uncompiled reference
    assert any("as the uncompiled one does" in n for n in res.notes)
