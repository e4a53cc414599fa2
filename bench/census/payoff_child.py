"""Run one census program with every compiled call timed (payoff.py's child).

    python bench/census/payoff_child.py TABLE NAME CALLS OUT.json

The program runs as in the census (its table's build function), on the backend in
CENSUS_BACKEND (payoff.py sets inductor), with its loops doing CALLS calls instead of 2.
Each call of a compiled callable is timed; OUT.json gets the list of times, the
number of graphs Dynamo handed to the backend (counters["stats"]["unique_graphs"],
recompiles included) and the graph-break count Dynamo kept.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, os.environ.get("CENSUS_PROGRAMS") or str(HERE / "programs"))  # payoff.py: an edited copy

import census  # noqa: E402
import torch  # noqa: E402


def main() -> None:
    table, name, calls, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    mod = importlib.import_module(table)
    times: list[float] = []
    orig_compile = census.Ctx.compile

    def timed_compile(self, fn, **kw):
        cf = orig_compile(self, fn, **kw)

        def call(*a, **k):
            t = time.perf_counter()
            r = cf(*a, **k)
            times.append(time.perf_counter() - t)
            return r
        return call

    census.Ctx.compile = timed_compile
    census.Ctx.eval_calls.__defaults__ = (calls, None)
    census.Ctx.train_steps.__defaults__ = (calls, None)
    census.Ctx.call_fn.__defaults__ = ((), None, calls, False)
    prog = mod.PROGRAMS[name]
    census.seed(0)
    torch.set_num_threads(1)
    ctx = census.Ctx(prog.backend)
    t0 = time.perf_counter()
    prog.build(ctx)
    total = time.perf_counter() - t0
    from torch._dynamo.utils import counters

    Path(out).write_text(json.dumps({
        "times": times, "total_s": total, "backend": ctx.backend,
        "graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "digest": census.digest_lines(ctx.records),
    }))


if __name__ == "__main__":
    main()
