"""Run gbfix --apply (in memory) over the recompile fixtures and print what it fixed.

    python bench/recompiles.py            # tests/fixtures/recompiles/ and tests/fixtures/rcfix/
    python bench/recompiles.py --only counter --only sampler

Each program is given to gbfix alone (`python <program>.py`), with `--zero-recompiles`.
Nothing is written to the fixtures: the engine computes the verified edits in memory;
each program it would change is then run twice more, original and edited copy, and their
stdout compared (an independent check of the engine's verdict).

Columns: `before` / `after` recompiles in the first run and in the run of the edited
program (every recompile Dynamo recorded, the attempt over the limit included), `limit`
frames over the recompile limit before -> after, `most` the most recompiles of one frame
after the edits, `recipes` the edits kept, `identical` the stdout check (n/a: no edit),
`proof` the --zero-recompiles verdict, `bar` the issue's bar: at most the automatic-dynamic
recompile per frame, no limit hit, identical output.
A program is fixable when a recipe answers one of its RC codes; the last line gives the
share of the fixable programs that meet the bar. Exit status 1 when an edit changes stdout.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from gbfix import engine, recipes, recompiles  # noqa: E402 - from this checkout's src, put on the path above
from gbfix.entry import parse as parse_entry  # noqa: E402

FOLDERS = (ROOT / "tests" / "fixtures" / "recompiles", ROOT / "tests" / "fixtures" / "rcfix")


def _stdout(folder: Path) -> str:
    return subprocess.run([sys.executable, "prog.py"], cwd=folder, capture_output=True, text=True, check=True).stdout


def measure(program: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp).resolve()
        (work / "prog.py").write_bytes(program.read_bytes())
        opts = engine.Options(zero_recompiles=True)
        result = engine.fix([work / "prog.py"], parse_entry("python prog.py", work), opts)
        before, after = result.baseline.recompiles, (result.final or result.baseline).recompiles
        identical = "n/a"
        if result.fixed:
            edited = work / "edited"
            edited.mkdir()
            (edited / "prog.py").write_bytes(result.fixed[work / "prog.py"])
            identical = "yes" if _stdout(work) == _stdout(edited) else "NO"
    per_frame = Counter((rc.file, rc.line, rc.function) for rc in after)  # two classes' `forward`s are two frames
    codes = {recompiles.cause(rc.guards[0]).code for rc in before if rc.guards}
    most = max(per_frame.values(), default=0)
    limit_before, limit_after = (len({(rc.file, rc.line) for rc in rcs if rc.limit}) for rcs in (before, after))
    return {
        "program": program.stem,
        "folder": program.parent.name,
        "codes": ", ".join(sorted(codes)),
        "before": len(before),
        "after": len(after),
        "limit": f"{limit_before} -> {limit_after}",
        "most": most,
        "recipes": ", ".join(sorted({o.edit.recipe for o in result.outcomes if o.status == "applied"})) or "-",
        "identical": identical,
        "proof": {True: "proven", False: "not proven", None: "-"}[result.recompiles_proven],
        "bar": most <= 1 and limit_after == 0 and identical != "NO",
        "fixable": any(recipes.candidates(c, unsafe=False) for c in codes),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], help="a program's name (repeatable)")
    args = ap.parse_args(argv)
    programs = [p for folder in FOLDERS for p in sorted(folder.glob("*.py")) if p.stem != "run_all"]
    programs = [p for p in programs if not args.only or p.stem in args.only]
    rows = [measure(p) for p in programs]
    print("| program | RC codes | recompiles before -> after | limit hits | most per frame after | recipes kept | identical stdout | --zero-recompiles | bar |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['folder']}/{r['program']} | {r['codes']} | {r['before']} -> {r['after']} | {r['limit']} | {r['most']} "
            f"| {r['recipes']} | {r['identical']} | {r['proof']} | {'yes' if r['bar'] else 'no'} |"
        )
    fixable = [r for r in rows if r["fixable"]]
    met = sum(r["bar"] for r in fixable)
    changed = sum(r["identical"] == "NO" for r in rows)
    total_before, total_after = sum(r["before"] for r in rows), sum(r["after"] for r in rows)
    print(
        f"\n{met}/{len(fixable)} fixable programs meet the bar; recompiles {total_before} -> {total_after}; "
        f"output changes {changed}"
    )
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
