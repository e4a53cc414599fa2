"""The blind probe: gbfix on twelve programs written without looking at its recipes.

    python bench/probe/run.py                  # every program, safe recipes
    python bench/probe/run.py --unsafe         # also the unsafe recipes
    python bench/probe/run.py --only augment --only vit
    python bench/probe/run.py --root bench/variants   # the variants of known patterns (bench/variants/README.md)

The programs (one folder each, `main.py` plus a helper module) were written on
2026-11-25 by a helper session told not to read gbfix's recipes, rules, fixtures or
benchmarks, in the shapes of code gbfix is measured on and has not seen: a nanoGPT-style
training step, Mixtral/DeepSeek/Switch MoE layers, DDPM/Euler samplers, Llama attention,
a ViT, a GRPO loss, an augmentation step, a metric tracker, a T5 generate loop. Each
seeds torch, compiles with the eager backend and prints a digest of its outputs.

Each program is copied to a temporary folder and gbfix runs there
(`--dry-run --output-format json`: gbfix verifies its edits, the copy is not written).
Per program: break sites (gbfix's findings with a GB code, one per file, line and
code), how many gbfix fixes with verified edits, gbfix's wall time; then every site left,
with gbfix's reason. A site counts once however many columns Dynamo reports on its line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def programs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if (p / "main.py").is_file())


def run(name: str, unsafe: bool, root: Path = HERE) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"gbfix-probe-{name}-") as tmp:
        work = Path(tmp) / name
        shutil.copytree(root / name, work, ignore=shutil.ignore_patterns("__pycache__"))
        cmd = [sys.executable, "-m", "gbfix", "--dry-run", "--no-cache", "--output-format", "json", "-q",
               "--entry", "python main.py", "."]
        if unsafe:
            cmd.append("--unsafe-fixes")
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=900, check=False)
        secs = time.monotonic() - t0
    if proc.returncode not in (0, 1):
        return {"program": name, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:], "secs": secs}
    doc = json.loads(proc.stdout)
    sites: dict[tuple, list[dict]] = {}
    for f in doc["findings"]:
        if f.get("path") and str(f.get("code", "")).startswith("GB") and f["status"] != "outside":
            sites.setdefault((f["path"], f["line"], f["code"]), []).append(f)
    fixed = [k for k, fs in sites.items() if all(f["status"] == "fixed" for f in fs)]
    left = [
        {"site": f"{p}:{line} {code}", "status": fs[0]["status"], "detail": fs[0].get("detail", "")}
        for (p, line, code), fs in sorted(sites.items()) if (p, line, code) not in fixed
    ]
    return {"program": name, "sites": len(sites), "fixed": len(fixed), "secs": round(secs, 1), "left": left}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--only", action="append", help="run this program (repeatable)")
    ap.add_argument("--unsafe", action="store_true", help="also the unsafe recipes (--unsafe-fixes)")
    ap.add_argument("--root", type=Path, default=HERE, help="the folder of programs (default: the blind probe's)")
    args = ap.parse_args(argv)
    known = programs(args.root)
    unknown = sorted(set(args.only or ()) - set(known))
    if unknown:
        ap.error(f"no program {', '.join(unknown)} in {args.root}")
    rows = [run(name, args.unsafe, args.root) for name in (args.only or known)]
    print(f"{'program':18} {'sites':>5} {'fixed':>5} {'gbfix s':>8}")
    for r in rows:
        if "error" in r:
            print(f"{r['program']:18} error: {r['error']}")
            continue
        print(f"{r['program']:18} {r['sites']:5} {r['fixed']:5} {r['secs']:8.1f}")
    ok = [r for r in rows if "error" not in r]
    total, fixed = sum(r["sites"] for r in ok), sum(r["fixed"] for r in ok)
    print(f"\nbreak sites fixed with verified edits: {fixed}/{total} ({'unsafe' if args.unsafe else 'safe'} recipes)")
    print("\nsites left:")
    for r in ok:
        for s in r["left"]:
            print(f"  {r['program']}/{s['site']} [{s['status']}] {s['detail'][:160]}")
    return 1 if len(ok) < len(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
