"""The docs generated from the recipes are up to date, and the docs' links resolve.

README.md's recipe table and rules/README.md come from ``python -m gbfix.catalog``;
after adding or changing a recipe, run it and commit what it writes.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gbfix import catalog, recipes, rules

ROOT = Path(__file__).resolve().parent.parent
_LINK = re.compile(r"(?<![!\\])\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)\)")  # not an image, not an escaped [
_FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]+`")
# Pages other changes are writing at the time of this test's writing: a link to one is
# skipped while git does not track it, and checked like any other once it does.
PENDING = {"docs/generated-code.md", "docs/versions.md", "docs/lint.md"}


def test_generated_docs_are_up_to_date():
    proc = subprocess.run(
        [sys.executable, "-m", "gbfix.catalog", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr + "run `python -m gbfix.catalog` and commit README.md and rules/README.md"


def test_recipe_table_follows_the_engines_order():
    # for each code, the table's order filtered to the code is what the engine tries
    order = [r.name for r in catalog.preference()]
    codes = {c for r in recipes.all_recipes() for c in r.codes}
    for code in codes:
        tried = [r.name for r in recipes.candidates(code, unsafe=True)]
        assert [n for n in order if n in tried] == tried, code


def test_each_restructured_page_has_a_section_per_recipe():
    """Pages in the per-recipe layout (a `### What it does` heading) have one `## <recipe>`
    section for each recipe whose `rule` is the page, with ruff's four headings."""
    names = {r.name for r in recipes.all_recipes()}
    for page in sorted((ROOT / "rules").glob("GB*.md")):
        text = page.read_text(encoding="utf-8")
        if "\n### What it does\n" not in text:
            continue  # the older layout: examples straight under the title
        sections = rules.recipe_sections(text)
        assert set(sections) <= names, f"{page.name}: sections naming no recipe: {set(sections) - names}"
        own = [r.name for r in recipes.all_recipes() if r.rule == page.stem]
        assert set(own) <= set(sections), f"{page.name}: no section for {set(own) - set(sections)}"
        heads = rules.headings(text)
        for name in sections:
            at = next(i for i, h in enumerate(heads) if h.level == 2 and h.text.strip("`") == name)
            sub = []
            for h in heads[at + 1 :]:
                if h.level <= 2:
                    break
                sub.append(h.text.split(":")[0])
            for want in ("What it does", "Why is this bad?", "Fix safety"):
                assert want in sub, f"{page.name} ## {name}: no ### {want}"


def _tracked() -> set[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return set(out.stdout.splitlines())


def _doc_links():
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "rules").glob("*.md"))]
    for page in pages:
        if not page.is_file():
            continue
        text = _CODE.sub("``", _FENCED.sub("", page.read_text(encoding="utf-8")))  # no links in code
        for target in _LINK.findall(text):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue  # a URL, or an anchor in the same page
            yield page, target


@pytest.mark.parametrize("page,target", list(_doc_links()), ids=lambda v: str(v).replace(str(ROOT) + "/", ""))
def test_relative_links_resolve(page: Path, target: str):
    """A relative link in the docs names a file or folder of the checkout (a link to a
    page in PENDING is checked once git tracks that page)."""
    target, _, anchor = target.partition("#")
    path = (page.parent / target).resolve()
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else None
    assert rel is not None, f"{page.name}: {target} points outside the repository"
    if rel in PENDING and rel not in _tracked():
        pytest.skip(f"{rel} is not in git yet")
    assert path.exists(), f"{page.name}: {target} does not exist"
    if anchor and path.parent.name == "rules" and path.name.startswith("GB"):
        text = path.read_text(encoding="utf-8")
        if "\n### What it does\n" in text:  # a page in the per-recipe layout: a recipe's anchor is its section
            slugs = {re.sub(r"[^\w\- ]", "", h.text.lower()).replace(" ", "-") for h in rules.headings(text)}
            assert anchor in slugs, f"{page.name}: {target}#{anchor}: no such section"
