"""All of gbfix's benchmark figures in one table, each with the command that reproduces it.

    python bench/run.py                    # the five figures (fix rate: the whole suite, ~5 min with --jobs 2)
    python bench/run.py --quick            # fewer rounds, payoff with 1 process per variant, fix rate on 3 cases
    python bench/run.py --only payoff --only apply --details

The figures, run one after the other:
- detection: gbfix's detection run against `TORCH_LOGS=graph_breaks` on examples/tinylm
  (bench/detect_speed.py);
- apply: the work of `gbfix --apply` (``engine.fix``: detect, fix, verify, the own-backend
  check; writing the files is not timed) against one detection run (``Prober.run()``) on
  examples/tinylm, interleaved per round, medians, and once more on the unchanged tree,
  whose result the result cache holds (this file);
- payoff: latency of the models in bench/models/ before and after gbfix's verified edits
  on CPU inductor (bench/payoff.py);
- scale: gbfix on 500 generated files of which the entry touches 10: files parsed and
  the time of the static parts (bench/scale.py);
- fix rate: gbfix over the real-world suite, break sites removed (bench/fixrate.py).
This is a thin driver: the other bench modules do the measuring; `--details` also prints
their own reports.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
TINYLM = REPO / "examples" / "tinylm"
TINYLM_ENTRY = "python train.py"
QUICK_CASES = ["loss_normalize", "warn_in_forward", "mnf_rng_branch"]  # a fixable case, a safe-recipe case, a must-not-fix case
FIGURES = ("detection", "apply", "payoff", "scale", "fixrate")


def _setup() -> None:
    # Measure the gbfix of this checkout, in this process and in the children it starts;
    # the bench modules import each other's siblings by name.
    src = str(REPO / "src")
    for p in (src, str(BENCH)):
        if p not in sys.path:
            sys.path.insert(0, p)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)


# --- apply wall time vs one detection run (the part this file measures) -------------------
def apply_vs_detect(rounds: int) -> dict:
    """``engine.fix`` on examples/tinylm (what `gbfix --apply` computes before it writes)
    against one ``Prober.run()`` (one detection run), interleaved, ``rounds`` times; and
    one run of the edited program on its own backend (inductor) in a fresh interpreter,
    the run that proves the edits still compile there, as a user would make it."""
    from gbfix import engine
    from gbfix.detect import Prober
    from gbfix.entry import parse

    entry = parse(TINYLM_ENTRY, TINYLM)
    detect, fix, reuse, own, eager, runs = [], [], [], [], [], []
    for r in range(rounds):
        with tempfile.TemporaryDirectory(prefix="gbfix-bench-") as work:
            started = time.perf_counter()
            Prober(entry, Path(work)).run()
            detect.append(time.perf_counter() - started)
            # An empty result cache: the first fix runs everything, the second
            # (--apply after --dry-run on the same tree) reuses its result.
            os.environ["GBFIX_CACHE_DIR"] = str(Path(work) / "cache")
            started = time.perf_counter()
            result = engine.fix([TINYLM], entry, engine.Options(), cache=True)
            fix.append(time.perf_counter() - started)
            started = time.perf_counter()
            engine.fix([TINYLM], entry, engine.Options(), cache=True)
            reuse.append(time.perf_counter() - started)
            started = time.perf_counter()
            Prober(entry, Path(work) / "own").run(overlay=result.fixed, backend=engine.Options().final_backend)
            own.append(time.perf_counter() - started)
            # --backend eager: the eager trials are the final check (no inductor run).
            started = time.perf_counter()
            engine.fix([TINYLM], entry, engine.Options(backend="eager"))
            eager.append(time.perf_counter() - started)
        os.environ.pop("GBFIX_CACHE_DIR")
        runs.append(result.runs)
        print(
            f"apply round {r + 1}: detection {detect[-1]:.1f}s  engine.fix {fix[-1]:.1f}s ({result.runs} runs)  "
            f"unchanged tree {reuse[-1]:.2f}s  edited program on its own backend {own[-1]:.1f}s  "
            f"engine.fix --backend eager {eager[-1]:.1f}s",
            file=sys.stderr, flush=True,
        )
    return {
        "detect_s": statistics.median(detect),
        "fix_s": statistics.median(fix),
        "reuse_s": statistics.median(reuse),
        "own_s": statistics.median(own),
        "eager_s": statistics.median(eager),
        "runs": statistics.median(runs),
        "files": len(result.fixed),
        "remaining": result.remaining,
    }


# --- the table ------------------------------------------------------------------------------
def main() -> int:
    _setup()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="1 round, payoff with 1 process per variant and 300 calls, fix rate on " + ", ".join(QUICK_CASES))
    ap.add_argument("--only", action="append", choices=FIGURES, default=[], help="run only this figure (repeatable)")
    ap.add_argument("--rounds", type=int, help="rounds of the detection and apply figures (default 3; --quick 1)")
    ap.add_argument("--repeats", type=int, help="payoff: fresh processes per variant (default 3; --quick 1)")
    ap.add_argument("--calls", type=int, help="payoff: timed calls per process (default 1000; --quick 300)")
    ap.add_argument("--jobs", type=int, default=2, metavar="N", help="fix rate: cases in N parallel processes (default 2)")
    ap.add_argument("--details", action="store_true", help="also print each bench's own report")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    repeats = args.repeats or (1 if args.quick else 3)
    calls = args.calls or (300 if args.quick else 1000)
    wanted = args.only or list(FIGURES)
    rows: list[tuple[str, str, str]] = []  # figure, result, command
    details: list[str] = []
    ok = True
    started = time.perf_counter()

    if "detection" in wanted:
        import detect_speed

        s = detect_speed.measure(TINYLM_ENTRY, TINYLM, rounds)
        ok &= s.same
        rows.append((
            "detection speed (examples/tinylm)",
            f"gbfix {s.gbfix:.1f} s vs `TORCH_LOGS=graph_breaks` {s.cold:.1f} s cold ({s.cold / s.gbfix:.1f}x) / "
            f"{s.warm:.1f} s warm ({s.warm / s.gbfix:.1f}x); sites logged {len(s.logged)}, found {len(s.found)}"
            f"{'' if s.same else ' (MISSED some)'}",
            f"`python bench/detect_speed.py --rounds {rounds}`",
        ))
        details.append(detect_speed.report(s))

    if "apply" in wanted:
        a = apply_vs_detect(rounds)
        rows.append((
            "`--apply` wall time vs one detection run (examples/tinylm)",
            f"engine.fix {a['fix_s']:.1f} s = {a['fix_s'] / a['detect_s']:.1f}x one detection run ({a['detect_s']:.1f} s); "
            f"{a['runs']:g} program runs, {a['files']} file(s) edited, {a['remaining']} site(s) still breaking (result.remaining, safe recipes); "
            f"the edited program alone, once on its own backend in a fresh interpreter (how a user would check "
            f"the edits by hand) {a['own_s']:.1f} s, so engine.fix is {a['fix_s'] / a['own_s']:.1f}x that; "
            f"with `--backend eager` (no inductor run) "
            f"{a['eager_s']:.1f} s = {a['eager_s'] / a['detect_s']:.1f}x; "
            f"again on the unchanged tree (result cache) {a['reuse_s']:.2f} s",
            f"`python bench/run.py --only apply --rounds {rounds}`",
        ))

    if "payoff" in wanted:
        import payoff

        ms = payoff.run(repeats=repeats, calls=calls)
        ups = payoff.speedups(ms)
        ok &= all(payoff.same_output(m) for m in ms)
        per_model = ", ".join(f"{m.name} {u:.2f}x" for m, u in zip([m for m in ms if m.after], ups))
        rows.append((
            "payoff: median latency before / after the edits (CPU inductor)",
            f"geometric mean {payoff.geomean(ups):.2f}x ({per_model})",
            f"`python bench/payoff.py --repeats {repeats} --calls {calls}`",
        ))
        details.append(payoff.report(ms, "cpu", "default", repeats, calls, False))

    if "scale" in wanted:
        import scale

        row = scale.measure(500, 10, 3)
        rows.append((
            "scale: 500 files, the entry touches 10 (3 break)",
            f"{row['parsed']} files parsed; static parts {row['static_s']:.2f} s of {row['total_s']:.1f} s",
            "`python bench/scale.py`",
        ))
        details.append(scale.table(row))

    if "fixrate" in wanted:
        import fixrate

        cases = fixrate._cases(QUICK_CASES if args.quick else [])
        fr = fixrate.run_cases(cases, unsafe=False, jobs=args.jobs)
        t = fixrate.totals(fr)
        ok &= not fixrate.failed(fr)
        pct = f" ({100 * t.removed / t.sites:.0f}%)" if t.sites else ""
        subset = f" on {len(cases)} of the cases ({', '.join(c.name for c in cases)})" if args.quick else ""
        only = "".join(f" --only {c.name}" for c in cases) if args.quick else ""
        rows.append((
            "fix rate: real-world suite, safe recipes" + (" (subset)" if args.quick else ""),
            f"{t.removed}/{t.sites}{pct} break sites removed in fixable cases{subset}; output changes {t.changes}; "
            f"must-not-fix left unchanged {t.left}/{t.guarded}" + (f"; {t.failed} failed to run" if t.failed else ""),
            f"`python bench/fixrate.py --jobs {args.jobs}{only}`",
        ))
        details.append(fixrate._table(fr) + "\n\n" + fixrate._totals(fr))

    if args.details:
        for text in details:
            print(text + "\n")
    print("| figure | result | reproduce with |")
    print("|---|---|---|")
    for figure, result, command in rows:
        print(f"| {figure} | {result} | {command} |")
    print(f"\nwall time: {time.perf_counter() - started:.0f}s on {os.cpu_count()} CPU core(s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
