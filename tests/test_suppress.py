"""`# gbfix: ignore` comments and select / ignore: the rules, `gbfix lint`, and one real `gbfix` run.

The real run (module-scoped, one torch process chain) is a dry run of
tests/fixtures/suppressed with its [tool.gbfix] (entry, targets, ignore = GB0170): the print
carries `# gbfix: ignore[GB0059]`, so only the `.item()` is reported and fixed.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap

import pytest

from gbfix import suppress
from gbfix.suppress import Filter
from tests.conftest import FIXTURES, run_gbfix

pytestmark = pytest.mark.xdist_group("test_suppress")


def covers(source: str, line: int, code: str) -> bool:
    return suppress.of(textwrap.dedent(source)).covers(line, code)


# --- the comment -----------------------------------------------------------------------


def test_bare_and_listed_codes():
    src = """\
        print(a)  # gbfix: ignore
        print(b)  # gbfix: ignore[GB0059]
        print(c)  # gbfix: ignore[GB0124, GB0170]
        print(d)  # gbfix:ignore[gb0059,GB0124]
        print(e)  #gbfix: ignore[GB01]
        print(f)  # noqa: E501  # gbfix: ignore[GB0059]
        print(g)
        print(h)  # gbfix: ignore[]
        print(i)  # gbfix: ignored
    """
    assert covers(src, 1, "GB0059") and covers(src, 1, "Data-dependent expression")
    assert covers(src, 2, "GB0059") and not covers(src, 2, "GB0124")
    assert covers(src, 3, "GB0170") and covers(src, 3, "GB0124") and not covers(src, 3, "GB0059")
    assert covers(src, 4, "GB0059") and covers(src, 4, "GB0124")  # any case, no spaces
    assert covers(src, 5, "GB0124") and not covers(src, 5, "GB0059")  # a prefix, as in select
    assert covers(src, 6, "GB0059")  # after another tool's comment
    assert not covers(src, 7, "GB0059")  # a comment covers its own line only
    assert not covers(src, 8, "GB0059")  # an empty list suppresses nothing
    assert not covers(src, 9, "GB0059")


def test_first_line_of_the_statement():
    src = """\
        x = foo(  # gbfix: ignore[GB0124]
            a.item(),
            b.item(),  # gbfix: ignore[GB0059]
        )
        if (x.sum() > 0  # gbfix: ignore
                and y):
            print(x)
        z = f(
            1,
        )  # gbfix: ignore
        for t in ts:  # gbfix: ignore
            print(t)
    """
    assert covers(src, 2, "GB0124") and covers(src, 3, "GB0124")  # the statement's first line covers all of it
    assert covers(src, 3, "GB0059") and not covers(src, 2, "GB0059")  # a later line covers only itself
    assert covers(src, 5, "GB0170") and covers(src, 6, "GB0170")  # a compound statement's header
    assert not covers(src, 7, "GB0059")  # ... not its body: the innermost statement counts
    assert not covers(src, 8, "GB0059")  # a comment on the last line is not on the first
    assert not covers(src, 12, "GB0059")


def test_only_real_comments_count():
    src = '''\
        s = "# gbfix: ignore"
        t = """
        # gbfix: ignore
        """; print(t)
        print(s)
    '''
    assert not covers(src, 1, "GB0059")
    assert not covers(src, 3, "GB0059") and not covers(src, 4, "GB0059")


def test_untokenizable_text_falls_back_to_lines():
    src = "def f(:\n    print(x)  # gbfix: ignore\n    s = '''\n"
    assert suppress.of(src).covers(2, "GB0059")
    assert suppress.of("x = 1\n").comments == {}


# --- select / ignore -----------------------------------------------------------------


def test_filter_follows_select_and_ignore():
    assert Filter().selects("GB0059") and Filter().selects("Data-dependent expression")
    only = Filter(select=("GB01",), ignore=("GB0170",))
    assert only.selects("GB0124") and not only.selects("GB0170") and not only.selects("GB0059")
    assert not only.selects("Data-dependent expression")  # not a GB code: only ALL selects it
    assert not Filter(ignore=("ALL",)).selects("GB0059")
    text = "print(x)  # gbfix: ignore[GB0059]\n"
    assert Filter().suppressed("GB0059", text, 1) and not Filter().keeps("GB0059", text, 1)
    # an ignored code is left out, not counted as suppressed
    assert not Filter(ignore=("GB0059",)).suppressed("GB0059", text, 1)
    assert Filter().keeps("GB0059", None, 1)  # no file (outside the targets): nothing to read


def test_selectors_are_validated():
    assert suppress.parse_selectors(["gb0059", " GB01 ", "all", "GB"]) == ("GB0059", "GB01", "ALL", "GB")
    for bad in ("GB00591", "E501", "GBx", "", 59):
        with pytest.raises(ValueError, match="invalid code"):
            suppress.parse_selectors([bad])


# --- gbfix lint --------------------------------------------------------------------------

LINTED = """\
import torch


@torch.compile
def f(x):
    print("a")  # gbfix: ignore
    y = x.sum().item()  # gbfix: ignore[GB0124]
    if (x.sum() > 0 and  # gbfix: ignore[GB0170]
            y > 1):
        x = x + 1
    print("b")
    return x
"""


def test_lint_counts_suppressed_findings(tmp_path):
    (tmp_path / "m.py").write_text(LINTED)
    proc = run_gbfix("lint", "m.py", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == ["m.py:11:5: GB0059 likely: print() in compiled code"]
    assert proc.stderr.strip() == "1 likely graph break in 1 file (1 file checked, 1 compiled region). 3 suppressed."
    # ignored codes are not counted as suppressed; all left out -> exit 0
    proc = run_gbfix("lint", "m.py", "--ignore", "GB0059", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "")
    assert proc.stderr.strip() == "No likely graph breaks (1 file checked, 1 compiled region). 2 suppressed."


def test_lint_select_from_config_and_flags(tmp_path):
    (tmp_path / "m.py").write_text(re.sub(r"  # gbfix: ignore.*", "", LINTED))
    (tmp_path / "pyproject.toml").write_text('[tool.gbfix]\nselect = ["GB01"]\n')
    codes = lambda proc: [ln.split()[1] for ln in proc.stdout.splitlines()]  # noqa: E731
    assert codes(run_gbfix("lint", "m.py", cwd=tmp_path)) == ["GB0124", "GB0170"]
    assert codes(run_gbfix("lint", "m.py", "--select", "GB0059,GB0170", cwd=tmp_path)) == ["GB0059", "GB0170", "GB0059"]
    assert codes(run_gbfix("lint", "m.py", "--ignore", "GB0170", cwd=tmp_path)) == ["GB0124"]


# --- the runtime path: one real run ------------------------------------------------------


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    root = tmp_path_factory.mktemp("suppressed") / "proj"
    shutil.copytree(FIXTURES / "suppressed", root)
    before = (root / "pkg" / "blocks.py").read_bytes()
    proc = run_gbfix("--output-format", "json", cwd=root)  # entry and targets from [tool.gbfix]
    assert (root / "pkg" / "blocks.py").read_bytes() == before
    return proc


def test_a_suppressed_break_is_neither_reported_nor_fixed(dry):
    assert dry.returncode == 1, dry.stderr  # the .item() has an edit to make
    data = json.loads(dry.stdout)
    assert [(f["path"], f["line"], f["col"], f["code"], f["status"]) for f in data["findings"]] == [
        ("pkg/blocks.py", 13, 17, "GB0124", "fixed")
    ]
    changed = [ln for ln in data["diff"].splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    assert changed == ["-        scale = self.temperature.item()", "+        scale = self.temperature.detach().clone()"]
    assert [(e["code"], e["recipe"], e["status"]) for e in data["edits"]] == [("GB0124", "item-to-tensor", "applied")]


def test_the_summary_counts_suppressed_breaks_not_ignored_ones(dry):
    # the print is suppressed by its comment; the branch (GB0170) is not selected: not counted
    summary = "Found 1 graph break site: 1 fixable (verified; --apply writes them). 0 sites would still break after the edits. 1 suppressed."
    assert dry.stderr.splitlines()[-1] == summary
    data = json.loads(dry.stdout)
    assert data["summary"] == {"text": summary, "findings": 1, "suppressed": 1, "exit_code": 1}
    assert data["counts"]["suppressed"] == 1
