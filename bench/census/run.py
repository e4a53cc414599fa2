"""The real-code census: gbfix over model code installed from PyPI (issue 14).

    python bench/census/setup.py                 # once: the pinned venvs under bench/census/.venvs/
    python bench/census/run.py                   # every program, package side (gbfix edits a copy of the package)
    python bench/census/run.py --user-side       # gbfix may edit only the program's own file
    python bench/census/run.py --only hf4/mixtral_eval --only misc/vq_train
    python bench/census/run.py --package transformers --unsafe --jobs 2
    python bench/census/run.py --table           # print the table of the stored results, run nothing

Per program (``ENV/NAME``; the programs are in programs/, one table module per package family):

1. ``before``: the program runs once with ``TORCH_LOGS=graph_breaks`` against the installed
   package; its break sites are the unique (file, line) pairs of Dynamo's "Graph break ... in
   user code at FILE:LINE" lines (duplicates Dynamo suppresses count once). Its stdout (the
   digest of every output) and its outputs (``CENSUS_DUMP``) are kept.
   A program with no break stops here ("no breaks": not part of the census totals).
2. The package folder (e.g. ``transformers``) is copied with hard links (``cp -al``) to
   ``.scratch/ENV/NAME/site/``, which goes first on ``PYTHONPATH``; gbfix writes a file by
   temp file + rename, so an edited file gets a new inode and the install is never changed
   (checked: the install's bytes are hashed before and after, ``install_unchanged``).
   programs/ is copied too, and the program's table file (the entry script) is a target in
   both modes: a process-wide Dynamo setting goes only into the entry, never into a module
   others import. With ``--user-side`` that file is the only target: the installed package
   must stay byte-identical.
3. ``gbfix --apply --no-cache --output-format json`` targets the whole copied package (so a
   break in a shared module, e.g. transformers/utils/output_capturing.py, is in its reach)
   and the entry script; its wall time is ``gbfix_s``.
4. ``after``: the edited copy runs once more with ``TORCH_LOGS=graph_breaks``: its sites are
   counted the same way, independently of gbfix's own report. ``output``: ``identical`` when the
   digest on stdout is byte-identical, ``close`` when only torch.testing.assert_close holds on
   the dumped outputs, ``CHANGED`` otherwise.
5. Every site left is keyed ``path::function::GBcode`` (path relative to site-packages, the
   function the line is in) and classified from classification.toml (``no safe rewrite
   exists`` or ``gbfix misses it`` with a reason; default ``gbfix misses it (unclassified)``),
   with gbfix's own status and detail for the same key from its JSON findings.

Results: one JSON per program under results/<mode>/ and results/<mode>.json (all programs).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PROGRAMS_DIR = HERE / "programs"
VENVS = HERE / ".venvs"
SCRATCH = HERE / ".scratch"
RESULTS = HERE / "results"
CLASSIFICATION = HERE / "classification.toml"
RUN_TIMEOUT = 300
GBFIX_TIMEOUT = 900

# environment -> table module -> its programs' package, by name prefix ("" = any)
TABLES: dict[str, dict[str, list[tuple[str, str]]]] = {
    "hf5": {"hf": [("", "transformers")], "diffusers_programs": [("", "diffusers")]},
    "hf4": {"hf": [("", "transformers")]},
    "misc": {
        "lucid": [("xt_", "x_transformers"), ("rotary", "rotary_embedding_torch"), ("", "vector_quantize_pytorch")],
        "kornia_pyg": [("kornia_", "kornia"), ("pyg_", "torch_geometric")],
    },
}
WRAPPER_CODES = {"GB7000", "GB0065", "GB0066"}


@dataclass(frozen=True)
class Prog:
    env: str
    table: str
    name: str
    package: str

    @property
    def id(self) -> str:
        return f"{self.env}/{self.name}"

    @property
    def python(self) -> Path:
        return VENVS / self.env / "bin" / "python"

    @property
    def site(self) -> Path:
        return VENVS / self.env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def package_of(env: str, table: str, name: str) -> str:
    for prefix, pkg in TABLES[env][table]:
        if name.startswith(prefix):
            return pkg
    raise KeyError(name)


def discover(envs: list[str], which: str = "--list") -> list[Prog]:
    progs = []
    for env in envs:
        py = VENVS / env / "bin" / "python"
        if not py.exists():
            sys.exit(f"no venv for {env}: run python bench/census/setup.py first")
        for table in TABLES[env]:
            out = subprocess.run([str(py), str(PROGRAMS_DIR / f"{table}.py"), which], capture_output=True, text=True,
                                 env=_env(env), check=True).stdout.split()
            progs += [Prog(env, table, n, package_of(env, table, n)) for n in out]
    return progs


def _env(env: str, pythonpath: str | None = None, **extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_LOGS", "CENSUS_", "PYTHONPATH"))}
    e.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", CENSUS_ENV=env, GBFIX_NO_CACHE="1")
    if pythonpath:
        e["PYTHONPATH"] = pythonpath
    e.update(extra)
    return e


# --- counting break sites (independent of gbfix) ---------------------------------------------
_SITE = re.compile(r"Graph break (?:\(user stack suppressed[^)]*\) )?in user code at (.+):(\d+)\s*$")
_GB = re.compile(r"/gb/gb(\d+)\.html")
_LOGPFX = re.compile(r"^[VIWE]\d{4} [\d:.]+ \d+ \S+\] \[[^\]]*\] \[__graph_breaks\] ?")


def parse_sites(stderr: str) -> list[dict]:
    """Unique (file, line) sites of TORCH_LOGS=graph_breaks output, with the GB codes seen there."""
    sites: dict[tuple[str, int], dict] = {}
    cur = None
    for raw in stderr.splitlines():
        m = _LOGPFX.match(raw)
        if not m:
            continue
        line = raw[m.end():]
        s = _SITE.search(line)
        if s:
            key = (s.group(1), int(s.group(2)))
            cur = sites.setdefault(key, {"file": key[0], "line": key[1], "codes": []})
            continue
        if cur is not None:
            for g in _GB.findall(line):
                code = f"GB{g}"
                if code not in cur["codes"]:
                    cur["codes"].append(code)
    out = []
    for s in sites.values():
        real = [c for c in s["codes"] if c not in WRAPPER_CODES]
        s["code"] = (real or s["codes"] or ["GB?"])[0]
        out.append(s)
    return out


_QN_CACHE: dict[tuple[str, float], list[tuple[int, int, str]]] = {}


def qualname(path: Path, line: int) -> str:
    try:
        st = path.stat()
    except OSError:
        return "?"
    key = (str(path), st.st_mtime)
    spans = _QN_CACHE.get(key)
    if spans is None:
        spans = []
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            tree = ast.Module(body=[], type_ignores=[])

        def walk(node, prefix):
            for ch in ast.iter_child_nodes(node):
                if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    qn = f"{prefix}{ch.name}"
                    spans.append((ch.lineno, ch.end_lineno or ch.lineno, qn))
                    walk(ch, qn + ".")
                else:
                    walk(ch, prefix)
        walk(tree, "")
        _QN_CACHE[key] = spans
    best = "<module>"
    best_len = 10**9
    for a, b, qn in spans:
        if a <= line <= b and b - a < best_len:
            best, best_len = qn, b - a
    return best


def relpath(file: str, roots: list[Path]) -> str:
    p = Path(file)
    for root in roots:
        try:
            return str(p.resolve().relative_to(root.resolve()))
        except ValueError:
            pass
    s = str(p)
    if "site-packages/" in s:
        return s.split("site-packages/", 1)[1]
    return s


def site_records(stderr: str, roots: list[Path]) -> list[dict]:
    recs = []
    for s in parse_sites(stderr):
        rel = relpath(s["file"], roots)
        qn = qualname(Path(s["file"]), s["line"])
        recs.append({"path": rel, "line": s["line"], "function": qn, "code": s["code"], "codes": s["codes"],
                     "key": f"{rel}::{qn}::{s['code']}", "src": source_line(Path(s["file"]), s["line"])})
    return sorted(recs, key=lambda r: (r["path"], r["line"]))


def count_run(prog: Prog, script: Path, pythonpath: str | None, dump: Path) -> dict:
    t0 = time.monotonic()
    try:
        p = subprocess.run([str(prog.python), str(script), prog.name], capture_output=True, text=True, cwd=REPO,
                           env=_env(prog.env, pythonpath, TORCH_LOGS="graph_breaks", CENSUS_DUMP=str(dump)),
                           timeout=RUN_TIMEOUT)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", (e.stdout or b"").decode(errors="replace"), (e.stderr or b"").decode(errors="replace")
    return {"rc": rc, "stdout": out, "stderr": err, "secs": round(time.monotonic() - t0, 1)}


# --- the install must never change ----------------------------------------------------------
def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            p = Path(dirpath, f)
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def compare_outputs(a: Path, b: Path) -> str:
    import torch

    try:
        x = torch.load(a, weights_only=False)
        y = torch.load(b, weights_only=False)
    except Exception as e:  # noqa: BLE001
        return f"n/a ({type(e).__name__})"
    if [p for p, _ in x] != [p for p, _ in y]:
        return "CHANGED"
    for (_, u), (_, v) in zip(x, y):
        if isinstance(u, torch.Tensor) and isinstance(v, torch.Tensor):
            try:
                torch.testing.assert_close(v, u, equal_nan=True)
            except AssertionError:
                return "CHANGED"
        elif u != v:
            return "CHANGED"
    return "close"


def load_classification() -> list[dict]:
    if not CLASSIFICATION.exists():
        return []
    return tomllib.loads(CLASSIFICATION.read_text()).get("site", [])


def classify(site: dict, entries: list[dict]) -> dict:
    """The first classification.toml entry matching the site's path, function, code (and source line)."""
    from fnmatch import fnmatchcase

    for e in entries:
        if (fnmatchcase(site["path"], e["path"]) and fnmatchcase(site["function"], e.get("function", "*"))
                and fnmatchcase(site["code"], e.get("code", "*")) and e.get("contains", "") in site.get("src", "")):
            return {"verdict": e["verdict"], "reason": e.get("reason", "")}
    return {"verdict": "gbfix misses it (unclassified)", "reason": ""}


def source_line(path: Path, line: int) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()[line - 1].strip()
    except (OSError, IndexError):
        return ""


def reclassify(r: dict, tag: str) -> None:
    """Classify the stored sites again with today's classification.toml (their source line from the
    edited file run.py kept, else from the install)."""
    entries = load_classification()
    site = VENVS / r["env"] / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    edited = EDITED / tag / r["program"].replace("/", "__")
    for s in r.get("before_sites") or []:
        s.setdefault("src", source_line(site / s["path"], s["line"]))
    for s in r.get("after_sites") or []:
        if "src" not in s:
            e = edited / s["path"]
            p = e if e.exists() else site / s["path"]
            if not p.exists():
                import sysconfig
                p = Path(sysconfig.get_paths()["purelib"]) / s["path"]
            s["src"] = source_line(p, s["line"])
        s.update(classify(s, entries))


EDITED = SCRATCH / "edited"
CACHE = HERE / ".cache"


def cached_before(prog: Prog, script: Path, dump: Path) -> dict:
    """The run of the original program: it depends only on the programs, the pinned environment and
    torch, not on gbfix, so it is reused (.cache/, keyed by their bytes) when nothing changed."""
    h = hashlib.sha256()
    for p in sorted(PROGRAMS_DIR.glob("*.py")) + [HERE / "requirements" / f"{prog.env}.txt"]:
        h.update(p.read_bytes())
    h.update(prog.id.encode())
    key = h.hexdigest()[:20]
    d = CACHE / "before" / f"{prog.env}__{prog.name}"
    meta = d / f"{key}.json"
    if meta.exists() and (d / f"{key}.pt").exists() or meta.exists() and json.loads(meta.read_text())["rc"] != 0:
        if (d / f"{key}.pt").exists():
            shutil.copyfile(d / f"{key}.pt", dump)
        return json.loads(meta.read_text())
    r = count_run(prog, script, None, dump)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    if dump.exists():
        shutil.copyfile(dump, d / f"{key}.pt")
    meta.write_text(json.dumps(r))
    return r


def save_edits(prog: Prog, mode: str, unsafe: bool, written: list[str], work: Path) -> None:
    """Keep what gbfix wrote: a patch under results/ (committed) and the edited files under
    .scratch/edited/ (payoff.py rebuilds the edited copies from them): package files by their
    path in site-packages, the program's files under programs/."""
    import difflib

    tag = mode + ("-unsafe" if unsafe else "")
    keep = EDITED / tag / f"{prog.env}__{prog.name}"
    shutil.rmtree(keep, ignore_errors=True)
    patch = []
    for w in written:
        p = (Path(w) if Path(w).is_absolute() else work / w).resolve()
        if p.is_relative_to((work / "site").resolve()):
            rel = p.relative_to((work / "site").resolve())
            orig = prog.site / rel
        else:
            rel = Path("programs") / p.relative_to((work / "programs").resolve())
            orig = HERE / rel
        (keep / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, keep / rel)
        before = orig.read_text().splitlines(True) if orig.exists() else []  # a file gbfix added
        patch += difflib.unified_diff(before, p.read_text().splitlines(True), f"a/{rel}", f"b/{rel}")
    pfile = RESULTS / tag / f"{prog.env}__{prog.name}.patch"
    if patch:
        pfile.parent.mkdir(parents=True, exist_ok=True)
        pfile.write_text("".join(patch))
    elif pfile.exists():
        pfile.unlink()


# --- one program ------------------------------------------------------------------------------
def run_program(prog: Prog, mode: str, unsafe: bool, log) -> dict:
    work = SCRATCH / mode / prog.env / prog.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    pkg_dir = prog.site / prog.package
    script = PROGRAMS_DIR / f"{prog.table}.py"
    res: dict = {"program": prog.id, "env": prog.env, "package": prog.package, "table": prog.table, "mode": mode,
                 "unsafe": unsafe}
    t_all = time.monotonic()
    res["started"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    res["gbfix_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                         cwd=REPO).stdout.strip()
    res["gbfix_src_dirty"] = bool(subprocess.run(["git", "status", "--porcelain", "--", "src"], capture_output=True,
                                                 text=True, cwd=REPO).stdout.strip())
    h0 = tree_hash(pkg_dir)

    before = cached_before(prog, script, work / "before.pt")
    if before["rc"] != 0:
        res.update(status="program fails", error=before["stderr"][-2000:])
        return res
    roots = [prog.site]
    res["before_sites"] = site_records(before["stderr"], roots + [REPO / "bench" / "census"])
    res["before"] = len(res["before_sites"])
    res["run_s"] = before["secs"]
    if not res["before_sites"]:
        res.update(status="no breaks")
        return res

    # the copies gbfix may edit: the program's entry script (a copy) in both modes, since a
    # process-wide Dynamo setting goes only there, never into a module others import; in package
    # mode also the package (a copy put first on PYTHONPATH)
    prog_copy = work / "programs"
    shutil.copytree(PROGRAMS_DIR, prog_copy, ignore=shutil.ignore_patterns("__pycache__"))
    entry_script = prog_copy / f"{prog.table}.py"
    targets = [entry_script]
    if mode == "package":
        site_copy = work / "site"
        site_copy.mkdir()
        subprocess.run(["cp", "-al", str(pkg_dir), str(site_copy / prog.package)], check=True)
        pythonpath = str(site_copy)
        targets.insert(0, site_copy / prog.package)
        roots_after = [site_copy, prog.site, work]
    else:
        pythonpath = None
        roots_after = [prog.site, work]
    cmd = [str(prog.python), "-m", "gbfix", "--apply", "--no-cache", "--output-format", "json", "-q",
           "--timeout", str(RUN_TIMEOUT), "--entry", f"python {entry_script} {prog.name}", *map(str, targets)]
    if unsafe:
        cmd.append("--unsafe-fixes")
    t0 = time.monotonic()
    try:
        # in the program's own scratch folder: gbfix holds a lock per program folder, and
        # programs run side by side (--jobs) must not share one
        # gbfix from this checkout (a worktree's, not the shared editable install's), after the copy
        gbfix_path = os.pathsep.join(p for p in (pythonpath, str(HERE.parent.parent / "src")) if p)
        g = subprocess.run(cmd, capture_output=True, text=True, cwd=work, env=_env(prog.env, gbfix_path),
                           timeout=GBFIX_TIMEOUT)
        grc, gout, gerr = g.returncode, g.stdout, g.stderr
    except subprocess.TimeoutExpired as e:
        grc, gout, gerr = "timeout", "", (e.stderr or b"").decode(errors="replace")
    res["gbfix_s"] = round(time.monotonic() - t0, 1)
    res["gbfix_rc"] = grc
    doc = None
    try:
        doc = json.loads(gout)
    except (json.JSONDecodeError, TypeError):
        res["gbfix_error"] = (gerr or "")[-3000:]
    findings = []
    if doc is not None:
        res["gbfix_summary"] = doc["summary"]["text"]
        res["gbfix_counts"] = doc.get("counts")
        res["edits"] = [{k: e[k] for k in ("path", "line", "code", "recipe", "status", "detail")} for e in doc.get("edits", [])]
        res["written"] = doc.get("written", [])
        for f in doc["findings"]:
            if not f.get("path"):
                findings.append(dict(f, key=None))
                continue
            orig = Path(f["path"]) if Path(f["path"]).is_absolute() else work / f["path"]
            rel = relpath(str(orig), [work / "site", work, prog.site])
            # gbfix reports in the original coordinates: read the function from the untouched install
            src = (prog.site / rel if (prog.site / rel).exists()
                   else HERE / rel if rel.startswith("programs/") else orig)
            qn = qualname(src, f["line"]) if f.get("line") else "?"
            findings.append({"path": rel, "line": f.get("line"), "code": f.get("code"), "status": f.get("status"),
                             "detail": f.get("detail"), "message": (f.get("message") or "")[:300],
                             "key": f"{rel}::{qn}::{f.get('code')}"})
    res["gbfix_findings"] = findings
    save_edits(prog, mode, unsafe, res.get("written") or [], work)

    if not res.get("written"):
        # nothing written: the copy is byte-identical to the install, so its run is the original's
        after = dict(before)
        shutil.copyfile(work / "before.pt", work / "after.pt") if (work / "before.pt").exists() else None
        res["after_reused"] = True
    else:
        after = count_run(prog, entry_script, pythonpath, work / "after.pt")
    if after["rc"] != 0:
        res["after_error"] = after["stderr"][-2000:]
        res["output"] = "CRASH"
        res["after_sites"] = []
        res["after"] = None
    else:
        res["after_sites"] = site_records(after["stderr"], roots_after + [REPO / "bench" / "census"])
        res["after"] = len(res["after_sites"])
        if after["stdout"] == before["stdout"]:
            res["output"] = "identical"
        else:
            res["output"] = compare_outputs(work / "before.pt", work / "after.pt")
            res["digest_diff"] = [line for line in after["stdout"].splitlines() if line not in before["stdout"].splitlines()][:5]
    cls = load_classification()
    by_key: dict[str, list[dict]] = {}
    for f in findings:
        if f.get("key"):
            by_key.setdefault(f["key"], []).append(f)
    for s in res["after_sites"]:
        s.update(classify(s, cls))
        g_f = by_key.get(s["key"], [])
        s["gbfix"] = [{"status": f["status"], "detail": f["detail"]} for f in g_f][:3]
    res["changed"] = bool(res.get("written"))
    res["install_unchanged"] = tree_hash(pkg_dir) == h0
    res["status"] = "ok"
    res["total_s"] = round(time.monotonic() - t_all, 1)
    return res


# --- the table ----------------------------------------------------------------------------------
def nosafe(r: dict) -> int:
    return sum(1 for s in r.get("after_sites") or [] if s.get("verdict", "").startswith("no safe"))


def table(results: list[dict]) -> str:
    """Per program and totals. `no-safe`: sites left that are classified `no safe rewrite exists`.
    The fix rate counts only sites where a behaviour-preserving rewrite exists (before - no-safe);
    `to zero` counts only programs where every site has one (no-safe = 0)."""
    rows = []
    hdr = (f"{'program':34s} {'before':>6s} {'after':>5s} {'no-safe':>7s} {'removed':>7s} {'zero':>4s} {'output':>9s} "
           f"{'gbfix s':>7s}  note")
    rows.append(hdr)
    rows.append("-" * len(hdr))
    tot = dict(progs=0, before=0, after=0, nosafe=0, zero=0, changed=0, secs=0.0, fx_progs=0, fx_zero=0,
               nobreak=0, failed=0, install_changed=0, edited=0)
    for r in sorted(results, key=lambda r: r["program"]):
        st = r.get("status")
        if st == "no breaks":
            tot["nobreak"] += 1
            continue
        if st != "ok":
            tot["failed"] += 1
            rows.append(f"{r['program']:34s} {'':>6s} {'':>5s} {'':>7s} {'':>7s} {'':>4s} {'':>9s} {'':>7s}  {st}")
            continue
        b, a = r["before"], r["after"]
        a_n = a if a is not None else b
        ns = nosafe(r)
        fixable_sites = b - ns
        pct = f"{100 * (b - a_n) / fixable_sites:.0f}%" if fixable_sites > 0 else "-"
        zero = a == 0
        out = r["output"] if r.get("changed") else "n/a"
        if out not in ("identical", "close", "n/a"):
            tot["changed"] += 1
        tot["edited"] += bool(r.get("changed"))
        if not r.get("install_unchanged", True):
            tot["install_changed"] += 1
        note = []
        if r.get("gbfix_rc") not in (0, 1):
            note.append(f"gbfix rc={r.get('gbfix_rc')}")
        if not r.get("install_unchanged", True):
            note.append("INSTALL CHANGED")
        rows.append(f"{r['program']:34s} {b:6d} {str(a):>5s} {ns:7d} {pct:>7s} {'yes' if zero else '':>4s} {out:>9s} "
                    f"{r.get('gbfix_s', 0):7.1f}  {'; '.join(note)}")
        tot["progs"] += 1
        tot["before"] += b
        tot["after"] += a_n
        tot["nosafe"] += ns
        tot["zero"] += zero
        tot["secs"] += r.get("gbfix_s", 0)
        if ns == 0:
            tot["fx_progs"] += 1
            tot["fx_zero"] += zero
    rows.append("-" * len(hdr))

    def pct(x, y):
        return f"{100 * x / y:.0f}%" if y else "-"
    fs = tot["before"] - tot["nosafe"]
    rows.append(f"programs with breaks: {tot['progs']} (plus {tot['nobreak']} without any break, {tot['failed']} failing); "
                f"gbfix changed {tot['edited']}")
    rows.append(f"break sites: {tot['before']} -> {tot['after']} ({pct(tot['before'] - tot['after'], tot['before'])} removed); "
                f"left and classified `no safe rewrite exists`: {tot['nosafe']}")
    rows.append(f"fix rate where a behaviour-preserving rewrite exists: {tot['before'] - tot['after']} / {fs} sites "
                f"({pct(tot['before'] - tot['after'], fs)})")
    rows.append(f"programs to zero: {tot['zero']}/{tot['progs']} ({pct(tot['zero'], tot['progs'])}); among the "
                f"{tot['fx_progs']} programs with no `no safe rewrite` site: {tot['fx_zero']}/{tot['fx_progs']} "
                f"({pct(tot['fx_zero'], tot['fx_progs'])})")
    rows.append(f"output changes: {tot['changed']}; install changed: {tot['install_changed']}; "
                f"gbfix wall time {tot['secs']:.0f} s in all")
    rows.append(recompile_line(results))
    return "\n".join(rows)


def recompile_line(results: list[dict]) -> str:
    """gbfix's own count of recompile sites (RC findings; TORCH_LOGS counts breaks only):
    found in the original, gone after the edits (at most the automatic-dynamic recompile
    left), and the recipe edits for them kept."""
    found = [f for r in results for f in r.get("gbfix_findings") or [] if str(f.get("code", "")).startswith("RC")]
    progs = sum(any(str(f.get("code", "")).startswith("RC") for f in r.get("gbfix_findings") or []) for r in results)
    gone = sum(f.get("status") == "fixed" for f in found)
    edits = [e for r in results for e in r.get("edits") or [] if str(e.get("code", "")).startswith("RC")]
    kept = sum(e.get("status") == "applied" for e in edits)
    return (f"recompile sites (gbfix's RC findings): {len(found)} in {progs} programs; {gone} gone after the edits; "
            f"recipe edits for them: {kept} kept of {len(edits)} tried")


def missed(results: list[dict]) -> str:
    """The sites left, grouped by classification key, most frequent first."""
    from collections import defaultdict

    groups: dict[tuple, list] = defaultdict(list)
    for r in results:
        for s in r.get("after_sites") or []:
            groups[(s["verdict"], s["path"], s["function"], s["code"])].append((r["program"], s))
    lines = [f"{'n':>3s}  {'verdict':32s} site"]
    for (verdict, path, fn, code), items in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        s = items[0][1]
        why = (s.get("gbfix") or [{}])[0].get("detail") or s.get("reason") or ""
        lines.append(f"{len(items):3d}  {verdict[:32]:32s} {path}::{fn} {code}  | {s.get('src', '')[:90]}")
        if why:
            lines.append(f"{'':37s} gbfix/why: {why[:160]}")
        lines.append(f"{'':37s} in: {', '.join(p for p, _ in items)[:160]}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=[], help="ENV/NAME or NAME (repeatable)")
    ap.add_argument("--package", action="append", default=[], help="only programs on this package (e.g. transformers)")
    ap.add_argument("--env", action="append", default=[], help="only this environment (hf5, hf4, misc)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--user-side", action="store_true", help="gbfix may edit only the program's own file")
    ap.add_argument("--unsafe", action="store_true", help="also the unsafe recipes (--unsafe-fixes)")
    ap.add_argument("--extra", action="store_true", help="also the breaking programs whose sites repeat another's")
    ap.add_argument("--all", action="store_true", help="every program, also those without a break in the survey")
    ap.add_argument("--resume", action="store_true", help="skip programs that already have a result in results/")
    ap.add_argument("--redo-before", default="", help="skip programs whose stored result started at or after this UTC time")
    ap.add_argument("--table", action="store_true", help="print the table of the stored results; run nothing")
    args = ap.parse_args()
    mode = "user" if args.user_side else "package"
    tag = mode + ("-unsafe" if args.unsafe else "")
    outdir = RESULTS / tag
    if args.table:
        results = [json.loads(p.read_text()) for p in sorted(outdir.glob("*.json"))]
        for r in results:
            reclassify(r, tag)
        print(table(results))
        print()
        print(missed(results))
        return
    envs = args.env or list(TABLES)
    progs = discover(envs, "--list-all" if args.all else "--list-extra" if args.extra else "--list")
    if args.only:
        progs = [p for p in progs if p.id in args.only or p.name in args.only]
    if args.package:
        progs = [p for p in progs if p.package in args.package]
    outdir.mkdir(parents=True, exist_ok=True)
    selected = {f"{p.env}__{p.name}.json" for p in progs}
    if args.resume:
        progs = [p for p in progs if not (outdir / f"{p.env}__{p.name}.json").exists()]
    if args.redo_before:  # rerun programs whose stored result started before this UTC time (2026-11-24T21:08:00Z)
        def done(p):
            f = outdir / f"{p.env}__{p.name}.json"
            return f.exists() and json.loads(f.read_text()).get("started", "") >= args.redo_before
        progs = [p for p in progs if not done(p)]
    print(f"{len(progs)} programs, mode {tag}, jobs {args.jobs}", file=sys.stderr, flush=True)
    t0 = time.monotonic()

    def one(p: Prog) -> dict:
        t = time.monotonic()
        try:
            r = run_program(p, mode, args.unsafe, None)
        except Exception as e:  # noqa: BLE001
            r = {"program": p.id, "env": p.env, "package": p.package, "status": f"harness error: {type(e).__name__}: {e}"}
        (outdir / f"{p.env}__{p.name}.json").write_text(json.dumps(r, indent=1, sort_keys=True))
        print(f"[{time.monotonic() - t0:6.0f}s] {p.id}: {r.get('status')} before={r.get('before')} after={r.get('after')} "
              f"output={r.get('output')} gbfix={r.get('gbfix_s')}s ({time.monotonic() - t:.0f}s)", file=sys.stderr, flush=True)
        shutil.rmtree(SCRATCH / mode / p.env / p.name, ignore_errors=True)
        return r

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        list(ex.map(one, progs))
    stored = {p.name: json.loads(p.read_text()) for p in sorted(outdir.glob("*.json"))}
    # every program's stored result: a partial run (--only) replaces its own programs' only
    (RESULTS / f"{tag}.json").write_text(json.dumps({"wall_s": round(time.monotonic() - t0), "results": list(stored.values())},
                                                    indent=1, sort_keys=True))
    print(table([r for name, r in stored.items() if name in selected]))
    print(f"wall time {time.monotonic() - t0:.0f} s for {len(progs)} programs")


if __name__ == "__main__":
    main()
