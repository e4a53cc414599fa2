"""Machine-readable output: ``--output-format json | github | sarif`` (``text`` is each command's own).

A command turns what it found into a ``Document`` (a list of ``Diagnostic`` plus its
summary and command-specific fields) and ``render`` writes it in the chosen format. No
torch and no libcst here, so ``gbfix lint`` can use it; ``fix_document`` reads an engine
Result by attribute only.

Levels (GitHub annotation / SARIF level): a break left in place is an ``error``; one with
a verified fix not yet written (``--dry-run``), one fixable with ``--unsafe-fixes`` and
one outside the targets are ``warning``; one fixed by ``--apply`` is a ``note``
(``::notice``). ``gbfix lint`` findings are ``warning`` (likely breaks), unreadable or
unparsable files (E902 / E999) ``error``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gbfix import rccodes

FORMATS = ("text", "json", "github", "sarif")
JSON_FORMAT_VERSION = 1
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
GB_SITE = "https://meta-pytorch.github.io/compile-graph-break-site/"
SRCROOT = "%SRCROOT%"


@dataclass(frozen=True)
class Diagnostic:
    """One finding, as every format shows it."""

    path: str | None  # as displayed (relative to the current folder when under it); None: no file
    file: Path | None  # absolute, for SARIF and GitHub (made relative to the repository root)
    line: int  # 1-based
    col: int | None  # 1-based, in characters
    code: str
    message: str
    status: str  # fix: fixed | fixable-unsafe | unfixed | outside; lint: likely | error
    detail: str = ""
    level: str = "warning"  # error | warning | note
    hint: str = ""  # what to do, for annotations ("fixable: gbfix --apply writes a verified edit")
    extra: dict[str, Any] = field(default_factory=dict)  # command-specific JSON fields (lint: via)

    @property
    def fixable(self) -> bool:
        return self.status in ("fixed", "fixable-unsafe")

    def text(self) -> str:
        """The message with its hint and detail, for annotations and SARIF."""
        more = "; ".join(x for x in (self.hint, self.detail) if x)
        return f"{self.message} ({more})" if more else self.message


@dataclass(frozen=True)
class Document:
    command: str  # fix | lint | check
    diagnostics: list[Diagnostic]
    summary: str  # the summary line the command prints on stderr
    exit_code: int
    suppressed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # command-specific top-level JSON fields


def render(fmt: str, doc: Document, cwd: Path | None = None) -> str:
    """The document in ``json``, ``github`` or ``sarif`` (ends with a newline; empty if nothing to say)."""
    cwd = cwd or Path.cwd()
    if fmt == "json":
        return json.dumps(to_json(doc), indent=2) + "\n"
    if fmt == "github":
        return "".join(line + "\n" for line in to_github(doc, repo_root(cwd)))
    if fmt == "sarif":
        return json.dumps(to_sarif(doc, repo_root(cwd)), indent=2) + "\n"
    raise ValueError(f"no renderer for {fmt!r}")


# --- documents from the commands' results ---------------------------------------

_FIX_LEVEL = {"fixed": "warning", "fixable-unsafe": "warning", "unfixed": "error", "outside": "warning", "recompile": "warning"}


def fix_document(
    result: Any,
    *,
    applied: bool,
    summary: str,
    exit_code: int,
    suppressed: int,
    display: Callable[[Path], str],
    written: list[Path] | None = None,
    command: str = "fix",
) -> Document:
    """From an engine Result (findings already filtered, see ``report.filtered``)."""
    diagnostics = []
    for f in result.findings:
        fixed = f.status == "fixed"
        level = "note" if fixed and applied else _FIX_LEVEL.get(f.status, "warning")
        hint = ("fixed: gbfix wrote a verified edit" if applied else "fixable: gbfix --apply writes a verified edit") if fixed else ""
        path = display(f.path) if f.path is not None else None
        more = {}
        if getattr(f, "recompiles", ()):  # a recompile finding: its frame and guard, for tools
            more = {"recompile": rccodes.describe(f.code, f.recompiles)}
            if f.code == rccodes.LIMIT:  # the frame runs eagerly from then on
                level = "error"
        diagnostics.append(Diagnostic(path, f.path, f.line, f.col, f.code, f.message, f.status, f.detail, level, hint, more))
    where = {id(f.brk): f for f in result.findings if f.brk is not None}
    edits = []
    for o in result.outcomes:
        e = o.edit
        at = where.get(id(e.site.brk))  # the finding of the site the edit was proposed for (when first seen)
        edits.append({
            "path": display(e.path),
            "line": at.line if at else None,
            "col": at.col if at else None,
            "code": e.site.code,
            "recipe": " + ".join(e.recipes),
            "applicability": e.safety,
            "status": o.status,
            "detail": o.detail,
        })
    counts = Counter(f.status for f in result.findings)
    extra = {
        "mode": "apply" if applied else "dry-run",
        "entry": result.entry.text,
        "edits": edits,
        "diff": None if applied or not result.fixed else result.diff(display),
        "written": [display(p) for p in written or ()],
        "notes": list(result.notes),
        "counts": {
            "fixed": counts["fixed"], "fixable-unsafe": counts["fixable-unsafe"], "unfixed": counts["unfixed"],
            "outside": counts["outside"], "recompile": counts["recompile"], "suppressed": suppressed,
        },
        "remaining": result.remaining,
        "fullgraph": result.fullgraph,
        "zero_recompiles": result.recompiles_proven,
        "runs": result.runs,
    }
    return Document(command, diagnostics, summary, exit_code, suppressed, extra)


def lint_document(report: Any, *, summary: str, exit_code: int, suppressed: int, cwd: Path | None = None) -> Document:
    """From a ``gbfix.lint.Report``."""
    cwd = cwd or Path.cwd()
    diagnostics = []
    for f in report.findings:
        error = f.code.startswith("E")
        diagnostics.append(Diagnostic(
            f.path, (cwd / f.path).resolve(), f.line, f.col, f.code, f.message, "error" if error else "likely",
            f"via {f.via}" if f.via else "", "error" if error else "warning", "" if error else "likely graph break", {"via": f.via},
        ))
    extra = {"files": report.files, "regions": list(report.regions)}
    return Document("lint", diagnostics, summary, exit_code, suppressed, extra)


# --- json ---------------------------------------------------------------------------


def to_json(doc: Document) -> dict[str, Any]:
    """A stable document: ``format`` (this layout's version), the findings, the summary, and
    the command's own fields (fix: mode, edits, diff in --dry-run, written, notes...)."""
    findings = [
        {
            "path": d.path, "line": d.line, "col": d.col, "code": d.code, "status": d.status,
            "level": d.level, "fixable": d.fixable, "message": d.message, "detail": d.detail, **d.extra,
        }
        for d in doc.diagnostics
    ]
    summary = {"text": doc.summary, "findings": len(doc.diagnostics), "suppressed": doc.suppressed, "exit_code": doc.exit_code}
    return {
        "format": JSON_FORMAT_VERSION,
        "tool": {"name": "gbfix", "version": _version()},
        "command": doc.command,
        "findings": findings,
        "summary": summary,
        **doc.extra,
    }


# --- GitHub workflow commands ----------------------------------------------------------

_GITHUB_LEVEL = {"error": "error", "warning": "warning", "note": "notice"}


def to_github(doc: Document, root: Path) -> list[str]:
    """``::error file=pkg/m.py,line=12,col=9,title=GB0170::message`` lines (paths relative to ``root``)."""
    out = []
    for d in doc.diagnostics:
        props = []
        if d.file is not None:
            props.append(f"file={_prop(_relative(d.file, root) or str(d.file))}")
            props.append(f"line={d.line}")
            if d.col:
                props.append(f"col={d.col}")
        props.append(f"title={_prop(d.code)}")
        out.append(f"::{_GITHUB_LEVEL[d.level]} {','.join(props)}::{_data(d.text())}")
    return out


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


# --- SARIF 2.1.0 -----------------------------------------------------------------------


def to_sarif(doc: Document, root: Path) -> dict[str, Any]:
    """One run; a rule per code seen; locations relative to ``root`` under ``%SRCROOT%``."""
    rules: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    results = []
    for d in doc.diagnostics:
        if d.code not in index:
            index[d.code] = len(rules)
            rules.append(_rule(d))
        result: dict[str, Any] = {
            "ruleId": d.code,
            "ruleIndex": index[d.code],
            "level": d.level,
            "message": {"text": d.text()},
            "properties": {"status": d.status},
        }
        if d.file is not None:
            rel = _relative(d.file, root)
            artifact = {"uri": quote(rel), "uriBaseId": SRCROOT} if rel is not None else {"uri": d.file.as_uri()}
            region = {"startLine": max(d.line, 1)}
            if d.col:
                region["startColumn"] = d.col
            result["locations"] = [{"physicalLocation": {"artifactLocation": artifact, "region": region}}]
        results.append(result)
    driver = {"name": "gbfix", "version": _version(), "informationUri": _information_uri(), "rules": rules}
    run = {
        "tool": {"driver": driver},
        "originalUriBaseIds": {SRCROOT: {"uri": root.resolve().as_uri().rstrip("/") + "/"}},
        "columnKind": "unicodeCodePoints",  # gbfix's columns count characters
        "results": results,
    }
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def _rule(d: Diagnostic) -> dict[str, Any]:
    rule: dict[str, Any] = {"id": d.code}
    if d.code.startswith("GB") and d.code[2:].isdigit():
        from gbfix.gbcodes import entry  # reads torch's registry file; never imports torch

        known = entry(d.code)
        rule["shortDescription"] = {"text": known["Gb_type"] if known else d.message}  # the registry's Explanation is a template
        rule["helpUri"] = f"{GB_SITE}gb/{d.code.lower()}.html"
    elif d.code in rccodes.CODES:
        rule["shortDescription"] = {"text": rccodes.CODES[d.code][0]}
        rule["help"] = {"text": rccodes.CODES[d.code][1]}
    elif d.code == "E999":
        rule["shortDescription"] = {"text": "The file does not parse"}
    elif d.code == "E902":
        rule["shortDescription"] = {"text": "The file cannot be read"}
    else:  # a break Dynamo raised without a registry entry: named by its type
        rule["shortDescription"] = {"text": d.code}
    return rule


# --- paths and the tool's identity ---------------------------------------------------


def repo_root(cwd: Path) -> Path:
    """What annotation and SARIF paths are relative to: $GITHUB_WORKSPACE, else the git
    work tree around ``cwd``, else ``cwd``."""
    workspace = os.environ.get("GITHUB_WORKSPACE")
    if workspace:
        return Path(workspace).resolve()
    here = cwd.resolve()
    for directory in [here, *here.parents]:
        if (directory / ".git").exists():
            return directory
    return here


def _relative(file: Path, root: Path) -> str | None:
    try:
        return file.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None


def _version() -> str:
    try:
        return metadata.version("gbfix")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _information_uri() -> str:
    """The project's home page from its metadata; else the graph break site its rules link to."""
    try:
        meta = metadata.metadata("gbfix")
    except metadata.PackageNotFoundError:
        return GB_SITE
    for item in meta.get_all("Project-URL") or []:
        label, _, url = item.partition(",")
        if label.strip().lower() in ("homepage", "home", "repository", "source") and url.strip():
            return url.strip()
    return meta.get("Home-page") or GB_SITE  # type: ignore[attr-defined]  # an email Message: it has get(), the protocol lists none
