"""masked-copy: `A[M] = B[M]` through a helper that writes torch.where(M, B, A) into A
when indexing would read M as a boolean mask, and runs the statement as written otherwise."""

from __future__ import annotations

import itertools
import textwrap
import warnings

import pytest

from gbfix import edits, engine
from gbfix.entry import parse as parse_entry
from gbfix.recipes import masked_assign
from gbfix.recipes.masked_assign import MaskedCopy
from tests.helpers import changed, generated_function, line_site, site_context, value_or_error

FUNCTION = """\
import torch


def step(a, b, m, keep, tokens):
    a = a * 1
    {line}
    return a
"""

METHOD = """\
import torch


class Cache:
    def update(self, new, keep):
        {line}
        return self.buf
"""


def _propose(source: str, needle: str):
    """(context, rewrite or None, decline reason or None) at ``needle``: the span
    Dynamo reports, the read `B[M]`."""
    source = textwrap.dedent(source)
    line, col, _ = line_site(source, needle)
    ctx = site_context(source, line, col, col + len(needle), "GB0036")
    recipe = MaskedCopy()
    return ctx, recipe.propose(ctx), recipe.declined


def _rewritten(source: str, needle: str) -> list[str] | None:
    """The changed lines, but the helper's."""
    ctx, rw, _ = _propose(source, needle)
    if rw is None:
        return None
    out = edits.apply(ctx.file, [rw.edit(0, ctx.site, MaskedCopy, ctx.file)]).decode()
    helper = {line.strip() for line in masked_assign.HELPER.code.splitlines()}
    return [line for line in changed(textwrap.dedent(source), out) if line not in helper and line]


@pytest.mark.parametrize(
    "source, line, expected",
    [
        (FUNCTION, "a[m] = b[m]", "gbfix_masked_copy(a, m, b)"),  # a mask named
        (FUNCTION, "a[a > 0] = b[a > 0]", "gbfix_masked_copy(a, a > 0, b)"),  # a mask written inline
        (FUNCTION, "a[~keep] = (b * 2)[~keep]", "gbfix_masked_copy(a, ~keep, b * 2)"),  # a source expression
        (FUNCTION, "a[m] = (b[m])", "gbfix_masked_copy(a, m, b)"),
        (FUNCTION, "a[m] = b[m]; a = a + 1", "gbfix_masked_copy(a, m, b); a = a + 1"),  # the needle: up to `;`
        (  # bench/probe/grpo_loss/main.py:66
            FUNCTION,
            "a[tokens.any(dim=1)] = tokens.int().argmax(dim=1)[tokens.any(dim=1)]",
            "gbfix_masked_copy(a, tokens.any(dim=1), tokens.int().argmax(dim=1))",
        ),
        (METHOD, "self.buf[~keep] = new[~keep]", "gbfix_masked_copy(self.buf, ~keep, new)"),  # an attribute, in a method
        (METHOD, "self.state.buf[keep] = self.fresh[keep]", "gbfix_masked_copy(self.state.buf, keep, self.fresh)"),
    ],
)
def test_rewrites(source, line, expected):
    needle = line.split("= ", 1)[1].split(";")[0]
    assert _rewritten(source.format(line=line), needle) == [expected]


def test_adds_the_helper_once_after_the_imports():
    _, rw, _ = _propose(FUNCTION.format(line="a[m] = b[m]"), "b[m]")
    assert rw is not None and [name for name, _ in rw.helpers] == ["gbfix_masked_copy"]


@pytest.mark.parametrize(
    "source, line, reason",
    [
        (FUNCTION, "a[m] += b[m]", "augmented assignment"),
        (FUNCTION, "a[m] = b[keep]", "different masks"),
        (FUNCTION, "a[m] = b[m] * 2", "the right side is not `B[M]`"),
        (FUNCTION, "a[m] = torch.relu(b[m])", "the right side is not `B[M]`"),
        (FUNCTION, "a[m, :3] = b[m, :3]", "not a lone mask"),
        (FUNCTION, "a[m, 0] = b[m, 0]", "not a lone mask"),
        (FUNCTION, "a[m:] = b[m:]", "not a lone mask"),
        (FUNCTION, "a[(m, keep)] = b[(m, keep)]", "not a mask"),
        (FUNCTION, "a[torch.rand(4) > 0.5] = b[torch.rand(4) > 0.5]", "may have effects"),  # a mask drawn twice
        (FUNCTION, "a[m] = b.add_(1)[m]", "may have effects"),
        (METHOD, "self.buf[keep] = self.compute(new)[keep]", "may have effects"),  # a method out of sight
        (FUNCTION, "c = a[m] = b[m]", "several targets"),
    ],
)
def test_declines_with_a_reason(source, line, reason):
    _, rw, declined = _propose(source.format(line=line), line.split("= ")[-1])
    assert rw is None and declined is not None and reason in declined, declined


def test_declines_a_taken_helper_name():
    source = FUNCTION.format(line="a[m] = b[m]") + "\ngbfix_masked_copy = None\n"
    _, rw, declined = _propose(source, "b[m]")
    assert rw is None and "binds gbfix_masked_copy" in declined


def test_leaves_other_statements_to_other_recipes():
    # not a masked write: no decline reason to report
    for line in ("x = b[m].sum()", "a[m] = 0.0", "out = b[m]", "a[0, 1] = b[m].sum()"):
        _, rw, declined = _propose(FUNCTION.format(line=line), line.split("= ")[-1])
        assert rw is None and declined is None, line


# ---- the helper against the statement it stands for -----------------------------------


@pytest.fixture(scope="module")
def helper():
    torch = pytest.importorskip("torch")
    return torch, generated_function(masked_assign.HELPER)


def _outcome(torch, write, a, m, b):
    """The target after the write and the warnings it gave, or the error's type."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = value_or_error(lambda: write(a, m, b) or a)
    return result, [str(w.message) for w in seen]


def _original(a, m, b):
    a[m] = b[m]


def _same(torch, got, want):
    if isinstance(want[0], type):
        return got == want
    return (
        got[1] == want[1] and not isinstance(got[0], type)
        and got[0].dtype == want[0].dtype and got[0].shape == want[0].shape and torch.equal(got[0], want[0])
    )


def test_equals_the_statement_on_shapes_dtypes_and_masks(helper):
    torch, copy = helper
    torch.manual_seed(0)
    shapes = [(), (4,), (1,), (4, 3), (4, 1), (1, 3), (3, 4), (4, 3, 2), (4, 1, 2), (0, 3)]
    dtypes = [(torch.float32, torch.float32), (torch.int64, torch.int64), (torch.bool, torch.bool), (torch.float32, torch.float64), (torch.int64, torch.float32)]
    taken = 0
    for sa, sb, sm, (da, db), kind in itertools.product(shapes, shapes, shapes, dtypes, ("bool", "uint8", "long")):
        a, b = (torch.randn(sa) * 10).to(da), (torch.randn(sb) * 10).to(db)
        m = torch.rand(sm) > 0.5
        m = m.to(torch.uint8) if kind == "uint8" else m.long() if kind == "long" else m
        want = _outcome(torch, _original, a.clone(), m, b)
        got = _outcome(torch, copy, a.clone(), m, b)
        assert _same(torch, got, want), (sa, sb, sm, da, db, kind, got, want)
        taken += not isinstance(want[0], type)
    assert taken > 500  # the grid reaches the torch.where path, not only errors


def test_a_row_mask_on_a_square_target_selects_rows(helper):
    # `torch.where` aligns the mask from the right, indexing from the left: on a square
    # target a row mask without trailing dimensions would pick columns, and a mask that
    # is all true or all false in the verifier's run would not show it.
    torch, copy = helper
    a, b, rows = torch.zeros(3, 3), torch.arange(9.0).view(3, 3), torch.tensor([True, False, False])
    want = a.clone()
    _original(want, rows, b)
    assert not torch.equal(torch.where(rows, b, a), want)  # the naive spelling is wrong here
    got = a.clone()
    copy(got, rows, b)
    assert torch.equal(got, want)


def test_same_gradients_and_aliases_see_the_write(helper):
    torch, copy = helper
    torch.manual_seed(0)
    for shape, mask_shape in [((5,), (5,)), ((4, 3, 2), (4, 3)), ((4, 3), (4,))]:
        x, y = torch.randn(shape, requires_grad=True), torch.randn(shape, requires_grad=True)
        m, w = torch.rand(mask_shape) > 0.5, torch.randn(shape)
        runs = []
        for write in (_original, copy):
            x.grad = y.grad = None
            a = x * 2
            alias = a.view(-1)  # a view taken before the write sees it
            write(a, m, y * 3)
            ((a * w).sum() + (alias**2).sum()).backward()
            runs.append((a.detach(), alias.detach(), x.grad, y.grad))
        assert all(torch.equal(p, q) for p, q in zip(*runs, strict=True)), shape


def test_same_errors_and_warnings_on_leaves_and_expanded_targets(helper):
    torch, copy = helper
    mask, source = torch.tensor([True, False, True]), torch.tensor([1.0, 2.0, 3.0])
    for make in (lambda: torch.zeros(3, requires_grad=True), lambda: torch.zeros(1).expand(3)):
        want = _outcome(torch, _original, make(), mask, source)
        assert _same(torch, _outcome(torch, copy, make(), mask, source), want)


def test_compiles_without_a_break_with_a_mask_over_rows(helper):
    torch, copy = helper

    def update(state, new, keep):
        out = state.clone()
        copy(out, ~keep, new)
        return out

    compiled = torch.compile(update, backend="eager", fullgraph=True)  # a break would raise
    for rows in (3, 5, 7):  # the third size turns dynamic
        args = (torch.randn(rows, 4, 2), torch.randn(rows, 4, 1), torch.rand(rows, 4) > 0.5)
        assert torch.equal(compiled(*args), update(*args))


# ---- end to end: detection, the rewrite and its verification, with real runs ------------

PROGRAM = """\
import torch
import torch.nn as nn


def sequence_ends(tokens):
    is_eos = tokens == 1
    ends = torch.full((tokens.size(0),), tokens.size(1), dtype=torch.long)
    ends[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
    return ends


class Slots(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(2, 4, 3))

    def forward(self, new, keep):
        view = self.state[0]
        self.state[~keep] = new[~keep]
        return self.state.sum(-1) + view.sum()


if __name__ == "__main__":
    torch.manual_seed(0)
    ends = torch.compile(sequence_ends, backend="eager")
    slots = torch.compile(Slots(), backend="eager")
    for _ in range(3):
        print(ends(torch.randint(0, 5, (4, 6))).tolist())
        print(f"{slots(torch.randn(2, 4, 3), torch.rand(2, 4) > 0.5).sum().item():.4f}")
"""


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("masked_copy").resolve()
    script = folder / "prog.py"
    script.write_text(PROGRAM)
    return script, engine.fix([script], parse_entry("python prog.py", folder), engine.Options())


def test_end_to_end_both_sites_fixed_by_the_rewrite(fixed):
    script, result = fixed
    applied = [(o.edit.recipe, o.edit.site.line) for o in result.outcomes if o.status == "applied"]
    assert applied == [("masked-copy", 8), ("masked-copy", 19)]  # not the process-wide route
    assert {f.status for f in result.findings if f.code == "GB0036"} == {"fixed"}
    text = result.fixed[script].decode()
    assert "    gbfix_masked_copy(ends, is_eos.any(dim=1), is_eos.int().argmax(dim=1))\n" in text
    assert "        gbfix_masked_copy(self.state, ~keep, new)\n" in text
    assert "capture_dynamic_output_shape_ops" not in text

