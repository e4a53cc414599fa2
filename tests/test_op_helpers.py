"""The log/warn/print op helpers on inductor, in real torch processes: each record once per
call (none while tracing), in order, with a backward pass and ``fullgraph=True``, and
the graph holding them is served from inductor's FX graph cache by a second process
(an effectful op's ``with_effects`` would bypass that cache); and prints through the op
and through torch's print op in one inductor graph keep their order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gbfix import engine
from gbfix.entry import parse
from gbfix.recipes.logging_call import LoggerToOp
from gbfix.recipes.print_op import PrintToOp
from gbfix.recipes.warn_call import WarnToOp
from tests.helpers import rewrite_line

MODEL = """\
import json
import logging
import sys
import warnings

import torch

logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
logger = logging.getLogger("model")
warnings.filterwarnings("always", "second")
warnings.showwarning = lambda message, category, filename, *args: filename == __file__ and print(f"warn {message}")


def f(x, w):
    logger.info("first")
    print(f"rows {x.shape[0]}")
    y = (x @ w).relu()
    warnings.warn("second")
    z = y.sin().sum()
    logger.info("third")
    return z


if __name__ == "__main__":
    w = torch.randn(8, 8, requires_grad=True)
    step = torch.compile(f, fullgraph=True)
    for i in range(2):
        step(torch.randn(4, 8), w).backward()
        print(f"end of call {i}")
    from torch._dynamo.utils import counters

    print(json.dumps({k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache")}))
"""


def test_ops_run_once_per_call_in_order_and_stay_cacheable(tmp_path: Path):
    source = rewrite_line(MODEL, LoggerToOp, 'logger.info("first")', "GB0291")
    source = rewrite_line(source, LoggerToOp, 'logger.info("third")', "GB0291")
    source = rewrite_line(source, WarnToOp, "warnings.warn(", "GB0007")
    source = rewrite_line(source, PrintToOp, "print(f\"rows", "GB0059")
    assert '    logger.info("' not in source and '    warnings.warn("' not in source and "print(f\"rows" not in source
    script = tmp_path / "model.py"
    script.write_text(source, encoding="utf-8")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    runs = [
        subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
        *lines, counts = run.stdout.splitlines()
        assert lines == [*("first", "rows 4", "warn second", "third", "end of call 0")] + [
            *("first", "rows 4", "warn second", "third", "end of call 1")
        ]
    first, second = (json.loads(run.stdout.splitlines()[-1]) for run in runs)
    assert "fxgraph_cache_bypass" not in first and first.get("fxgraph_cache_miss")
    assert "fxgraph_cache_bypass" not in second and second.get("fxgraph_cache_hit") == first["fxgraph_cache_miss"]


MIXED_PRINTS = """\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        print("start", x.shape[0])
        y = self.lin(x)
        print("mid", y.detach().sum())
        z = y.relu().sum()
        print("end of forward")
        return z


if __name__ == "__main__":
    net = torch.compile(Net())
    for i in range(2):
        with torch.no_grad():
            print(f"out {net(torch.ones(2, 4) * i).item():.4f}")
"""


def test_prints_through_the_op_and_torchs_print_op_keep_their_order_on_inductor(tmp_path: Path):
    # one graph, two kinds: the text ones through the module's op, the tensor one through
    # torch's print op; the own-backend (inductor) check compares the order of the lines
    (tmp_path / "prog.py").write_text(MIXED_PRINTS, encoding="utf-8")
    result = engine.fix([tmp_path / "prog.py"], parse("python prog.py", tmp_path))
    assert [(o.edit.recipe, o.status) for o in result.outcomes] == [("print-to-op", "applied")] * 3
    assert result.remaining == 0 and result.final is not None and not result.final.output_mismatch
    [fixed] = result.fixed.values()
    assert b'gbfix_print("mid {!s}", y.detach().sum())' in fixed
