"""Payoff of the census edits on inductor (CPU): the original program against gbfix's edited copy.

    python bench/census/payoff.py                         # every program gbfix changed (results/package/)
    python bench/census/payoff.py --only hf4/mixtral_eval --calls 30 --repeats 2
    python bench/census/payoff.py --results results/user  # the user-side edits
    python bench/census/payoff.py --only hf5/switch_train --repeats 3 --out payoff-package-recheck.json

For each program whose edits the census kept (``changed`` and output identical or close), the
edited package copy is rebuilt from .scratch/edited/ (hard links to the install plus the edited
files; run.py keeps them), then the program runs on inductor, original and edited, each in a fresh
interpreter with a fresh ``TORCHINDUCTOR_CACHE_DIR`` (a new temporary folder: a cold start) and its
loops doing ``--calls`` calls (payoff_child.py times every call of the compiled callable):

- ``cold s``: the first call (Dynamo + inductor compile of what it reaches, then the run);
- ``steady ms``: the median of the second half of the calls;
- ``graphs``: graphs Dynamo handed to inductor (``counters["stats"]["unique_graphs"]``);
- ``same``: whether the digests of the two runs' outputs are identical (where not, the row keeps
  the first digest lines that differ, ``differs``: a path, shape, dtype and its sums).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run as census_run  # noqa: E402


def edited_copies(prog: census_run.Prog, tag: str) -> tuple[Path | None, Path | None] | None:
    """The edited package (a site folder to put first on PYTHONPATH, None when gbfix edited only
    the program) and the edited programs folder (None when it edited only the package)."""
    src = census_run.EDITED / tag / f"{prog.env}__{prog.name}"
    if not src.exists():
        return None
    root = census_run.SCRATCH / "payoff" / tag / f"{prog.env}__{prog.name}"
    shutil.rmtree(root, ignore_errors=True)
    site = programs = None
    for f in sorted(src.rglob("*")):
        if not f.is_file():
            continue
        rel = f.relative_to(src)
        if rel.parts[0] == "programs":
            if programs is None:
                programs = root / "programs"
                shutil.copytree(census_run.PROGRAMS_DIR, programs, ignore=shutil.ignore_patterns("__pycache__"))
            dst = root / rel
        else:
            if site is None:
                site = root / "site"
                site.mkdir(parents=True)
                subprocess.run(["cp", "-al", str(prog.site / prog.package), str(site / prog.package)], check=True)
            dst = site / rel
            dst.unlink(missing_ok=True)  # a hard link to the install: replace it, never write through it
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, dst)
    return site, programs


def measure(prog: census_run.Prog, copies: tuple[Path | None, Path | None], calls: int) -> dict:
    site, programs = copies
    with tempfile.TemporaryDirectory(prefix="census-payoff-") as tmp:
        out = Path(tmp) / "out.json"
        env = census_run._env(prog.env, str(site) if site else None, CENSUS_BACKEND="inductor",
                              CENSUS_PROGRAMS=str(programs) if programs else "",
                              TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / "inductor"))
        t0 = time.monotonic()
        p = subprocess.run([str(prog.python), str(HERE / "payoff_child.py"), prog.table, prog.name, str(calls), str(out)],
                           capture_output=True, text=True, env=env, cwd=census_run.REPO, timeout=900)
        if p.returncode != 0:
            return {"error": p.stderr[-1500:]}
        r = json.loads(out.read_text())
        r["wall_s"] = time.monotonic() - t0
        return r


def summarize(r: dict) -> dict:
    t = r["times"]
    half = t[len(t) // 2:] or t
    return {"cold_s": t[0], "steady_ms": 1000 * statistics.median(half), "graphs": r["graphs"],
            "breaks": r["graph_breaks"], "calls": len(t)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default="results/package", help="census results folder (relative to bench/census)")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=1, help="runs of each variant; the best steady and cold are kept")
    ap.add_argument("--limit", type=int, default=0, help="at most this many programs")
    ap.add_argument("--out", default="", help="results file name (default payoff-<results folder>.json): a re-check beside the full run")
    args = ap.parse_args()
    rdir = HERE / args.results
    tag = rdir.name
    rows = []
    todo = []
    for p in sorted(rdir.glob("*.json")):
        r = json.loads(p.read_text())
        if r.get("status") != "ok" or not r.get("changed") or r.get("output") not in ("identical", "close"):
            continue
        if args.only and r["program"] not in args.only and r["program"].split("/")[1] not in args.only:
            continue
        todo.append(census_run.Prog(r["env"], r["table"], r["program"].split("/", 1)[1], r["package"]))
    if args.limit:
        todo = todo[: args.limit]
    print(f"{len(todo)} programs changed by gbfix; inductor, {args.calls} calls, {args.repeats} repeat(s)", file=sys.stderr)
    out = HERE / "results" / (args.out or f"payoff-{tag}.json")
    for prog in todo:
        copies = edited_copies(prog, tag)
        if copies is None:
            continue
        res = {}
        for variant, where in (("original", (None, None)), ("edited", copies)):
            best = None
            for _ in range(args.repeats):
                m = measure(prog, where, args.calls)
                if "error" in m:
                    best = m
                    break
                s = summarize(m)
                s["digest"] = m["digest"]
                if best is None:
                    best = s
                else:
                    best["cold_s"] = min(best["cold_s"], s["cold_s"])
                    best["steady_ms"] = min(best["steady_ms"], s["steady_ms"])
            res[variant] = best
        o, e = res["original"], res["edited"]
        row = {"program": prog.id, "original": o, "edited": e}
        if "error" not in o and "error" not in e:
            a, b = o.pop("digest"), e.pop("digest")
            row["same"] = a == b
            if not row["same"]:  # how far apart: the first output lines (shape, dtype, sums) that differ
                row["differs"] = [[x, y] for x, y in zip(a, b) if x != y][:3] or [[len(a), len(b)]]
        rows.append(row)
        print(fmt(row), file=sys.stderr, flush=True)
        # after each program: a run stopped midway keeps what it measured; a partial run (--only)
        # replaces the stored rows of its own programs only
        kept = json.loads(out.read_text()) if out.exists() else []
        measured = {r["program"] for r in rows}
        out.write_text(json.dumps([r for r in kept if r["program"] not in measured] + rows, indent=1))
    print(table(rows))


def fmt(row: dict) -> str:
    o, e = row["original"], row["edited"]
    if "error" in o or "error" in e:
        return f"{row['program']:32s} error: {(o.get('error') or e.get('error'))[-200:]!r}"
    return (f"{row['program']:32s} {o['cold_s']:7.1f} {e['cold_s']:7.1f} {o['steady_ms']:9.2f} {e['steady_ms']:9.2f} "
            f"{o['steady_ms'] / e['steady_ms']:6.2f}x {o['graphs']:4d} {e['graphs']:4d} {'yes' if row['same'] else 'NO':>5s}")


def table(rows: list[dict]) -> str:
    hdr = (f"{'program':32s} {'cold s':>7s} {'(edit)':>7s} {'steady ms':>9s} {'(edit)':>9s} {'speed':>7s} "
           f"{'grph':>4s} {'(ed)':>4s} {'same':>5s}")
    lines = [hdr, "-" * len(hdr)] + [fmt(r) for r in rows]
    ok = [r for r in rows if "same" in r]
    if ok:
        sp = [r["original"]["steady_ms"] / r["edited"]["steady_ms"] for r in ok]
        cold = [r["original"]["cold_s"] / r["edited"]["cold_s"] for r in ok]
        gm = statistics.geometric_mean
        lines.append("-" * len(hdr))
        lines.append(f"{len(ok)} programs: steady-state speedup geometric mean {gm(sp):.2f}x (min {min(sp):.2f}x, max {max(sp):.2f}x); "
                     f"cold-start ratio {gm(cold):.2f}x; graphs {sum(r['original']['graphs'] for r in ok)} -> "
                     f"{sum(r['edited']['graphs'] for r in ok)}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
