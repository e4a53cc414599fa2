"""Every rules/ example through the real pipeline: a real torch run per example.

An ``Example`` must come out of gbfix exactly as its after-block, verified, and by the
recipe whose section holds it (where the page has one section per recipe); a
``Not fixed`` example must come out unchanged. The README's recipe table is generated
(tests/test_docs_generated.py checks it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gbfix import engine, recipes
from gbfix.entry import parse as parse_entry
from gbfix.rules import parse
from gbfix.suppress import Filter

RULES = Path(__file__).resolve().parent.parent / "rules"
PAGES = sorted([*RULES.glob("GB*.md"), *RULES.glob("RC*.md")])  # break codes, recompile codes
EXAMPLES = [ex for page in PAGES for ex in parse(page)]


def test_catalog_covers_every_recipe():
    pages = {p.stem for p in PAGES}
    for recipe in recipes.all_recipes():
        assert recipe.rule in pages, f"{recipe.name}: no rules/{recipe.rule}.md"
        assert set(recipe.codes) <= pages, f"{recipe.name}: a code without a rules/ page"


def test_recipe_names_are_unique():
    names = [r.name for r in recipes.all_recipes()]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e.code}-{e.title}")
def test_rule_example(example, tmp_path: Path):
    script = tmp_path / "example.py"
    script.write_text(example.before, encoding="utf-8")
    # A break's page shows its break's fix; a recompile the example also has is another page's
    ignore = Filter(ignore=("RC",)) if example.code.startswith("GB") else Filter()
    result = engine.fix([script], parse_entry("python example.py", tmp_path), engine.Options(unsafe_fixes=True, selection=ignore))
    codes = {f.code for f in result.findings}
    assert example.code in codes, f"the before-block does not break with {example.code}: {codes}"
    fixed = result.fixed.get(script.resolve(), example.before.encode()).decode()
    if example.after is None:
        assert fixed == example.before
        assert all(f.status != "fixed" for f in result.findings if f.code == example.code)
    else:
        assert fixed == example.after
        assert any(f.status == "fixed" for f in result.findings if f.code == example.code)
        if example.recipe is not None:
            applied = {o.edit.recipe for o in result.outcomes if o.status == "applied"}
            assert example.recipe in applied, f"the example sits under {example.recipe}, the edits applied are {applied}"

