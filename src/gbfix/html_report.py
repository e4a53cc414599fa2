"""``--html FILE``: one self-contained HTML page of a ``fix`` (or ``check``) run.

The page lists every break with its GB code, status, the registry's explanation (read
offline from the installed torch, as ``gbfix explain`` does), a source excerpt with the
line highlighted, each edit tried for it (recipe, diff hunk, verification verdict) or the
reason it stays with its escape hatch, and the graphs and breaks of the run before and
after the edits. Inline CSS, no script, no external asset, and a Content-Security-Policy
that forbids loading any. Everything that comes from the user's code or from Dynamo is
escaped. The engine's records are read by attribute only.
"""

from __future__ import annotations

import difflib
import html
import re
from collections.abc import Callable
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from gbfix.formats import GB_SITE
from gbfix.report import display_path

CONTEXT = 3  # source lines shown above and below a break
_GB = re.compile(r"GB\d{4}")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")

_STATUS = {  # finding status -> (label, css class)
    "fixed": ("fixed", "ok"),
    "fixable-unsafe": ("fixable with --unsafe-fixes", "warn"),
    "unfixed": ("not fixable", "bad"),
    "outside": ("outside the targets", "muted"),
    "new": ("new: not in the baseline", "bad"),
    "baseline": ("in the baseline", "muted"),
    "recompile": ("recompile left", "warn"),  # the detail says what was tried, or that an unsafe recipe would fix it
}
_EDIT = {  # outcome status -> (verdict, css class)
    "applied": ("verified: the break is gone and the program behaves the same", "ok"),
    "rejected:no-reduction": ("rejected: the break is still there", "bad"),
    "rejected:new-break": ("rejected: the edit breaks in a new way", "bad"),
    "rejected:output-mismatch": ("rejected: the program behaves differently", "bad"),
    "rejected:backend": ("rejected: fails or differs on the program's own backend", "bad"),
    "deferred:overlap": ("deferred: overlaps another edit", "muted"),
    "skipped:unsafe": ("skipped: unsafe (needs --unsafe-fixes)", "muted"),
}

CSS = """
:root { --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; --muted: #57606a; --line: #d0d7de; }
* { box-sizing: border-box; }
body { font: 14px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328; background: #f6f8fa; margin: 0; padding: 24px; }
main { max-width: 1100px; margin: 0 auto; }
h1 { font-size: 24px; margin: 0 0 8px; }
h2 { font-size: 18px; margin: 28px 0 8px; }
h3 { font-size: 13px; margin: 12px 0 4px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
code, pre { font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
pre { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 8px 0; margin: 4px 0; overflow-x: auto; }
pre > span { display: block; padding: 0 12px; white-space: pre; }
.summary { font-size: 15px; background: #fff; border: 1px solid var(--line); border-left: 4px solid var(--muted); border-radius: 6px; padding: 10px 14px; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 8px 0 16px; }
dl.meta dt { color: var(--muted); }
dl.meta dd { margin: 0; }
table { border-collapse: collapse; background: #fff; border: 1px solid var(--line); }
th, td { border: 1px solid var(--line); padding: 4px 12px; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
ol.toc { padding-left: 20px; }
section.finding { background: #fff; border: 1px solid var(--line); border-left: 6px solid var(--muted); border-radius: 6px; padding: 12px 16px; margin: 14px 0; }
section.finding.ok { border-left-color: var(--ok); }
section.finding.bad { border-left-color: var(--bad); }
section.finding.warn { border-left-color: var(--warn); }
.head { display: flex; flex-wrap: wrap; gap: 10px; align-items: baseline; }
.code { font-weight: 700; font-size: 16px; }
.badge { border-radius: 12px; padding: 1px 10px; font-size: 12px; font-weight: 600; color: #fff; background: var(--muted); }
.badge.ok { background: var(--ok); } .badge.bad { background: var(--bad); } .badge.warn { background: var(--warn); }
.verdict.ok { color: var(--ok); } .verdict.bad { color: var(--bad); } .verdict.warn { color: var(--warn); } .verdict.muted { color: var(--muted); }
.where { font-family: ui-monospace, monospace; color: var(--muted); }
.excerpt .ln { display: inline-block; width: 4em; color: var(--muted); text-align: right; padding-right: 12px; user-select: none; }
.excerpt .hit { background: #fff8c5; box-shadow: inset 3px 0 0 var(--warn); font-weight: 600; }
.diff .add { background: #dafbe1; } .diff .del { background: #ffebe9; } .diff .hunk { color: #0550ae; background: #ddf4ff; } .diff .file { color: var(--muted); }
.hatch { background: #fff8c5; border-radius: 6px; padding: 6px 10px; }
ul.edits { list-style: none; padding: 0; margin: 0; }
ul.edits > li { border-top: 1px dashed var(--line); padding: 6px 0; }
.registry p { margin: 2px 0; }
details > summary { cursor: pointer; color: #0969da; }
"""


def render(
    result: Any,
    *,
    command: str = "fix",
    applied: bool = False,
    summary: str = "",
    suppressed: int = 0,
    display: Callable[[Path], str] = display_path,
    explanation: Callable[[str], dict[str, Any] | None] | None = None,
) -> str:
    """The page for an engine ``Result`` (findings already filtered, see ``report.filtered``).

    ``command`` "check": findings have the statuses ``new`` / ``baseline`` and there are no
    edits and no run after. ``explanation``: code -> registry entry (default: the installed
    torch's registry, through ``gbfix.explain``).
    """
    lookup = explanation or registry_entry
    title = f"gbfix {command}: {len(result.findings)} graph break{'' if len(result.findings) == 1 else 's'}"
    recompiled = sum(1 for f in result.findings if f.code.startswith("RC"))
    if recompiled:  # recompile sites (gbfix.recompiles) are listed with the breaks
        n = len(result.findings) - recompiled
        title = f"gbfix {command}: {n} graph break{'' if n == 1 else 's'}, {recompiled} recompile site{'' if recompiled == 1 else 's'}"
    by_finding, unmatched = _edits_by_finding(result)
    hunks = _hunks(result, display)
    body = [f"<h1>{_e(title)}</h1>", _meta(result, command, applied, suppressed)]
    if summary:
        body.append(f'<p class="summary">{_e(summary)}</p>')
    body.append(_counts(result, command, applied))
    if result.findings:
        body.append("<h2>Graph breaks and recompiles</h2>" if recompiled else "<h2>Graph breaks</h2>")
        body.append(_toc(result.findings, display))
        for i, f in enumerate(result.findings, 1):
            body.append(_finding(i, f, by_finding.get(i - 1, []), result, command, applied, display, lookup, hunks))
    else:
        body.append("<p>No graph break to report.</p>")
    if unmatched:
        body.append("<h2>Other edits</h2><ul class=\"edits\">")
        body += [f"<li>{_edit(o, result, display, hunks)}</li>" for o in unmatched]
        body.append("</ul>")
    if result.notes:
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in result.notes) + "</ul>")
    if result.fixed:
        what = "written by --apply" if applied else "verified; --apply writes it"
        body.append(f"<h2>The whole diff ({_e(what)})</h2>")
        body.append(f"<details open><summary>{len(result.fixed)} file(s)</summary>{_diff_pre(result.diff(display))}</details>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{_e(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(body)
        + "\n</main>\n</body>\n</html>\n"
    )


def write(path: Path, page: str) -> None:
    """Write the page (UTF-8)."""
    from gbfix.errors import GbfixError

    try:
        Path(path).write_text(page, encoding="utf-8")
    except OSError as e:
        raise GbfixError(f"cannot write the HTML report {path}: {e.strerror or e}") from None


@cache
def registry_entry(code: str) -> dict[str, Any] | None:
    """The installed torch's registry entry of a GB code (``gbfix explain``'s current version):
    ``gb_type``, ``explanation`` (None when Dynamo writes it at run time), ``hints``. Offline."""
    if not _GB.fullmatch(code or ""):
        return None
    from gbfix import explain
    from gbfix.errors import GbfixError

    try:
        e = explain.explain(code)
    except GbfixError:
        return None
    if not e.registry:
        return None
    v = e.registry[0]
    return {"gb_type": v.gb_type, "explanation": v.explanation, "hints": list(v.hints), "title": e.title}


# --- parts ------------------------------------------------------------------------------


def _version() -> str:
    try:
        return metadata.version("gbfix")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _meta(result: Any, command: str, applied: bool, suppressed: int) -> str:
    base = result.baseline
    rows = [("entry", f"<code>{_e(result.entry.text)}</code>")]
    if command == "fix":
        rows.append(("mode", "--apply (verified edits written)" if applied else "--dry-run (nothing written)"))
    rows.append(("torch", _e(base.torch_version)))
    rows.append(("gbfix", _e(_version())))
    rows.append(("runs of the entry", f"{result.runs} in {result.seconds:.1f} s"))
    if suppressed:
        rows.append(("suppressed", f"{suppressed} (# gbfix: ignore)"))
    return '<dl class="meta">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _counts(result: Any, command: str, applied: bool) -> str:
    before = result.baseline
    after = getattr(result, "final", None) if command == "fix" else None
    shown = [f for f in result.findings if f.status != "outside" and not f.code.startswith("RC")]  # break sites

    def n(value: Any) -> str:
        return "n/a" if value is None else _e(value)

    rows = [
        ("graphs compiled", getattr(before, "graphs", None), getattr(after, "graphs", None) if after else None),
        ("graph breaks (Dynamo's reports)", len(before.breaks), len(after.breaks) if after else None),
        ("break sites in the targets", len(shown), sum(f.status != "fixed" for f in shown) if command == "fix" else None),
        ("calls of compiled code", before.compiled_calls, after.compiled_calls if after else None),
    ]
    if getattr(before, "recompiles", ()):  # Dynamo's recompiles (gbfix.recompiles), limit hits included
        rows.append(("recompiles", len(before.recompiles), len(after.recompiles) if after else None))
    if command != "fix":
        head = "<tr><th></th><th>this run</th></tr>"
        body = "".join(f"<tr><th>{_e(k)}</th><td class=\"n\">{n(b)}</td></tr>" for k, b, _ in rows[:2] + rows[3:])
        return f"<h2>Counts</h2><table>{head}{body}</table>"
    if not result.fixed:
        label = "after (no edit)"
    else:
        label = "after the edits" + (" (written)" if applied else " (verified, not written)")
    head = f"<tr><th></th><th>before</th><th>{_e(label)}</th></tr>"
    body = "".join(f"<tr><th>{_e(k)}</th><td class=\"n\">{n(b)}</td><td class=\"n\">{n(a)}</td></tr>" for k, b, a in rows)
    note = (
        "<p class=\"where\">before: the original program (eager backend, as detected); after: the last verifying "
        "run of the edited program (on its own backend when that was checked). Graphs: the graphs Dynamo handed "
        "to a backend, recompiles included.</p>"
    )
    return f"<h2>Counts</h2><table>{head}{body}</table>{note}"


def _where(f: Any, display: Callable[[Path], str]) -> str:
    if f.path is None:
        return ""
    return f"{display(f.path)}:{f.line}" + (f":{f.col}" if f.col else "")


def _toc(findings: Any, display: Callable[[Path], str]) -> str:
    items = []
    for i, f in enumerate(findings, 1):
        label, css = _STATUS.get(f.status, (f.status, "muted"))
        items.append(
            f'<li><a href="#break-{i}"><code>{_e(f.code)}</code> {_e(_where(f, display) or "(no site in the targets)")}</a> '
            f'<span class="verdict {css}">{_e(label)}</span></li>'
        )
    return '<ol class="toc">' + "".join(items) + "</ol>"


def _finding(
    i: int, f: Any, outcomes: list[Any], result: Any, command: str, applied: bool, display: Callable[[Path], str],
    lookup: Callable[[str], dict[str, Any] | None], hunks: dict[Path, list[tuple[int, int, str]]],
) -> str:
    label, css = _STATUS.get(f.status, (f.status, "muted"))
    parts = [
        f'<section class="finding {css}" id="break-{i}">',
        f'<div class="head"><span class="code">{_e(f.code)}</span><span class="badge {css}">{_e(label)}</span>'
        + (f'<span class="where">{_e(_where(f, display))}</span>' if f.path is not None else "")
        + "</div>",
        f"<p>{_e(f.message)}</p>",
    ]
    entry = lookup(f.code)
    if entry:
        link = f' (<a href="{_e(GB_SITE)}gb/{_e(f.code.lower())}.html">Dynamo\'s page</a>)' if _GB.fullmatch(f.code) else ""
        text = entry.get("explanation") or "(no fixed text: Dynamo writes it at run time; its message is above)"
        hints = "".join(f"<p>Hint: {_e(h)}</p>" for h in entry.get("hints", ()))
        parts.append(
            f'<h3>Registry</h3><div class="registry"><p><b>{_e(entry.get("gb_type", ""))}</b>{link}</p>'
            f"<p>{_e(text)}</p>{hints}</div>"
        )
    excerpt = _excerpt(result, f)
    if excerpt:
        parts.append(f"<h3>Source</h3>{excerpt}")
    parts.append(f"<h3>Verdict</h3>{_verdict(f, outcomes, command, applied)}")
    if outcomes:
        parts.append("<h3>Edits tried</h3><ul class=\"edits\">")
        parts += [f"<li>{_edit(o, result, display, hunks)}</li>" for o in outcomes]
        parts.append("</ul>")
    parts.append("</section>")
    return "\n".join(parts)


def _verdict(f: Any, outcomes: list[Any], command: str, applied: bool) -> str:
    if f.status == "fixed":
        recipes = [r for o in outcomes if o.status == "applied" for r in o.edit.recipes]
        by = f" by <code>{_e(', '.join(recipes))}</code>" if recipes else " by an edit that contains it"
        done = "written" if applied else "verified; --apply writes it"
        return f'<p class="verdict ok">Fixed{by} ({done}): re-run, the break is gone and the program behaves the same.</p>'
    label, css = _STATUS.get(f.status, (f.status, "muted"))
    reason, _, hatch = (f.detail or "").partition("; by hand: ")
    status, sep, why = reason.partition(": ")
    if sep and status in _EDIT:  # the verdict of the last edit tried for it
        reason = f"{_EDIT[status][0]} ({why})"
    if reason.lower().startswith(label.split(":")[0].lower()):  # the detail says it already ("new: ...")
        shown = reason
    else:
        shown = f"{label}: {reason}" if reason else label
    out = f'<p class="verdict {css}">{_e(shown[0].upper() + shown[1:])}</p>'
    if hatch:
        out += f'<p class="hatch"><b>Escape hatch</b> (by hand): {_e(hatch)}</p>'
    return out


def _edit(o: Any, result: Any, display: Callable[[Path], str], hunks: dict[Path, list[tuple[int, int, str]]]) -> str:
    e = o.edit
    verdict, css = _EDIT.get(o.status, (o.status, "muted"))
    head = (
        f'<div><code>{_e(" + ".join(e.recipes))}</code> ({_e(e.safety)}) at <span class="where">{_e(display(e.path))}:{e.start[0]}</span>: '
        f'<span class="verdict {css}">{_e(verdict)}</span>' + (f" &mdash; {_e(o.detail)}" if o.detail else "") + "</div>"
    )
    if e.message:
        head += f"<div>{_e(e.message)}</div>"
    text = ""
    if o.status == "applied":  # the real hunk of the written diff, when the edit's lines are in one
        first, last = e.start[0], max(e.end[0], e.start[0])
        text = "".join(h for lo, hi, h in hunks.get(e.path, []) if lo <= last and first <= hi)
        if text:
            text = f"--- a/{display(e.path)}\n+++ b/{display(e.path)}\n" + text
    if not text:
        text = _node_diff(e, display)
    return head + (_diff_pre(text) if text else "")


def _node_diff(edit: Any, display: Callable[[Path], str]) -> str:
    """The edit as a diff of the node it replaces (imports it adds listed after)."""
    if edit.original is None and edit.replacement is None:
        return ""
    try:
        import libcst as cst

        from gbfix.edits import code_of

        before = cst.Module(body=[]).code_for_node(edit.original) if isinstance(edit.original, cst.CSTNode) else ""
        after = code_of(edit)
    except Exception:  # noqa: BLE001 - a report never fails on an edit it cannot show
        return ""
    name = display(edit.path)
    lines = list(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{name}", f"b/{name}", n=2))
    lines = [ln if ln.endswith("\n") else ln + "\n" for ln in lines]
    if len(lines) > 2 and lines[2].startswith("@@"):  # the node's own lines: say where it is in the file
        lines[2] = f"@@ line {edit.start[0]} (the node the recipe replaces) @@\n"
    imports = [f"from {m} import {n}" if n else f"import {m}" for m, n in edit.imports]
    if imports:
        lines.append("".join(f"+{imp}   (import added at the top)\n" for imp in imports))
    return "".join(lines)


def _hunks(result: Any, display: Callable[[Path], str]) -> dict[Path, list[tuple[int, int, str]]]:
    """The hunks of each changed file's diff, by the original lines they cover."""
    out: dict[Path, list[tuple[int, int, str]]] = {}
    for path, new in getattr(result, "fixed", {}).items():
        src = result.originals.get(path)
        if src is None:
            continue
        try:
            before, after = src.data.decode(src.encoding), new.decode(src.encoding)
        except (UnicodeDecodeError, LookupError):
            continue
        current: list[str] = []
        span = (0, 0)
        for line in difflib.unified_diff(before.splitlines(True), after.splitlines(True), n=2):
            if line.startswith(("---", "+++")) and not current:
                continue
            m = _HUNK.match(line)
            if m:
                if current:
                    out.setdefault(path, []).append((*span, "".join(current)))
                start, count = int(m.group(1)), int(m.group(2) or 1)
                span = (start, start + max(count, 1) - 1)
                current = []
            current.append(line if line.endswith("\n") else line + "\n")
        if current:
            out.setdefault(path, []).append((*span, "".join(current)))
    return out


def _edits_by_finding(result: Any) -> tuple[dict[int, list[Any]], list[Any]]:
    """Each outcome under the finding of its site: the same recorded break, else the same
    file, line and code, else the only finding of that code in the file."""
    findings = list(result.findings)
    by_brk = {id(f.brk): i for i, f in enumerate(findings) if f.brk is not None}
    by_line = {(f.path, f.line, f.code): i for i, f in enumerate(findings)}
    by_code: dict[tuple, list[int]] = {}
    for n, f in enumerate(findings):
        by_code.setdefault((f.path, f.code), []).append(n)
    out: dict[int, list[Any]] = {}
    rest: list[Any] = []
    for o in result.outcomes:
        site = o.edit.site
        i = by_brk.get(id(site.brk))
        if i is None:
            i = by_line.get((site.path, site.line, site.code))
        if i is None and len(by_code.get((site.path, site.code), [])) == 1:
            i = by_code[(site.path, site.code)][0]
        if i is None:
            rest.append(o)
        else:
            out.setdefault(i, []).append(o)
    return out, rest


def _excerpt(result: Any, f: Any) -> str:
    src = result.originals.get(f.path) if f.path is not None else None
    if src is None:
        return ""
    lines = src.text.splitlines()
    if not 1 <= f.line <= len(lines):
        return ""
    lo, hi = max(1, f.line - CONTEXT), min(len(lines), f.line + CONTEXT)
    rows = []
    for n in range(lo, hi + 1):
        css = ' class="hit"' if n == f.line else ""
        rows.append(f'<span{css}><span class="ln">{n}</span>{_e(lines[n - 1])}</span>')
    return '<pre class="excerpt">' + "".join(rows) + "</pre>"


def _diff_pre(text: str) -> str:
    rows = []
    for line in text.splitlines():
        if line.startswith(("+++", "---")):
            css = "file"
        elif line.startswith("@@"):
            css = "hunk"
        elif line.startswith("+"):
            css = "add"
        elif line.startswith("-"):
            css = "del"
        else:
            css = ""
        rows.append(f'<span class="{css}">{_e(line)}</span>' if css else f"<span>{_e(line)}</span>")
    return '<pre class="diff">' + "".join(rows) + "</pre>"
