"""The static parts of gbfix over thousands of real files: no crash, and byte-identical round trips.

    python bench/robustness.py                       # installed torch, and transformers if importable
    python bench/robustness.py --package transformers --python bench/census/.venvs/hf5/bin/python
    python bench/robustness.py --max-files 500 --sites 4
    python bench/robustness.py --recipes-every 10   # recipes on every 10th file, the rest on all

For every ``.py`` file of the packages:
- read it as gbfix reads a target (``sources.read``: encoding, then a parse); a file that
  does not decode or parse is counted, not a failure (gbfix reports it as a bad input);
- round trip: a file gbfix parses and does not edit must come back byte-identical,
  through LibCST (``module.bytes``) and through ``edits.apply`` with no edit;
- the locator and every recipe's matching code: up to ``--sites`` calls and ``if``
  tests per file become fake breaks (GB0059/GB0124/GB0033/GB0007 at a call, GB0170 at a
  test) that the locator maps to a node and each candidate recipe (safe and unsafe) is
  asked to propose a rewrite for. A ``Decline`` or no proposal is fine; any other
  exception is a crash;
- ``gbfix lint`` over each package folder as one project.
Prints a table: files, parsed, round-trip failures, sites, proposals, crashes, files/second.
Exit status 1 on any crash or round-trip failure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

import libcst as cst

from gbfix import edits, recipes
from gbfix.errors import GbfixError
from gbfix.lint import lint
from gbfix.locate import Locator
from gbfix.recipes.base import SiteContext
from gbfix.records import Break, Cause, Frame
from gbfix.sources import python_files, read

CALL_CODES = ("GB0059", "GB0124", "GB0033", "GB0007")
ALL = frozenset({
    "hop_print", "leaf_function", "nonstrict_trace", "custom_op", "custom_op_autograd", "cond", "check",
    "reorderable_logging", "register_fake", "config.capture_scalar_outputs",
    "config.capture_dynamic_output_shape_ops", "config.allow_rnn", "config.trace_autograd_ops",
})


def package_dir(name: str, python: str) -> Path | None:
    code = f"import importlib.util, os; s = importlib.util.find_spec({name!r}); print(os.path.dirname(s.origin) if s else '')"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip()
    return Path(out) if out else None


def sites_of(parsed, limit: int) -> list[tuple[cst.CSTNode, str]]:
    """Up to ``limit`` calls and ``limit`` if-tests of the file, with the codes to try at each."""
    calls, tests = [], []
    for node in _walk(parsed.module):
        if isinstance(node, cst.Call) and len(calls) < limit:
            calls.append(node)
        elif isinstance(node, cst.If) and len(tests) < limit:
            tests.append(node.test)
        if len(calls) >= limit and len(tests) >= limit:
            break
    return [(c, code) for c in calls for code in CALL_CODES] + [(t, "GB0170") for t in tests]


def _walk(node: cst.CSTNode):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def one_file(path: Path, limit: int, stats: dict, crashes: list) -> None:
    """Read, round-trip and (``limit`` > 0) try the locator and the recipes at ``limit`` sites."""
    try:
        source = read(path)
    except GbfixError:
        stats["not parsed"] += 1
        return
    stats["parsed"] += 1
    locator = Locator({source.path: source})
    parsed = locator.parsed(source.path)
    if parsed.module.bytes != source.data or edits.apply(parsed, []) != source.data:
        stats["round-trip failures"] += 1
        crashes.append(f"{path}: does not round-trip")
    for node, code in sites_of(parsed, limit):
        (line, col), (end_line, end_col) = parsed.span(node)
        if end_line != line:
            end_col = None
        text = parsed.lines[line - 1]
        byte_col = len(text[:col].encode())
        byte_end = None if end_col is None else len(text[:end_col].encode())
        brk = Break((Cause(code, code, ""),), (Frame(str(source.path), line, byte_col, byte_end, "f"),))
        stats["sites"] += 1
        try:
            site = locator.site(brk)
            ctx = SiteContext(site, locator.node(site), parsed, ALL)
        except Exception:  # noqa: BLE001 - the sweep's purpose: every crash is reported
            crashes.append(f"{path}:{line}: locator: {traceback.format_exc(limit=-3)}")
            continue
        for recipe in recipes.candidates(code, unsafe=True):
            try:
                if recipe().propose(ctx) is not None:
                    stats["proposals"] += 1
            except Exception:  # noqa: BLE001
                crashes.append(f"{path}:{line}: {recipe.name} at {code}: {traceback.format_exc(limit=-3)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package", action="append", help="package name (default: torch and transformers)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter whose packages to sweep")
    ap.add_argument("--max-files", type=int, default=None, help="the first N files of each package (sorted)")
    ap.add_argument("--sites", type=int, default=6, help="calls and if-tests tried per file")
    ap.add_argument("--recipes-every", type=int, default=1, help="try the locator and recipes on every Nth file only")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    rows, crashes = [], []
    for name in args.package or ["torch", "transformers"]:
        folder = package_dir(name, args.python)
        if folder is None:
            print(f"{name}: not installed for {args.python}; skipped")
            continue
        files = sorted(python_files(folder))[: args.max_files]
        stats = dict.fromkeys(["not parsed", "parsed", "round-trip failures", "sites", "proposals"], 0)
        before = len(crashes)
        started = time.perf_counter()
        for i, path in enumerate(files):
            one_file(path, args.sites if i % args.recipes_every == 0 else 0, stats, crashes)
            if i % 250 == 249:
                print(f"{name}: {i + 1}/{len(files)} files, {len(crashes) - before} crash(es)", file=sys.stderr, flush=True)
        seconds = time.perf_counter() - started
        lint_started = time.perf_counter()
        try:
            report = lint(files, cwd=folder)
            linted = f"{report.files} files, {len(report.findings)} findings"
        except Exception:  # noqa: BLE001
            crashes.append(f"{name}: lint: {traceback.format_exc(limit=-3)}")
            linted = "crashed"
        lint_seconds = time.perf_counter() - lint_started
        rows.append({"package": name, "files": len(files), **stats, "crashes": len(crashes) - before,
                     "seconds": round(seconds, 1), "files/s": round(len(files) / seconds, 1),
                     "lint": linted, "lint files/s": round(len(files) / lint_seconds, 1)})
    cols = ["package", "files", "parsed", "not parsed", "round-trip failures", "sites", "proposals", "crashes", "files/s", "lint", "lint files/s"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in cols) + " |")
    for crash in crashes[:20]:
        print(crash)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "crashes": crashes}, indent=1))
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
