"""site_verdict on hand-made trial breaks: when an edit counts as removing its break."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

from gbfix.linemap import Mapped
from gbfix.records import Break, Cause, Edit, Frame, Site
from gbfix.verify import TrialBreak, site_verdict

PATH = Path("/src/model.py")


def brk(code: str, line: int, col: int) -> Break:
    return Break((Cause(code, code, ""),), (Frame(str(PATH), line, col, col + 5, "forward"),))


def edit_at(line: int, start: tuple[int, int], end: tuple[int, int]) -> Edit:
    site = Site(PATH, line, 8, 13, brk("GB0124", line, 8))
    return Edit(1, site, "capture-scalar-outputs", "safe", "", start, end, None, None)


def trial(code: str, line: int, col: int, rewritten: bool = False) -> TrialBreak:
    return TrialBreak(code, PATH, Mapped(line, line, rewritten), col, brk(code, line, col))


# A config route: the edit is an assignment after the imports (line 3), the site is line 20.
CONFIG = edit_at(20, (3, 0), (3, 12))


def test_gone_is_accepted():
    assert site_verdict(CONFIG, [trial("GB0170", 40, 4)], 8, set()) is None


def test_still_there_is_no_reduction():
    assert site_verdict(CONFIG, [trial("GB0124", 20, 8)], 8, set())[0] == "rejected:no-reduction"


def test_a_new_code_on_the_sites_line_is_a_new_break():
    status, detail = site_verdict(CONFIG, [trial("GB4841", 20, 4)], 8, set())
    assert status == "rejected:new-break" and "its line now breaks with GB4841" in detail


def test_a_code_that_already_broke_on_the_line_is_no_new_break():
    assert site_verdict(CONFIG, [trial("GB0059", 20, 4)], 8, {"GB0059"}) is None


def test_a_break_elsewhere_is_not_the_edits_doing():
    assert site_verdict(CONFIG, [trial("GB4841", 21, 4)], 8, set()) is None


def test_a_new_code_inside_a_rewritten_span_is_a_new_break():
    inline = edit_at(20, (20, 4), (20, 30))
    assert site_verdict(inline, [trial("GB0033", 20, 4, rewritten=True)], 8, set())[0] == "rejected:new-break"


# An inline edit on line 20 that calls a helper it adds after the imports (lines 5-9).
HELPER = "def _gbfix_pick(xs):\n    return max(xs)\n"


def helper_edit() -> Edit:
    site = Site(PATH, 20, 8, 13, brk("GB0193", 20, 8))
    return Edit(1, site, "pick-by-key", "safe", "", (20, 4), (20, 30), None, None, (), (("_gbfix_pick", HELPER),))


def in_helper(code: str, caller_line: int) -> TrialBreak:
    caller = Mapped(caller_line, caller_line, caller_line == 20)
    return TrialBreak(code, PATH, Mapped(5, 9, True), 4, brk(code, 6, 4), "_gbfix_pick", (caller,))


def test_the_sites_break_moved_into_the_edits_helper_is_no_reduction():
    status, detail = site_verdict(helper_edit(), [in_helper("GB0193", 20)], 8, set())
    assert status == "rejected:no-reduction" and "inside _gbfix_pick" in detail


def test_a_new_code_inside_the_edits_helper_is_a_new_break():
    assert site_verdict(helper_edit(), [in_helper("GB0059", 20)], 8, set())[0] == "rejected:new-break"


def test_the_helper_reached_from_another_call_is_not_this_edits_doing():
    assert site_verdict(helper_edit(), [in_helper("GB0193", 40)], 8, set()) is None


# The user's side: breaks inside a library, all behind the user's line 20 (one call).
LIB = "/site/lib/dense.py"


def lib_brk(code: str, lib_line: int) -> Break:
    frames = (Frame(str(PATH), 20, 8, 13, "f"), Frame(LIB, lib_line, 4, 9, "to_dense"))
    return Break((Cause(code, code, ""),), frames)


def lib_trial(code: str, lib_line: int) -> TrialBreak:
    b = lib_brk(code, lib_line)
    return TrialBreak(code, PATH, Mapped(20, 20, False), 8, b, "f", (), (LIB, lib_line))


# A config route for the site behind library line 64; line 68 broke before too (GB0124).
USER_CONFIG = Edit(1, Site(PATH, 20, 8, 13, lib_brk("GB0124", 64)), "capture-scalar-outputs", "safe", "", (3, 0), (3, 12), None, None)


def test_another_library_line_that_broke_before_is_no_new_break():
    assert site_verdict(USER_CONFIG, [lib_trial("GB0170", 68)], 8, set(), frozenset({(LIB, 64), (LIB, 68)})) is None


def test_a_library_line_that_never_broke_is_a_new_break():
    status, detail = site_verdict(USER_CONFIG, [lib_trial("GB0170", 70)], 8, set(), frozenset({(LIB, 64), (LIB, 68)}))
    assert status == "rejected:new-break" and "its line now breaks with GB0170" in detail


def test_a_library_line_that_broke_before_behind_the_patched_copy_is_its_own_site():
    # library-patch's copy of step (rewritten lines 14-60 of the user's file) calls the
    # library's _get_variance, whose line 282 broke before: that is _get_variance's site
    edit = Edit(1, Site(PATH, 20, 8, 13, lib_brk("GB0170", 449)), "library-patch", "safe", "", (14, 0), (60, 0), None, None)
    other = TrialBreak("GB0170", PATH, Mapped(30, 30, True), 8, lib_brk("GB0170", 282), "step", (), (LIB, 282))
    assert site_verdict(edit, [other], 8, set(), frozenset({(LIB, 449), (LIB, 282)})) is None
    # a library line that never broke, behind the copy: the copy's doing
    status, _ = site_verdict(edit, [other], 8, set(), frozenset({(LIB, 449)}))
    assert status == "rejected:no-reduction"


def test_a_verbatim_copy_of_a_library_line_that_broke_before_is_its_own_site(tmp_path):
    # library-patch's copy of DDPM's step holds its `if t > 0:` line (library line 8), which
    # broke before: a break there is that site's, not the edit's (at library line 5)
    lib = tmp_path / "ddpm.py"
    lib.write_text("class S:\n    def step(self, t):\n        k = 1\n        # the site\n        a = self.table[t - 1] if t > 0 else self.one\n        b = 2\n        c = 3\n        if t > 0:\n            a = a + 1\n")
    own, other = (str(lib), 5), (str(lib), 8)
    edit = Edit(1, Site(PATH, 20, 8, 13, Break((Cause("GB0170", "GB0170", ""),), (Frame(str(PATH), 20, 8, 13, "f"), Frame(str(lib), 5, 8, 30, "step")))), "library-patch", "safe", "", (14, 0), (60, 0), None, None)
    copy = TrialBreak("GB0170", PATH, Mapped(30, 30, True), 8, brk("GB0170", 30, 8), "step", (), None, "if t > 0:")
    assert site_verdict(edit, [copy], 8, set(), frozenset({own, other})) is None
    # the edit's own line, still breaking in the copy (its text as in the library): no reduction
    same = TrialBreak("GB0170", PATH, Mapped(28, 28, True), 8, brk("GB0170", 28, 8), "step", (), None, "a = self.table[t - 1] if t > 0 else self.one")
    assert site_verdict(edit, [same], 8, set(), frozenset({own, other}))[0] == "rejected:no-reduction"
    # a line of the copy that never broke in the library: the edit's doing
    assert site_verdict(edit, [copy], 8, set(), frozenset({own}))[0] == "rejected:no-reduction"


def test_place_gives_each_break_the_edited_line_it_broke_on():
    from gbfix.linemap import LineMap
    from gbfix.records import RunResult
    from gbfix.verify import place

    edited = "a = 1\nif t > 0:\n    b = 2\n"
    lm = LineMap("a = 1\nb = 2\n", edited)
    result = SimpleNamespace(breaks=(brk("GB0170", 2, 0),))  # place reads only the breaks
    (tb,) = place(cast(RunResult, result), {PATH}, {PATH: lm})
    assert tb.text == "if t > 0:" and tb.at.rewritten
    assert lm.text(9) == ""
