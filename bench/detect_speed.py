"""Detection speed: gbfix's detection run against `TORCH_LOGS=graph_breaks python prog.py`.

    python bench/detect_speed.py                      # examples/tinylm, 3 rounds
    python bench/detect_speed.py --rounds 5 --entry "python train.py" --cwd examples/tinylm

Each round runs, interleaved so machine noise hits all alike:
- `TORCH_LOGS=graph_breaks` with a cold inductor cache (a fresh TORCHINDUCTOR_CACHE_DIR:
  the first run after a model change),
- the same with the warm cache that run left,
- gbfix's detection alone (one child run with the eager backend forced, the hooks
  recording every break), as `gbfix --dry-run` starts.
It prints the median wall time of each, the ratios, and whether both found the same
break sites (file and line).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_LOG_SITE = re.compile(r"Graph break(?: \(user stack suppressed due to duplicate graph break\))? in user code at (.+):(\d+)")


def torch_logs_run(argv: list[str], cwd: Path, cache: Path) -> tuple[float, set[tuple[str, int]]]:
    env = {**os.environ, "TORCH_LOGS": "graph_breaks", "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - started
    sites = {(os.path.realpath(f), int(n)) for f, n in _LOG_SITE.findall(proc.stderr)}
    return seconds, sites


def gbfix_detection(entry: str, cwd: Path) -> tuple[float, set[tuple[str, int]]]:
    from gbfix.detect import Prober
    from gbfix.entry import parse

    with tempfile.TemporaryDirectory() as work:
        started = time.perf_counter()
        run = Prober(parse(entry, cwd), Path(work)).run()
        seconds = time.perf_counter() - started
    # TORCH_LOGS names the frame Dynamo was tracing: the innermost user frame of the stack.
    sites = {(os.path.realpath(b.leaf.file), b.leaf.line) for b in run.breaks if b.leaf is not None}
    return seconds, sites


@dataclass
class Speed:
    entry: str
    cwd: Path
    rounds: int
    cold: float  # median seconds, TORCH_LOGS=graph_breaks with a cold inductor cache
    warm: float  # the same, warm cache
    gbfix: float  # gbfix's detection run
    logged: set[tuple[str, int]]  # break sites TORCH_LOGS names
    found: set[tuple[str, int]]  # break sites gbfix found

    @property
    def same(self) -> bool:
        return self.logged <= self.found


def measure(entry: str = "python train.py", cwd: Path = REPO / "examples" / "tinylm", rounds: int = 3) -> Speed:
    """The interleaved rounds; progress on stderr."""
    argv = entry.split()
    argv[0] = sys.executable if argv[0] == "python" else argv[0]
    cold, warm, ours = [], [], []
    logged = found = set()
    for r in range(rounds):
        with tempfile.TemporaryDirectory(prefix="inductor-cache-") as cache:
            seconds, logged = torch_logs_run(argv, cwd, Path(cache))
            cold.append(seconds)
            warm.append(torch_logs_run(argv, cwd, Path(cache))[0])
        seconds, found = gbfix_detection(entry, cwd)
        ours.append(seconds)
        print(f"round {r + 1}: cold {cold[-1]:.1f}s  warm {warm[-1]:.1f}s  gbfix {ours[-1]:.1f}s", file=sys.stderr)
    c, w, g = (statistics.median(x) for x in (cold, warm, ours))
    return Speed(entry, cwd, rounds, c, w, g, logged, found)


def report(s: Speed) -> str:
    c, w, g = s.cold, s.warm, s.gbfix
    lines = [
        f"Detection on `{s.entry}` in {s.cwd.relative_to(REPO) if s.cwd.is_relative_to(REPO) else s.cwd}, median of {s.rounds}\n",
        "| run | median s | gbfix speed-up |",
        "|---|---|---|",
        f"| `TORCH_LOGS=graph_breaks`, cold inductor cache | {c:.1f} | {c / g:.1f}x |",
        f"| `TORCH_LOGS=graph_breaks`, warm inductor cache | {w:.1f} | {w / g:.1f}x |",
        f"| gbfix detection (eager backend, hooks) | {g:.1f} | 1.0x |",
        f"\nbreak sites: TORCH_LOGS {len(s.logged)}, gbfix {len(s.found)}; every logged site found by gbfix: {'yes' if s.same else 'no'}",
    ]
    if not s.same:
        for site in sorted(s.logged - s.found):
            lines.append(f"  missed: {site[0]}:{site[1]}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entry", default="python train.py")
    ap.add_argument("--cwd", type=Path, default=REPO / "examples" / "tinylm")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    speed = measure(args.entry, args.cwd, args.rounds)
    print(report(speed))
    return 0 if speed.same else 1


if __name__ == "__main__":
    sys.exit(main())
