"""``gbfix explain GB0170``: what the installed torch says about a graph break code, and
what gbfix's catalog and recipes do about it. Offline, and without importing torch."""

from __future__ import annotations

import ast
import difflib
import importlib.metadata
import re
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path

import gbfix
from gbfix import gbcodes, rccodes, rules
from gbfix.errors import GbfixError

_CODE = re.compile(r"^(?:gb)?(\d{1,4})$", re.IGNORECASE)
_RC = re.compile(r"^rc(\d{1,3})$", re.IGNORECASE)  # gbfix's recompile codes (gbfix.rccodes)
_BULLET = re.compile(r"^- \*\*(.+?)\*\*: *(.*)$")
_WIDTH = 88


@dataclass
class Version:
    gb_type: str
    context: str
    explanation: str | None  # None: the registry holds no fixed text (Dynamo builds it at run time)
    hints: list[str]


@dataclass
class Example:
    title: str
    before: str
    after: str | None  # None: a "Not fixed" section
    diff: str = ""


@dataclass
class Explanation:
    code: str
    torch: str
    registry: list[Version]  # the current version, then what earlier (renamed, reworded) versions add
    recipes: list[dict[str, str]]  # name, safety, summary; in the order gbfix tries them
    catalog: str | None  # the page's path, None when there is none (or no catalog installed)
    catalog_installed: bool
    title: str = ""
    bullets: dict[str, str] = field(default_factory=dict)  # "Dynamo says" -> text
    examples: list[Example] = field(default_factory=list)


def normalize(code: str) -> str:
    if m := _RC.match(code.strip()):
        return f"RC{int(m.group(1)):03d}"
    m = _CODE.match(code.strip())
    if m is None:
        raise GbfixError(f"not a graph break code: {code!r} (expected e.g. GB0170, gb0170 or 170)")
    return f"GB{int(m.group(1)):04d}"


def catalog_dir() -> Path | None:
    """rules/: inside the package when installed from a wheel, at the repo root in a source checkout."""
    pkg = Path(gbfix.__file__).resolve().parent
    for d in (pkg / "rules", pkg.parents[1] / "rules"):
        if d.is_dir() and any(d.glob("GB*.md")):
            return d
    return None


def torch_version() -> str | None:
    """The installed torch's version, from its metadata or its version.py, without importing it."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        root = gbcodes.torch_dir()
        m = re.search(r"__version__ = '([^']+)'", (root / "version.py").read_text()) if root and (root / "version.py").is_file() else None
        return m.group(1) if m else None


def explain(code: str) -> Explanation:
    code = normalize(code)
    if code.startswith("RC"):
        return _explain_recompile(code)
    if gbcodes.torch_dir() is None:
        raise GbfixError("torch is not installed: gbfix explain reads the graph break registry of the installed torch")
    version = torch_version() or "unknown version"
    registry = gbcodes.registry()
    if not registry:
        raise GbfixError(f"the installed torch ({version}) has no graph break registry (torch/_dynamo/graph_break_registry.json)")
    folder = catalog_dir()
    page = folder / f"{code}.md" if folder else None
    if code not in registry and not (page and page.is_file()):
        raise GbfixError(f"unknown graph break code {code} (not in the installed torch's registry, torch {version})")
    from gbfix.recipes import candidates  # imports libcst (not torch): only here

    out = Explanation(
        code=code,
        torch=version,
        registry=_versions(registry.get(code, [])),
        recipes=[{"name": r.name, "safety": r.safety, "summary": r.summary} for r in candidates(code, unsafe=True)],
        catalog=None,
        catalog_installed=folder is not None,
    )
    if page is not None and page.is_file():
        out.catalog = f"rules/{page.name}"
        _read_page(page, out)
    return out


def _explain_recompile(code: str) -> Explanation:
    """An RC code: gbfix's own (no registry entry), from its page, with the recipes answering it."""
    if code not in rccodes.CODES:
        raise GbfixError(f"unknown recompile code {code} (gbfix knows {', '.join(rccodes.CODES)})")
    from gbfix.recipes import candidates  # imports libcst (not torch): only here

    folder = catalog_dir()
    recipes = [{"name": r.name, "safety": r.safety, "summary": r.summary} for r in candidates(code, unsafe=True)]
    out = Explanation(code=code, torch=torch_version() or "unknown version", registry=[], recipes=recipes, catalog=None,
                      catalog_installed=folder is not None, title=rccodes.CODES[code][0])
    page = folder / f"{code}.md" if folder else None
    if page is not None and page.is_file():
        out.catalog = f"rules/{page.name}"
        _read_page(page, out)
    return out


def _versions(raw: list[dict]) -> list[Version]:
    """The current version whole; of each earlier one only what it adds (a renamed type,
    another explanation, more hints): the registry repeats most of it."""
    out: list[Version] = []
    types: set[str] = set()
    texts: set[str | None] = {None}
    hints: set[str] = set()
    for v in raw:
        version = Version(v.get("Gb_type", ""), v.get("Context", ""), _text(v.get("Explanation", "")), _hints(v.get("Hints", [])))
        if out:
            if version.gb_type.startswith("_"):  # a placeholder left by Dynamo's own tooling
                continue
            version.context = "" if version.gb_type in types else version.context
            version.explanation = None if version.explanation in texts else version.explanation
            version.hints = [h for h in version.hints if h not in hints]
            if version.gb_type in types and version.explanation is None and not version.hints:
                continue
        types.add(version.gb_type)
        texts.add(version.explanation)
        hints.update(version.hints)
        out.append(version)
    return out


def _text(s: str) -> str | None:
    """The registry stores Dynamo's source expression: `"a " "b" + trace_info` is the text
    "a b"; a bare variable (`msg`, `str(e)`) means the text is only known at run time."""
    s = s.strip()
    try:
        node = ast.parse(s, mode="eval").body
    except SyntaxError:
        return s  # plain prose
    if isinstance(node, (ast.Name, ast.Call)):
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp):
        return "".join(_pieces(node)).strip() or None
    return s


def _pieces(node: ast.AST) -> list[str]:
    """The literal text of a `+` chain, left to right; f-string fields stay `{...}`."""
    if isinstance(node, ast.BinOp):
        return _pieces(node.left) + _pieces(node.right)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return ["".join(v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}" for v in node.values)]  # type: ignore[attr-defined,misc]
    return []


def _hints(raw: list[str]) -> list[str]:
    # a hint ending in a space continues in the next one (Dynamo splits long hints)
    out: list[str] = []
    pending = ""
    for h in [*raw, ""]:
        pending += h
        if pending and not h.endswith(" "):
            text = _text(pending)
            if text:
                out.append(text)
            pending = ""
    return out


def _read_page(page: Path, out: Explanation) -> None:
    text = page.read_text(encoding="utf-8")
    head = text.split("\n## ", 1)[0]
    key = None
    for line in head.splitlines():
        if line.startswith("# "):
            out.title = line[2:].split(":", 1)[-1].strip()
        elif m := _BULLET.match(line):
            key = m.group(1)
            out.bullets[key] = m.group(2)
        elif key and line.startswith(" ") and line.strip():  # a nested item or a wrapped line
            out.bullets[key] += "\n" + line.strip()
    try:
        examples = rules.parse(page)
    except ValueError:
        return  # a malformed page: its bullets are still worth showing
    for ex in examples:
        diff = ""
        if ex.after is not None:
            diff = "".join(
                difflib.unified_diff(ex.before.splitlines(True), ex.after.splitlines(True), "before", "after")
            )
        out.examples.append(Example(ex.title, ex.before, ex.after, diff))


def render(e: Explanation) -> str:
    lines: list[str] = []
    current = e.registry[0] if e.registry else None
    lines.append(f"{e.code}: {current.gb_type if current else e.title}")
    if e.code.startswith("RC"):
        lines += _para("", "A gbfix recompile code: why Dynamo compiled a frame again.", "  ")
    elif current is None:
        lines.append(f"  (not in the installed torch's registry, torch {e.torch})")
    for i, v in enumerate(e.registry):
        if i == 0:
            lines += _para("Explanation: ", v.explanation or "(no fixed text: Dynamo writes it at run time)", "  ")
        else:
            if i == 1:
                lines += ["", "Earlier versions of this entry in the registry add:"]
            if current is not None and v.gb_type != current.gb_type:
                lines += _para("Type: ", v.gb_type, "  ")
            if v.explanation:
                lines += _para("Explanation: ", v.explanation, "  ")
        if v.context:
            lines += _para("Context: ", v.context, "  ")
        for h in v.hints:
            lines += _para("Hint: ", h, "  ")
    lines.append("")
    if not e.catalog_installed:
        lines.append("gbfix catalog not installed (rules/ ships with the source tree); recipes below.")
    elif e.catalog is None:
        lines.append(f"No gbfix catalog page for {e.code}.")
    else:
        lines.append(f"gbfix catalog ({e.catalog}): {e.title}")
        for key, value in e.bullets.items():
            first, *nested = value.split("\n")
            lines += _para(f"{key}: ", first, "  ")
            for item in nested:
                lines += _para("", item, "    ")
    lines.append("")
    if e.recipes:
        lines.append("Recipes, in the order gbfix tries them (unsafe ones only with --unsafe-fixes):")
        lines += [f"  {r['name']} ({r['safety']}): {r['summary']}" for r in e.recipes]
    elif e.code.startswith("RC"):
        lines.append(f"No gbfix recipe answers {e.code}: gbfix reports it; the page says what to do by hand.")
    else:
        lines.append(f"No gbfix recipe answers {e.code}.")
    for ex in e.examples:
        lines.append("")
        if ex.after is None:
            lines.append(f"Not fixed: {ex.title}")
        else:
            lines.append(f"Example: {ex.title}")
            lines.append(ex.diff.rstrip("\n"))
    return "\n".join(lines)


def _para(label: str, text: str, indent: str) -> list[str]:
    return textwrap.wrap(label + text, _WIDTH, initial_indent=indent, subsequent_indent=indent + "  ", break_on_hyphens=False) or [indent + label]


def as_json(e: Explanation) -> dict:
    return asdict(e)
