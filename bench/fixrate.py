"""Run gbfix over the real-world suite and print what it fixed, case by case.

    python bench/fixrate.py                 # every case in tests/fixtures/realworld/
    python bench/fixrate.py --unsafe        # also try the unsafe recipes
    python bench/fixrate.py --only layerdrop --only rope_cache --details
    python bench/fixrate.py --jobs 2        # cases in parallel processes

gbfix is given the case folder, or the files a case.toml lists as `targets`
(a case whose library folder gbfix must not edit). Nothing is written to the
cases: gbfix's engine computes the verified edits in
memory. Each case whose files gbfix would change is then run twice more, the
original and the edited copy, each in a temporary copy of the case folder, and
their stdout is compared: an independent check of the engine's own verdict.

A break site is one finding of gbfix (file, line, column, GB code), counted
once however often it is reported (a site inside a loop is also reported as
GB7000). A rewrite that keeps a broken call (an `.item()` moved into a new
print) reports it again at a new column of the same line: such a site counts
as not removed, and once.
Columns: `before` sites in the first run (in the targets and outside them),
`seen` those plus the ones a fix revealed, `removed` seen sites that no longer
break, `after` the sites still breaking after the edits (`result.remaining`:
judged on the program's own backend when it is not eager; before issue 16 it
counted the final run's break reports, one per frame a site broke in),
`applied`/`rejected` edits, `expected` the sites the case's case.toml expects
removed, `identical` the independent stdout check (n/a: no edit), `unchanged`
for must-not-fix cases whether gbfix left every file alone.

Exit status 1 when a case fails to run, an edit changes stdout, or gbfix would
change a must-not-fix case.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "tests" / "fixtures" / "realworld"
ENTRY = "python run.py"
RUN_TIMEOUT = 600


@dataclass
class Row:
    name: str
    fixable: bool
    expect_fixed: int
    backend: str = "?"
    before: int = 0  # break sites in the first run: in the targets + outside
    seen: int = 0  # `before` + the sites a fix revealed
    removed: int = 0  # seen sites that no longer break
    after: int = 0  # sites still breaking (on the program's own backend when it is not eager)
    applied: int = 0
    rejected: int = 0
    changed: bool = False  # gbfix would change files
    identical: bool | None = None  # stdout of the edited program == the original's (None: no edit)
    seconds: float = 0.0
    error: str = ""
    findings: list[str] = field(default_factory=list)
    diff: str = ""
    rejections: list[str] = field(default_factory=list)


def _run_stdout(folder: Path) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "run.py"], cwd=folder, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    return proc.returncode, proc.stdout


def _same_behaviour(case: Path, fixed: dict[Path, bytes]) -> bool:
    """Run the original and the edited program, each in a fresh copy of the case, and compare stdout."""
    with tempfile.TemporaryDirectory(prefix="fixrate-") as tmp:
        before, after = Path(tmp) / "before" / case.name, Path(tmp) / "after" / case.name
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(case, before, ignore=ignore)
        shutil.copytree(case, after, ignore=ignore)
        for path, data in fixed.items():
            (after / path.relative_to(case)).write_bytes(data)
        rc_before, out_before = _run_stdout(before)
        rc_after, out_after = _run_stdout(after)
    return rc_before == rc_after == 0 and out_before == out_after


def _moved_key(finding) -> tuple:
    """A site without its column: a rewrite that keeps a broken call (an `.item()` moved
    into a new print) reports it again at a new column of the same line."""
    return (finding.path, finding.line, finding.code)


def run_case(case: Path, unsafe: bool) -> Row:
    from gbfix import engine
    from gbfix.entry import parse

    meta = tomllib.loads((case / "case.toml").read_text())
    expected = meta.get("expect_fixed_unsafe", meta["expect_fixed"]) if unsafe else meta["expect_fixed"]
    row = Row(case.name, bool(meta["fixable"]), int(expected))
    started = time.perf_counter()
    try:
        # `targets` in case.toml: the files gbfix may edit (default: the whole case folder)
        targets = [case / t for t in meta.get("targets", ())] or [case]
        result = engine.fix(targets, parse(ENTRY, case), engine.Options(unsafe_fixes=unsafe))
    except Exception as e:  # one case's failure is reported in its row, not fatal to the table
        row.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        row.seconds = time.perf_counter() - started
        return row
    sites = result.baseline.compile_sites
    row.backend = "eager" if sites and all(like_eager for *_, like_eager in sites) else "own"
    baseline = set(result.baseline.breaks)
    breaks = [f for f in result.findings if not f.code.startswith("RC")]  # breaks only: recompiles have their bench
    fixed = [f for f in breaks if f.status == "fixed"]
    left = {_moved_key(f) for f in breaks if f.status != "fixed"}
    moved = sum(_moved_key(f) in left for f in fixed)  # still breaking, at a new column
    row.before = sum(f.brk in baseline for f in breaks)
    row.seen, row.removed = len(breaks) - moved, len(fixed) - moved
    row.after = result.remaining
    row.applied = sum(o.status == "applied" for o in result.outcomes)
    row.rejected = sum(o.status.startswith("rejected") for o in result.outcomes)
    row.changed = bool(result.fixed)
    for f in result.findings:
        where = f"{f.path.relative_to(case)}:{f.line}" if f.path else "outside"
        row.findings.append(f"{where} {f.code} {f.status}" + (f" ({f.detail})" if f.detail and f.status != "fixed" else ""))
    for o in result.outcomes:
        if o.status != "applied":
            row.rejections.append(f"{o.edit.recipe} at {o.edit.site.path.name}:{o.edit.site.line}: {o.status} {o.detail}".strip())
    row.diff = result.diff(lambda p: str(p.relative_to(case)))
    if result.fixed:
        row.identical = _same_behaviour(case, result.fixed)
    row.seconds = time.perf_counter() - started
    return row


def _cases(only: list[str]) -> list[Path]:
    cases = sorted(p for p in SUITE.iterdir() if (p / "case.toml").is_file())
    if only:
        missing = set(only) - {p.name for p in cases}
        if missing:
            sys.exit(f"fixrate: no such case: {', '.join(sorted(missing))}")
        cases = [p for p in cases if p.name in only]
    return cases


def _table(rows: list[Row]) -> str:
    head = ["case", "backend", "fixable", "before", "seen", "removed", "after", "applied", "rejected", "expected", "identical", "unchanged", "s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        if r.error:
            lines.append(f"| {r.name} | error: {r.error} |" + " |" * (len(head) - 2))
            continue
        identical = "n/a" if r.identical is None else ("yes" if r.identical else "NO")
        unchanged = "" if r.fixable else ("yes" if not r.changed else "NO")
        cells = [
            r.name, r.backend, "yes" if r.fixable else "no", r.before, r.seen, r.removed, r.after, r.applied, r.rejected,
            r.expect_fixed, identical, unchanged, f"{r.seconds:.0f}",
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


@dataclass
class Totals:
    removed: int  # break sites removed in fixable cases
    sites: int  # break sites seen in fixable cases
    expected: int  # what the cases' notes expect removed
    changes: int  # edits that changed stdout
    left: int  # must-not-fix cases left unchanged
    guarded: int  # must-not-fix cases
    failed: int  # cases that failed to run


def totals(rows: list[Row]) -> Totals:
    ok = [r for r in rows if not r.error]
    fixable = [r for r in ok if r.fixable]
    guarded = [r for r in ok if not r.fixable]
    return Totals(
        removed=sum(r.removed for r in fixable),
        sites=sum(r.seen for r in fixable),
        expected=sum(r.expect_fixed for r in fixable),
        changes=sum(r.identical is False for r in ok),
        left=sum(not r.changed for r in guarded),
        guarded=len(guarded),
        failed=len(rows) - len(ok),
    )


def _totals(rows: list[Row]) -> str:
    t = totals(rows)
    pct = f"{100 * t.removed / t.sites:.0f}%" if t.sites else "n/a"
    out = [
        f"break sites removed in fixable cases: {t.removed}/{t.sites} ({pct}); the cases' notes expected {t.expected}",
        f"output changes: {t.changes}",
        f"must-not-fix cases left unchanged: {t.left}/{t.guarded}",
    ]
    if t.failed:
        out.append(f"cases that failed to run: {t.failed}")
    return "\n".join(out)


def run_cases(cases: list[Path], unsafe: bool, jobs: int = 1) -> list[Row]:
    """Every case through gbfix (in ``jobs`` processes); progress on stderr; rows sorted as the table shows them."""
    rows: list[Row] = []
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(run_case, case, unsafe) for case in cases]
        for future in futures:
            row = future.result()
            print(f"{row.name}: {row.removed}/{row.seen} removed, {row.seconds:.0f}s", file=sys.stderr, flush=True)
            rows.append(row)
    rows.sort(key=lambda r: (not r.fixable, r.name))
    return rows


def failed(rows: list[Row]) -> bool:
    """A case failed to run, an edit changed stdout, or gbfix would change a must-not-fix case."""
    return any(r.error or r.identical is False or (not r.fixable and r.changed) for r in rows)


def main() -> int:
    # Measure the gbfix of this checkout, in this process and in the children it starts.
    src = str(REPO / "src")
    sys.path.insert(0, src)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unsafe", action="store_true", help="also try the unsafe recipes (--unsafe-fixes)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="run only this case (repeatable)")
    ap.add_argument("--jobs", type=int, default=1, metavar="N", help="cases run in N parallel processes")
    ap.add_argument("--details", action="store_true", help="list every break site, rejected edit and diff")
    args = ap.parse_args()

    cases = _cases(args.only)
    started = time.perf_counter()
    rows = run_cases(cases, args.unsafe, args.jobs)

    mode = "safe and unsafe recipes" if args.unsafe else "safe recipes"
    print(f"gbfix over {len(rows)} real-world cases ({mode}), entry `{ENTRY}`\n")
    print(_table(rows))
    print()
    print(_totals(rows))
    if args.details:
        for r in rows:
            print(f"\n{r.name}:")
            for line in r.findings + r.rejections:
                print(f"  {line}")
            if r.diff:
                print("  " + r.diff.rstrip("\n").replace("\n", "\n  "))
    print(f"\nwall time: {time.perf_counter() - started:.0f}s")
    return 1 if failed(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
