"""comprehension-loop: a comprehension Dynamo compiles as a frame of its own becomes a for statement."""

from __future__ import annotations

from pathlib import Path

import pytest

from gbfix.recipes.comprehension_loop import ComprehensionLoop
from gbfix.rules import parse
from tests.helpers import changed, rewrite_line

WRAPPER = """
def capture(forward):
    def wrapper(self, *args, **kwargs):
        flags = REGISTRY.get(self)
        {stmt}
        try:
            out = forward(self, *args, **kwargs)
        finally:
            self.recording = None
        return out, {result}

    return wrapper
"""


def _fix(stmt: str, result: str = "wanted", needle: str | None = None) -> str | None:
    return rewrite_line(WRAPPER.format(stmt=stmt, result=result), ComprehensionLoop, needle or stmt.split("\n")[0], "GB4347")


def _new_lines(stmt: str) -> list[str]:
    """The lines the rewrite of ``stmt`` writes."""
    return changed(WRAPPER.format(stmt=stmt, result="wanted"), _fix(stmt))


def test_dict_comprehension_with_a_computed_key_keeps_key_before_value():
    assert _new_lines('wanted = {f"output_{k}": kwargs.get(f"output_{k}", False) for k in flags}') == [
        "wanted = {}",
        "for k in flags:",
        'wanted.update({f"output_{k}": kwargs.get(f"output_{k}", False)})',
    ]


@pytest.mark.parametrize(
    "stmt, body",
    [
        ("wanted = {k: getattr(self, k) for k in flags}", "wanted[k] = getattr(self, k)"),
        ('wanted = {name.upper(): True for name in flags}', "wanted[name.upper()] = True"),
    ],
)
def test_dict_comprehension_with_a_name_or_literal_side_assigns_an_item(stmt, body):
    assert _new_lines(stmt)[-1] == body


def test_list_and_set_comprehensions_with_conditions_and_nested_loops():
    assert _new_lines("wanted = [k for k, v in flags.items() if v if k != 'x']") == ["wanted = []", "for k, v in flags.items():", "if v:", "if k != 'x':", "wanted.append(k)"]
    assert _new_lines("wanted = {(k, i) for k in flags for i in range(flags[k])}") == ["wanted = set()", "for k in flags:", "for i in range(flags[k]):", "wanted.add((k, i))"]


def test_site_on_the_first_line_of_a_multiline_comprehension():
    stmt = 'wanted = {\n            f"output_{k}": kwargs.get(f"output_{k}", False)\n            for k in flags\n        }'
    out = _fix(stmt, needle="wanted = {")
    assert out is not None and "for k in flags:\n" in out and "wanted = {}\n" in out


def test_the_other_comprehensions_own_names_do_not_clash():
    # `k` in a later comprehension is that comprehension's own name
    stmt = "wanted = {k: True for k in flags}\n        later = [k for k in wanted]"
    assert _fix(stmt, needle="wanted = {k") is not None


@pytest.mark.parametrize(
    "stmt, result",
    [
        ("k = 0\n        wanted = {k: 1 for k in flags}", "wanted"),  # the loop would rebind the function's k
        ("wanted = {k: 1 for k in flags}", "(wanted, k)"),  # k is a global read after the comprehension
        ("wanted = {k: wanted for k in flags}", "wanted"),  # reads the old value of the name it assigns
        ("wanted = {k: 1 for k in flags}\n        show = lambda: wanted", "wanted"),  # a closure could see a partial result
        ("wanted = {k: 1 for k in flags}", "locals()"),  # the loop's name would show in locals()
        ("self.wanted = {k: 1 for k in flags}", "self.wanted"),  # not a plain name
        ("wanted = sorted(k for k in flags)", "wanted"),  # a generator: another break, another fix
    ],
)
def test_declines_what_a_loop_would_change(stmt, result):
    assert _fix(stmt, result=result, needle=stmt.split("\n")[-1] if "\n" in stmt else None) is None


def test_declines_inside_try_with_or_a_class_body():
    in_try = """
    def f(flags):
        try:
            wanted = {k: int(v) for k, v in flags.items()}
        except ValueError:
            pass
        return wanted
    """
    assert rewrite_line(in_try, ComprehensionLoop, "wanted = {", "GB4347") is None
    in_class = """
    class Config:
        flags = {"a": 1}
        wanted = {k: 1 for k in flags}
    """
    assert rewrite_line(in_class, ComprehensionLoop, "wanted = {", "GB4347") is None


def test_rule_example():
    rules = Path(__file__).resolve().parents[2] / "rules" / "GB4347.md"
    example = next(e for e in parse(rules) if e.title.startswith("a dict comprehension"))
    assert rewrite_line(example.before, ComprehensionLoop, "wanted = {", "GB4347") == example.after
