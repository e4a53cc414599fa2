"""The engine's site ledger: keys in original coordinates, retries, declines, going back."""

from __future__ import annotations

from pathlib import Path

from gbfix.ledger import SiteLedger
from gbfix.linemap import LineMap
from gbfix.records import Break, Cause, Edit, Frame, Site

PATH = Path("/virtual/model.py")
ORIGINAL = "import torch\n\ndef f(x):\n    print(x)\n    return x.item()\n"


def site(line: int, col: int, code: str = "GB0124") -> Site:
    brk = Break(causes=(Cause(code, code, "a reason"),), stack=(Frame(str(PATH), line, col, col + 8, "f"),))
    return Site(PATH, line, col, col + 8, brk)


def edit(n: int, at: Site, recipe: str = "item-to-tensor") -> Edit:
    return Edit(n, at, recipe, "safe", "", (at.line, at.col), (at.line, at.col + 8), None, None)


def test_a_site_keeps_its_key_when_an_edit_above_moves_it():
    ledger = SiteLedger()
    first = ledger.note(site(5, 11))
    # an edit inserted two lines above: the break now reports at line 7
    ledger.to_original[PATH] = LineMap(ORIGINAL, ORIGINAL.replace("import torch\n", "import torch\nimport math\n\n"))
    assert ledger.note(site(7, 11)) == first
    assert len(ledger.seen) == 1
    assert ledger.seen[first].line == 5 and ledger.seen[first].col == 12  # 1-based in the report


def test_a_break_kept_on_a_rewritten_line_is_the_one_seen_before():
    ledger = SiteLedger()
    first = ledger.note(site(5, 11))
    ledger.to_original[PATH] = LineMap(ORIGINAL, ORIGINAL.replace("return x.item()", "return _keep(x).item()"))
    assert ledger.key(site(5, 17)) == first  # new column, same code on the same original line
    assert ledger.key(site(5, 17, code="GB0033")) != first


def test_a_failed_edit_is_retried_only_after_its_file_changes():
    ledger = SiteLedger()
    at = site(5, 11)
    ledger.note(at)
    gone, held = edit(1, at, "capture-scalar-outputs"), edit(2, at, "branch-to-where")
    ledger.proposed(gone)
    ledger.proposed(held)
    ledger.failed(gone, retry=None)  # never again
    ledger.failed(held, retry=7)  # its span held other breaks: again once version 7 is gone
    assert not ledger.may_try(at, "capture-scalar-outputs", 8)
    assert not ledger.may_try(at, "branch-to-where", 7)
    assert ledger.may_try(at, "branch-to-where", 8)
    assert ledger.may_try(at, "item-to-tensor", 7)


def test_no_edit_holds_for_one_version_of_the_file():
    ledger = SiteLedger()
    at = site(5, 11)
    key = ledger.note(at)
    ledger.no_edit(at, 3)
    assert not ledger.worth_proposing(key, 3)
    assert ledger.worth_proposing(key, 4)


def test_declines_are_said_per_recipe():
    ledger = SiteLedger()
    at = site(5, 11)
    key = ledger.note(at)
    assert ledger.no_recipe(key) == "no recipe applies"
    ledger.declined(at, "item-to-tensor", "the value feeds an `if`")
    assert ledger.no_recipe(key) == "no recipe applies (item-to-tensor: the value feeds an `if`)"


def test_restore_undoes_what_came_after_the_snapshot():
    ledger = SiteLedger()
    at = site(5, 11)
    key = ledger.note(at)
    e = edit(1, at)
    ledger.proposed(e)
    snap = ledger.snapshot()
    ledger.failed(e, retry=None)
    ledger.no_edit(at, 2)
    ledger.to_original[PATH] = LineMap(ORIGINAL, "# new\n" + ORIGINAL)
    ledger.restore(snap)
    assert ledger.may_try(at, "item-to-tensor", 2)
    assert ledger.worth_proposing(key, 2)
    assert PATH not in ledger.to_original
