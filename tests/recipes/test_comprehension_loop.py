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
        ("new_wanted = 1\n        wanted = [wanted[k] for k in flags]", "(wanted, new_wanted)"),  # no free name to build it under
        ("wanted = {k: 1 for k in flags}", "locals()"),  # the loop's name would show in locals()
        ("self.wanted = {k: 1 for k in flags}", "self.wanted"),  # not a plain name
        ("wanted = sorted(k for k in flags)", "wanted"),  # a generator: another break, another fix
    ],
)
def test_declines_what_a_loop_would_change(stmt, result):
    assert _fix(stmt, result=result, needle=stmt.split("\n")[-1] if "\n" in stmt else None) is None


@pytest.mark.parametrize(
    "stmt, body",
    [
        # reads the old value of the name it assigns (a permutation of a list)
        ("wanted = [wanted[k] for k in flags]", "new_wanted.append(wanted[k])"),
        ("wanted = {k: wanted for k in flags}", "new_wanted[k] = wanted"),
        # a closure could see a partial result
        ("wanted = {k: 1 for k in flags}\n        show = lambda: wanted", "new_wanted[k] = 1"),
    ],
)
def test_a_name_that_must_not_see_a_partial_result_is_bound_once_the_loop_is_done(stmt, body):
    lines = _new_lines(stmt)
    assert lines[0] == ("new_wanted = []" if stmt.startswith("wanted = [") else "new_wanted = {}")
    assert lines[-2:] == [body, "wanted = new_wanted"]


def test_inside_try_or_with_the_name_is_bound_once_the_loop_is_done():
    for head, tail in (("try:", "except ValueError:\n            pass"), ("with lock:", "")):
        src = f"""
    def f(flags, lock, in_args, order):
        {head}
            in_args = [in_args[i] for i in order]
        {tail}
        return in_args
    """
        out = rewrite_line(src, ComprehensionLoop, "in_args = [", "GB4347")
        assert out is not None and changed(src, out) == [
            "new_in_args = []", "for i in order:", "new_in_args.append(in_args[i])", "in_args = new_in_args",
        ], out
        compile(out, "f.py", "exec")


def test_declines_in_a_class_body():
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
