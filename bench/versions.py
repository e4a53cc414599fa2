"""gbfix on several torch releases: one venv per release, the README's example and a test subset.

    python bench/versions.py                              # 2.13.0 (CI's), 2.14.1, 2.15.0
    python bench/versions.py --versions 2.9.1 2.10.0 2.11.0 2.12.1
    python bench/versions.py --versions 2.15.0 --no-tests
    python bench/versions.py --json out.json              # also keep the results
    python bench/versions.py --from-json a.json b.json    # the table of earlier runs

For each release it
- makes `bench/.venvs/torch-X.Y.Z` (git-ignored) unless it already holds that torch, installs
  torch there (the CPU index first, https://download.pytorch.org/whl/cpu, then the default
  index, which on Linux x86_64 is a CUDA build of several GB that runs on the CPU just the
  same), numpy, and gbfix itself editable with its test extras (`pip install -e REPO[test]`:
  the venv's own install; the interpreter that runs this script is never touched);
- runs the README's example, `gbfix --dry-run --entry "python examples/tinylm/train.py"
  examples/tinylm` (with `--format json` to read the counts) and records the breaks found,
  how many have a verified fix, how many only an unsafe one, how many none, and the exit code;
- runs a subset of the tests (SUBSET: detection, the recipe tests that compile, the op
  helpers, the verifier, --apply end to end, fullgraph), a few minutes a release;
- prints a table: release, example result, tests passed/failed/skipped, wall time.

Installs go through the venv's pip with PIP_CONSTRAINT=/dev/null, so a machine-wide pip
constraint file that caps torch (as /etc/xdg/pip does on some machines) does not block a
newer release; nothing outside the venv is changed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENVS = REPO / "bench" / ".venvs"
# The supported range (docs/versions.md): its oldest release, also CI's, to the newest.
VERSIONS = ["2.13.0", "2.14.1", "2.15.0"]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
EXAMPLE = ["--dry-run", "--entry", "python examples/tinylm/train.py", "examples/tinylm"]
# What depends on the torch release: the child's hooks into Dynamo and the GB codes it reads
# (detect), recipes whose tests compile for real (numpy_scalar, guarded_index) beside the
# static recipe tests of the commonest codes (print/log/warn, item, branches), the ops the
# print/log/warn helpers define (order, FX graph cache), the run-time ops of report-if and
# raise-if (their real runs on eager and inductor: the exception, the warning's line), the
# verifier's verdicts, the dry-run/--apply path end to end, and fullgraph.
SUBSET = [
    "tests/test_detect.py",
    "tests/recipes/test_print_logging.py",
    "tests/recipes/test_scalar_explicit.py",
    "tests/recipes/test_branch.py",
    "tests/recipes/test_numpy_scalar.py",
    "tests/recipes/test_guarded_index.py",
    "tests/recipes/test_report_if.py",
    "tests/recipes/test_raise_if.py",
    "tests/test_op_helpers.py",
    "tests/test_verifier.py",
    "tests/test_cli_apply.py",
    "tests/test_fullgraph.py",
    "tests/test_compound.py",
    "tests/test_size_item_run.py",
    "tests/recipes/test_report_function.py",
    "tests/test_compile_failure.py",
]


@dataclass
class Result:
    version: str
    torch: str = ""  # the installed build, e.g. 2.15.0+cu132
    install_s: float = 0.0
    example: dict = field(default_factory=dict)
    tests: dict = field(default_factory=dict)
    wall_s: float = 0.0  # example + tests
    error: str = ""


def _env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["PIP_CONSTRAINT"] = os.devnull  # lift a machine-wide cap on torch, for this venv only
    env["GBFIX_NO_CACHE"] = "1"  # every release runs its program; no result from another run
    return env


def _run(argv: list[str], env: dict[str, str], timeout: float, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _installed(venv: Path, env: dict[str, str]) -> tuple[str, bool]:
    """(torch version in the venv or "", whether its gbfix is this checkout's source)."""
    py = venv / "bin" / "python"
    if not py.exists():
        return "", False
    probe = (
        "import importlib.metadata as m, importlib.util as u\n"
        "try: v = m.version('torch')\nexcept m.PackageNotFoundError: v = ''\n"
        "s = u.find_spec('gbfix')\nprint(v); print(s.origin if s else '')"
    )
    proc = _run([str(py), "-c", probe], env, 120)
    if proc.returncode != 0:
        return "", False
    version, origin = (proc.stdout.splitlines() + ["", ""])[:2]
    return version, origin.startswith(str(REPO / "src"))


def install(version: str, venv: Path, env: dict[str, str], reinstall: bool) -> str:
    """Make the venv hold torch==version and this checkout of gbfix; its torch build."""
    have, ours = _installed(venv, env)
    if reinstall or not have or have.split("+")[0] != version:
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        spec = f"torch=={version}"
        # The CPU wheel is a few hundred MB; where that index cannot be reached (or has no
        # such release) the default index's build is used.
        cpu = _run([*pip, "--retries", "0", "--timeout", "30", "--index-url", CPU_INDEX, spec], env, 3600)
        if cpu.returncode != 0:
            print(f"  torch {version}: CPU index failed ({_tail(cpu.stderr, 1)}); trying the default index", file=sys.stderr)
            proc = _run([*pip, spec], env, 3600)
            if proc.returncode != 0:
                raise RuntimeError(f"pip install {spec} failed:\n{_tail(proc.stderr)}")
        ours = False
    if not ours:
        proc = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "numpy", "-e", f"{REPO}[test]"], env, 1800)
        if proc.returncode != 0:
            raise RuntimeError(f"pip install -e {REPO}[test] failed:\n{_tail(proc.stderr)}")
    have, ours = _installed(venv, env)
    if have.split("+")[0] != version or not ours:
        raise RuntimeError(f"venv {venv} holds torch {have!r}, gbfix from this checkout: {ours}")
    # The build as torch names itself (2.15.0+cu132: PyPI's CUDA build; +cpu: a CPU wheel).
    proc = _run([str(venv / "bin" / "python"), "-c", "import torch; print(torch.__version__)"], env, 300)
    return proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else have


def run_example(venv: Path, env: dict[str, str], timeout: float) -> dict:
    started = time.perf_counter()
    try:
        proc = _run([str(venv / "bin" / "gbfix"), *EXAMPLE, "--format", "json"], env, timeout)
    except subprocess.TimeoutExpired:
        return {"exit": None, "error": f"timed out after {timeout:.0f} s", "seconds": time.perf_counter() - started}
    out: dict = {"exit": proc.returncode, "seconds": round(time.perf_counter() - started, 1)}
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        out["error"] = _tail(proc.stderr) or "no JSON on stdout"
        return out
    doc["findings"] = [f for f in doc.get("findings", []) if not f.get("code", "").startswith("RC")]  # breaks only
    statuses = [f.get("status") for f in doc["findings"]]
    out.update(
        breaks=len(doc["findings"]),
        verified=statuses.count("fixed"),
        unsafe=statuses.count("fixable-unsafe"),
        unfixed=statuses.count("unfixed"),
        codes=[f.get("code") for f in doc.get("findings", [])],
        # which recipe fixed each site: the same count can hide a coarser fix
        recipes=sorted(f"{e['path']}:{e['line']} {e['recipe']}" for e in doc.get("edits", []) if e.get("status") == "applied"),
        unfixed_sites=[
            f"{f['path']}:{f['line']} {f.get('code')}: {str(f.get('detail', ''))[:200]}"
            for f in doc.get("findings", [])
            if f.get("status") == "unfixed"
        ],
        summary=doc.get("summary", {}).get("text", ""),
    )
    return out


def run_tests(venv: Path, env: dict[str, str], tests: list[str], timeout: float) -> dict:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gbfix-versions-") as tmp:
        xml = Path(tmp) / "junit.xml"
        argv = [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *tests]
        try:
            proc = _run(argv, env, timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s", "seconds": round(time.perf_counter() - started, 1)}
        out: dict = {"exit": proc.returncode, "seconds": round(time.perf_counter() - started, 1)}
        if not xml.is_file():
            out["error"] = _tail(proc.stdout + proc.stderr)
            return out
        total = failed = errors = skipped = 0
        failures: list[str] = []
        for case in ET.parse(xml).getroot().iter("testcase"):
            total += 1
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            if case.find("failure") is not None:
                failed += 1
                failures.append(name)
            elif case.find("error") is not None:
                errors += 1
                failures.append(name + " (error)")
            elif case.find("skipped") is not None:
                skipped += 1
        out.update(passed=total - failed - errors - skipped, failed=failed + errors, skipped=skipped, failures=failures)
        if failures:
            out["output_tail"] = _tail(proc.stdout, 30)
    return out


def _example_cell(ex: dict) -> str:
    if not ex:
        return "not run"
    if "breaks" not in ex:
        return f"error (exit {ex.get('exit')})"
    cell = f"{ex['breaks']} breaks, {ex['verified']} verified"
    if ex["unsafe"]:
        cell += f", {ex['unsafe']} unsafe-only"
    if ex["unfixed"]:
        cell += f", {ex['unfixed']} not fixable"
    return cell + f" (exit {ex['exit']})"


def _tests_cell(t: dict) -> str:
    if not t:
        return "not run"
    if "passed" not in t:
        return "error: " + t.get("error", "").splitlines()[-1][:60] if t.get("error") else "error"
    return f"{t['passed']} / {t['failed']} / {t['skipped']}"


def table(results: list[Result]) -> str:
    rows = [
        "| torch | example (`gbfix --dry-run` on examples/tinylm) | tests passed / failed / skipped | wall time |",
        "|---|---|---|---|",
    ]
    for r in results:
        if r.error:
            rows.append(f"| {r.torch or r.version} | install failed | - | - |")
            continue
        rows.append(f"| {r.torch} | {_example_cell(r.example)} | {_tests_cell(r.tests)} | {r.wall_s:.0f} s |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", nargs="+", default=VERSIONS, help=f"torch releases (default: {' '.join(VERSIONS)})")
    ap.add_argument("--tests", nargs="+", default=SUBSET, help="test paths or node ids (default: SUBSET)")
    ap.add_argument("--no-tests", action="store_true", help="only the example")
    ap.add_argument("--no-example", action="store_true", help="only the tests")
    ap.add_argument("--reinstall", action="store_true", help="reinstall torch even where the venv holds it")
    ap.add_argument("--venvs", type=Path, default=VENVS, help="where the venvs live (default: bench/.venvs)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds for the example, and for the tests, per release")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--from-json", type=Path, nargs="+", metavar="FILE", help="run nothing: print the table of earlier --json files")
    args = ap.parse_args()

    if args.from_json:
        loaded = [Result(**r) for path in args.from_json for r in json.loads(path.read_text())]
        return report(loaded)
    results = []
    for version in args.versions:
        venv = args.venvs / f"torch-{version}"
        env = _env(venv)
        result = Result(version)
        results.append(result)
        print(f"torch {version}: {venv}", file=sys.stderr)
        started = time.perf_counter()
        try:
            result.torch = install(version, venv, env, args.reinstall)
        except (RuntimeError, subprocess.SubprocessError, OSError) as e:
            result.error = str(e)
            print(f"  {e}", file=sys.stderr)
            continue
        result.install_s = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        if not args.no_example:
            result.example = run_example(venv, env, args.timeout)
            print(f"  example: {_example_cell(result.example)}", file=sys.stderr)
        if not args.no_tests:
            result.tests = run_tests(venv, env, args.tests, args.timeout)
            print(f"  tests: {_tests_cell(result.tests)}", file=sys.stderr)
        result.wall_s = round(time.perf_counter() - started, 1)

    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return report(results)


def report(results: list[Result]) -> int:
    """Print the table and what failed; 0 when every release installed and passed."""
    print(table(results))
    # The same count can hide a coarser fix: each release's recipes against the last row's.
    last = next((r for r in reversed(results) if r.example.get("recipes") is not None), None)
    for r in results:
        if last is None or r is last or r.example.get("recipes") is None:
            continue
        theirs = dict(x.rsplit(" ", 1) for x in last.example["recipes"])
        for site, recipe in (x.rsplit(" ", 1) for x in r.example["recipes"]):
            if theirs.get(site, recipe) != recipe:
                print(f"{r.torch}: example, {site} fixed by {recipe} ({last.torch}: {theirs[site]})")
    for r in results:
        for line in r.example.get("unfixed_sites", []):
            print(f"{r.torch}: example, not fixable: {line}")
        if r.example.get("error"):
            print(f"{r.torch}: example error: {r.example['error']}")
        for name in r.tests.get("failures", []):
            print(f"{r.torch}: failed {name}")
        if r.tests.get("error"):
            print(f"{r.torch}: tests error: {r.tests['error']}")
        if r.error:
            print(f"{r.version}: {r.error}")
    ok = all(
        not r.error
        and r.example.get("exit") in (0, 1, None)  # 1: breaks found, as on the example
        and "error" not in r.example
        and not r.tests.get("failed")
        and "error" not in r.tests
        for r in results
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
