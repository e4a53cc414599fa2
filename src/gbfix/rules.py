"""The rules/ catalog: one markdown page per GB code, with runnable before/after examples.

A page (see rules/README.md for the layout) has one ``## <recipe-name>`` section per
recipe, with ruff's headings (``### What it does``, ``### Why is this bad?``,
``### Example: <title>``, ``### Fix safety``), and a ``## Not fixed`` section of
``### Not fixed: <title>`` cases. An example section holds two python blocks (before,
after); a not-fixed one holds one, which gbfix must leave unchanged. The tests run them
all (tests/test_rules.py). Older pages put ``## Example: <title>`` sections straight
under the page title; those are read the same way, without a recipe.

A section's body ends at the next heading outside a code block, so a ``# comment`` line
inside a python block never ends it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_HEADING = re.compile(r"^(#{1,6}) +(.*?) *$")
_EXAMPLE = re.compile(r"^(Example|Not fixed): *(.+)$")
_RECIPE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")  # a recipe's name: kebab-case
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class RuleExample:
    code: str
    title: str
    before: str
    after: str | None  # None: gbfix must leave `before` unchanged
    recipe: str | None = None  # the recipe whose section holds the example (its edit must be the one applied)


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    line: int  # 0-based index into the page's lines


def headings(text: str) -> list[Heading]:
    """The page's markdown headings, skipping lines inside fenced code blocks."""
    out: list[Heading] = []
    fenced = False
    for i, line in enumerate(text.splitlines()):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced and (m := _HEADING.match(line)):
            out.append(Heading(len(m.group(1)), m.group(2), i))
    return out


def recipe_sections(text: str) -> list[str]:
    """The names of the page's ``## <recipe-name>`` sections, in order."""
    return [h.text.strip("`") for h in headings(text) if h.level == 2 and _RECIPE.match(h.text.strip("`"))]


def _blocks(lines: list[str]) -> list[str]:
    """The python code blocks among ``lines``."""
    out: list[str] = []
    block: list[str] | None = None
    other = False  # inside a block of another language
    for line in lines:
        m = _FENCE.match(line)
        if block is not None:
            if m and not m.group(1):
                out.append("".join(f"{ln}\n" for ln in block))
                block = None
            else:
                block.append(line)
        elif m:
            if other:
                other = False
            elif m.group(1) == "python":
                block = []
            else:
                other = True
    return out


def parse(path: Path) -> list[RuleExample]:
    text = path.read_text(encoding="utf-8")
    code = path.stem
    lines = text.splitlines()
    heads = headings(text)
    out = []
    recipe: str | None = None
    for i, head in enumerate(heads):
        if head.level <= 2 and not _EXAMPLE.match(head.text):
            name = head.text.strip("`")
            recipe = name if head.level == 2 and _RECIPE.match(name) else None
            continue
        m = _EXAMPLE.match(head.text)
        if not m:
            continue
        end = heads[i + 1].line if i + 1 < len(heads) else len(lines)
        blocks = _blocks(lines[head.line + 1 : end])
        kind, title = m.group(1), m.group(2).strip()
        expected = 2 if kind == "Example" else 1
        if len(blocks) != expected:
            raise ValueError(f"{path}: section {title!r} needs {expected} python block(s), has {len(blocks)}")
        owner = recipe if kind == "Example" and head.level == 3 else None
        out.append(RuleExample(code, title, blocks[0], blocks[1] if kind == "Example" else None, owner))
    return out
