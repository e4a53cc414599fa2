"""Payoff: what gbfix's verified edits buy at run time, model by model.

    python bench/payoff.py                            # every model in bench/models/, CPU inductor
    python bench/payoff.py --repeats 5 --calls 3000   # more processes, more timed calls each
    python bench/payoff.py --only mlp_logging --only item_scale
    python bench/payoff.py --device cuda --mode reduce-overhead   # on a GPU machine (CUDA graphs)

For each model gbfix's engine computes the verified edits in memory (nothing is written
into bench/models/; the edited source goes to a temporary folder). The original and the
edited program then run in separate fresh processes, interleaved (before, after, before,
after, ...) so machine noise hits both alike. Each process imports the model, calls its
`build(device, mode)` (the compiled model, with the default inductor backend, and one
batch) and, under `torch.no_grad()`:
- times the first call: compile time, with a fresh inductor cache (TORCHINDUCTOR_CACHE_DIR)
  per process, so it is the first run after a model change;
- counts graph breaks: the distinct user-code sites (file, line) of the breaks Dynamo logs
  with `TORCH_LOGS=graph_breaks` (set in each process; it logs at compile time only),
  and graphs compiled (Dynamo's counter `stats.unique_graphs`);
- runs `--warmup` calls, then one untimed call under a profile hook that counts the
  compiled graphs it runs (`graph calls/step`: a graph reused by six layers counts six),
  then times `--calls` calls one by one (with `torch.cuda.synchronize()` around each on
  CUDA) and keeps their median. The timed window is short (1000 calls of a few hundred
  microseconds), so a burst of load from another process can move one process's median:
  that is what the median over processes is for.
Each process runs with `torch.set_num_threads(--threads)`, 1 by default: inductor's CPU
kernels are OpenMP loops whose threads spin-wait for each other, and on a shared machine
with more runnable processes than cores that waiting, not the model, sets the latency of
small kernels; one thread per process keeps the timings repeatable (and gives the edits
no help: a slower kernel hides more of the overhead they remove).
The table shows the median over the `--repeats` processes of each figure; `speedup` is
the median latency before over after, and the last line their geometric mean. `same
output` compares a checksum of the first call's output before and after (rtol 1e-4), an
independent check of the engine's verdict.

A model is a runnable script in bench/models/ with a `build(device="cpu", mode="default")`
returning `(step, inputs)`, where `step(*inputs)` is one compiled inference call, and a
`__main__` that runs a few steps and prints results (the entry gbfix verifies with).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODELS = Path(__file__).resolve().parent / "models"
_MARK = "PAYOFF_JSON "
_LOG_SITE = re.compile(r"Graph break(?: \(user stack suppressed due to duplicate graph break\))? in user code at (.+):(\d+)")
WORKER_TIMEOUT = 900


# --- the worker: one fresh process, one variant of one model ---------------------------
def _graph_calls(call) -> int | None:
    """How many compiled graphs one call runs: calls of inductor's CompiledFxGraph.__call__
    (one per graph, also under CUDA graphs) seen by a profile hook during one untimed call."""
    try:
        from torch._inductor.output_code import CompiledFxGraph

        target = CompiledFxGraph.__call__.__code__
    except (ImportError, AttributeError):  # another torch layout: the column shows "?"
        return None
    seen = 0

    def hook(frame, event, arg):
        nonlocal seen
        if event == "call" and frame.f_code is target:
            seen += 1

    sys.setprofile(hook)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen


def _worker(source: Path, device: str, mode: str, warmup: int, calls: int, threads: int) -> dict:
    import torch
    from torch._dynamo.utils import counters

    if threads > 0:  # before compiling: inductor's CPU kernels read the thread count then
        torch.set_num_threads(threads)
    spec = importlib.util.spec_from_file_location(source.stem, source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[source.stem] = module
    spec.loader.exec_module(module)
    step, inputs = module.build(device=device, mode=mode)
    cuda = device.startswith("cuda")
    graphs_mark = mode == "reduce-overhead"

    def call():
        if graphs_mark:
            torch.compiler.cudagraph_mark_step_begin()
        return step(*inputs)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    with torch.no_grad():
        counters.clear()
        sync()
        started = time.perf_counter()
        out = call()
        sync()
        compile_s = time.perf_counter() - started
        first = out.detach().double().cpu()
        checksum = [first.sum().item(), first.abs().sum().item()]
        for _ in range(warmup):
            call()
        sync()
        graphs = int(counters["stats"]["unique_graphs"])
        per_call = _graph_calls(call)
        sync()
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            call()
            sync()
            times.append(time.perf_counter() - started)
        # Compiles after the first call (a recompile in warm-up or timing) would show here.
        late = int(counters["stats"]["unique_graphs"]) - graphs
    return {
        "compile_s": compile_s,
        "graphs": graphs,
        "graph_calls": per_call,
        "late_graphs": late,
        "latency_s": statistics.median(times),
        "checksum": checksum,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def measure(source: Path, device: str, mode: str, warmup: int, calls: int, threads: int = 1) -> dict:
    """One fresh process on ``source`` (a model file), with a cold inductor cache."""
    with tempfile.TemporaryDirectory(prefix="payoff-cache-") as cache:
        # TORCH_LOGS=graph_breaks: Dynamo logs each break it takes (at compile time only).
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TORCH_LOGS": "graph_breaks"}
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", str(source), "--device", device,
                "--mode", mode, "--warmup", str(warmup), "--calls", str(calls), "--threads", str(threads)]
        proc = subprocess.run(argv, cwd=source.parent, env=env, capture_output=True, text=True, timeout=WORKER_TIMEOUT)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_MARK):
            result = json.loads(line[len(_MARK):])
            taken = _LOG_SITE.findall(proc.stderr)
            result["breaks"] = len({(os.path.realpath(f), int(n)) for f, n in taken})  # break sites
            result["breaks_taken"] = len(taken)
            return result
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    raise RuntimeError(f"{source.name}: the worker failed (exit {proc.returncode}): {tail}")


# --- the driver -------------------------------------------------------------------------
@dataclass
class Model:
    name: str
    path: Path
    recipes: list[str] = field(default_factory=list)  # recipes of the applied edits
    findings: list[str] = field(default_factory=list)  # gbfix's break sites and their status
    fixed: bytes | None = None  # gbfix's verified edited source (None: nothing to change)
    fix_s: float = 0.0
    before: list[dict] = field(default_factory=list)
    after: list[dict] = field(default_factory=list)


def models(only: list[str]) -> list[Model]:
    found = {p.stem: p for p in sorted(MODELS.glob("*.py")) if not p.name.startswith("_")}
    missing = set(only) - set(found)
    if missing:
        sys.exit(f"payoff: no such model: {', '.join(sorted(missing))} (have: {', '.join(found)})")
    return [Model(name, path) for name, path in found.items() if not only or name in only]


def fix_model(model: Model, unsafe: bool = False) -> Model:
    """gbfix's verified edits for one model, in memory (the engine writes nothing)."""
    from gbfix import engine
    from gbfix.entry import parse

    started = time.perf_counter()
    result = engine.fix([model.path], parse(f"python {model.path.name}", model.path.parent), engine.Options(unsafe_fixes=unsafe))
    model.fix_s = time.perf_counter() - started
    model.fixed = result.fixed.get(model.path)
    model.recipes = sorted({o.edit.recipe for o in result.outcomes if o.status == "applied"})
    model.findings = [f"{model.path.name}:{f.line} {f.code} {f.status}" for f in result.findings]
    return model


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def same_output(m: Model) -> bool:
    """The first call's output checksums agree before and after (True when nothing was measured)."""
    return not m.after or _same(m.before, m.after)


def _same(a: list[dict], b: list[dict]) -> bool:
    return all(math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-6) for x, y in zip(a[0]["checksum"], b[0]["checksum"]))


def speedups(ms: list[Model]) -> list[float]:
    return [_median(m.before, "latency_s") / _median(m.after, "latency_s") for m in ms if m.before and m.after]


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def table(ms: list[Model]) -> str:
    head = ["model", "recipes", "break sites before/after", "graphs before/after", "graph calls/step before/after",
            "compile s before/after", "median latency before/after", "speedup", "same output"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for m in ms:
        if not m.after:
            lines.append(f"| {m.name} | (gbfix changes nothing) |" + " |" * (len(head) - 2))
            continue
        b, a = m.before, m.after
        bl, al = _median(b, "latency_s"), _median(a, "latency_s")
        cells = [
            m.name, ", ".join(m.recipes) or "-",
            f"{_median(b, 'breaks'):g} / {_median(a, 'breaks'):g}",
            f"{_median(b, 'graphs'):g} / {_median(a, 'graphs'):g}",
            f"{_count(b, 'graph_calls')} / {_count(a, 'graph_calls')}",
            f"{_median(b, 'compile_s'):.1f} / {_median(a, 'compile_s'):.1f}",
            f"{_fmt_time(bl)} / {_fmt_time(al)}",
            f"{bl / al:.2f}x",
            "yes" if _same(b, a) else "NO",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _count(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows if r[key] is not None]
    return f"{statistics.median(values):g}" if values else "?"


def _fmt_time(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} us"


def run(only: list[str] = (), device: str = "cpu", mode: str = "default", repeats: int = 3, calls: int = 1000,
        warmup: int = 50, threads: int = 1, unsafe: bool = False, progress=lambda s: print(s, file=sys.stderr, flush=True)) -> list[Model]:
    """Fix every model, then measure before and after, interleaved; returns the models with their runs."""
    ms = models(list(only))
    for m in ms:
        fix_model(m, unsafe)
        progress(f"{m.name}: gbfix {'changes it' if m.fixed else 'changes nothing'} ({', '.join(m.recipes) or 'no edit'}), {m.fix_s:.0f}s")
    with tempfile.TemporaryDirectory(prefix="payoff-src-") as tmp:
        edited = {}
        for m in ms:
            if m.fixed is not None:
                edited[m.name] = Path(tmp) / m.name / m.path.name
                edited[m.name].parent.mkdir()
                edited[m.name].write_bytes(m.fixed)
        for r in range(repeats):
            for m in ms:
                if m.name not in edited:
                    continue
                m.before.append(measure(m.path, device, mode, warmup, calls, threads))
                m.after.append(measure(edited[m.name], device, mode, warmup, calls, threads))
                b, a = m.before[-1], m.after[-1]
                progress(f"round {r + 1} {m.name}: before {_fmt_time(b['latency_s'])} ({b['graphs']} graphs, compile {b['compile_s']:.1f}s)"
                         f"  after {_fmt_time(a['latency_s'])} ({a['graphs']} graphs, compile {a['compile_s']:.1f}s)")
    return ms


def report(ms: list[Model], device: str, mode: str, repeats: int, calls: int, unsafe: bool) -> str:
    recipes = "safe and unsafe recipes (--unsafe-fixes)" if unsafe else "safe recipes"
    runs = [r for m in ms for r in m.before + m.after]
    threads = f", {runs[0]['threads']} CPU thread(s)" if runs else ""
    out = [f"Payoff of gbfix's verified edits ({recipes}) on {device} inductor, mode {mode}{threads}: "
           f"median of {calls} calls per process, median over {repeats} fresh processes per variant\n", table(ms)]
    ups = speedups(ms)
    out.append(f"\ngeometric-mean speedup: {geomean(ups):.2f}x over {len(ups)} model(s)")
    late = [m.name for m in ms for r in m.before + m.after if r["late_graphs"]]
    if late:
        out.append(f"recompiled after the first call (the latency includes no compile, but check): {', '.join(sorted(set(late)))}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--mode", choices=["default", "reduce-overhead"], default="default",
                    help="torch.compile mode; reduce-overhead (CUDA graphs) only with --device cuda")
    ap.add_argument("--repeats", type=int, default=3, metavar="N", help="fresh processes per variant (default 3)")
    ap.add_argument("--calls", type=int, default=1000, metavar="N", help="timed calls per process (default 1000)")
    ap.add_argument("--warmup", type=int, default=50, metavar="N", help="untimed calls after the first (default 50)")
    ap.add_argument("--threads", type=int, default=1, metavar="N",
                    help="torch.set_num_threads(N) in each process (default 1; 0 leaves torch's default)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="run only this model (repeatable)")
    ap.add_argument("--unsafe", action="store_true", help="also let gbfix use its unsafe recipes (--unsafe-fixes)")
    ap.add_argument("--details", action="store_true", help="list gbfix's break sites per model")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        print(_MARK + json.dumps(_worker(args.worker, args.device, args.mode, args.warmup, args.calls, args.threads)))
        return 0
    if args.mode == "reduce-overhead" and args.device != "cuda":
        ap.error("--mode reduce-overhead (CUDA graphs) needs --device cuda")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            ap.error("--device cuda: torch sees no CUDA device")
    # Measure the gbfix of this checkout, in this process and in the children it starts.
    src = str(REPO / "src")
    sys.path.insert(0, src)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    started = time.perf_counter()
    ms = run(args.only, args.device, args.mode, args.repeats, args.calls, args.warmup, args.threads, args.unsafe)
    print(report(ms, args.device, args.mode, args.repeats, args.calls, args.unsafe))
    if args.details:
        for m in ms:
            print(f"\n{m.name}:")
            for line in m.findings:
                print(f"  {line}")
            for label, rows in (("before", m.before), ("after", m.after)):
                if rows:
                    print(f"  {label}: latency per process " + ", ".join(_fmt_time(r["latency_s"]) for r in rows)
                          + "; compile s " + ", ".join(f"{r['compile_s']:.1f}" for r in rows))
    print(f"\nwall time: {time.perf_counter() - started:.0f}s")
    return 0 if all(same_output(m) for m in ms) else 1


if __name__ == "__main__":
    sys.exit(main())
