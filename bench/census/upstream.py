"""Fill gbfix's src/gbfix/data/upstream.json from the census: transformers 4.x breaks, measured at 5.x.

    python bench/census/upstream.py            # run what is missing, then write the data file
    python bench/census/upstream.py --check    # exit 1 if the data file is not what the results give

Each hf4 program of the package-side census (results/package/hf4__*.json: the programs that break
on transformers 4.44.2) is run unchanged in the hf5 environment (transformers 5.23.0), under
``TORCH_LOGS=graph_breaks`` as run.py counts sites; its sites go to results/upstream/NAME.json (kept,
so that the data file can be rebuilt and checked without the environments). A 4.44.2 site is then

- ``fixed`` at 5.23.0 when the same program at 5.23.0 ran and has no break with that code at all
  (a break that only moved, to another function or file, does not count as fixed: transformers
  5 moved the CTC loss, and its ``cudnn.flags`` break, into ``loss/loss_ctc.py``);
- ``breaks`` at 5.23.0 otherwise, when the program ran there.

A program that does not run at 5.23.0 (its API changed) gives no verdict for 5.23.0.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run as census_run  # noqa: E402

DATA = census_run.REPO / "src" / "gbfix" / "data" / "upstream.json"
MEASURED = census_run.RESULTS / "upstream"
OLD, NEW = "hf4", "hf5"
ABOUT = ("Break sites in installed packages, measured at several versions (bench/census/upstream.py "
         "fills this from the census); read by gbfix/upstream.py, which documents the format.")


def version(env: str, package: str = "transformers") -> str:
    for line in (HERE / "requirements" / f"{env}.txt").read_text().splitlines():
        if line.startswith(f"{package}=="):
            return line.split("==", 1)[1].strip()
    raise KeyError(f"{package} is not pinned in requirements/{env}.txt")


def old_programs() -> dict[str, dict]:
    out = {}
    for path in sorted((census_run.RESULTS / "package").glob(f"{OLD}__*.json")):
        r = json.loads(path.read_text())
        if r.get("package") == "transformers" and r.get("before_sites"):
            out[r["program"].split("/", 1)[1]] = r
    return out


def measure(name: str, table: str) -> dict:
    """The program's break sites in the new environment (cached in results/upstream/)."""
    out = MEASURED / f"{name}.json"
    if out.exists():
        return json.loads(out.read_text())
    prog = census_run.Prog(NEW, table, name, "transformers")
    with tempfile.TemporaryDirectory() as tmp:
        run = census_run.count_run(prog, census_run.PROGRAMS_DIR / f"{table}.py", None, Path(tmp) / "dump.pt")
    sites = census_run.site_records(run["stderr"], [prog.site]) if run["rc"] == 0 else []
    record = {"program": f"{NEW}/{name}", "transformers": version(NEW), "ran": run["rc"] == 0,
              "error": None if run["rc"] == 0 else run["stderr"].strip().splitlines()[-1:],
              "sites": [{k: s[k] for k in ("key", "path", "function", "code")} for s in sites]}
    MEASURED.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    return record


def build(olds: dict[str, dict], news: dict[str, dict]) -> dict:
    """The data file's document: one entry per 4.x site, its verdict at each version measured."""
    old_v, new_v = version(OLD), version(NEW)
    sites: dict[str, dict] = {}
    for name, r in sorted(olds.items()):
        new = news.get(name)
        for s in r["before_sites"]:
            entry = sites.setdefault(s["key"], {
                "package": "transformers", "path": s["path"], "function": s["function"], "code": s["code"],
                "measured": {old_v: "breaks"}, "programs": []})
            entry["programs"].append(name)
            if new is None or not new["ran"]:
                continue
            verdict = "breaks" if any(n["code"] == s["code"] for n in new["sites"]) else "fixed"
            # One program still breaking there is enough to say the release breaks there.
            if entry["measured"].get(new_v) != "breaks":
                entry["measured"][new_v] = verdict
    rows = []
    for entry in sites.values():
        programs = entry.pop("programs")
        entry["program"] = (f"bench/census {OLD}/{NEW}: " + ", ".join(sorted(set(programs)))
                            + " (tiny random configs, compiled with the eager backend)")
        rows.append(entry)
    rows.sort(key=lambda e: (e["path"], e["function"], e["code"]))
    return {"format": 1, "about": ABOUT, "sites": rows}


def render(doc: dict) -> str:
    return json.dumps(doc, indent=2) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare the data file with the kept results; run nothing")
    args = ap.parse_args()
    olds = old_programs()
    if args.check:
        news = {p.stem: json.loads(p.read_text()) for p in MEASURED.glob("*.json")}
        if DATA.read_text() != render(build(olds, news)):
            sys.exit(f"{DATA} differs from what results/ gives: run python bench/census/upstream.py")
        print(f"{DATA.name} matches results/ ({len(olds)} programs)")
        return
    news = {}
    for name, r in olds.items():
        news[name] = measure(name, r.get("table", "hf"))
        rec = news[name]
        print(f"{name:28s} {'ran' if rec['ran'] else 'failed'} at {version(NEW)}: {len(rec['sites'])} site(s)")
    doc = build(olds, news)
    DATA.write_text(render(doc))
    fixed = sum(1 for e in doc["sites"] if e["measured"].get(version(NEW)) == "fixed")
    print(f"{DATA}: {len(doc['sites'])} sites of transformers {version(OLD)}, {fixed} gone at {version(NEW)}")


if __name__ == "__main__":
    main()
