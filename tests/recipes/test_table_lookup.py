"""table-take: `A[i]` at an index Dynamo holds as a tensor (or a numpy table at a
symbolic int), through a helper that gathers while tracing and is `A[i]` eagerly."""

from __future__ import annotations

import itertools

import pytest

from gbfix import generated
from gbfix.recipes import table_lookup
from gbfix.recipes.table_lookup import TableTake
from tests.helpers import changed, generated_function, rewrite_line, value_or_error

METHOD = """\
import torch


class Scheduler:
    def step(self, t, sample):
        prev_t = t - 1
        {line}
        return sample * alpha
"""


def _rewritten(source: str, needle: str, code: str = "GB0033") -> str | None:
    out = rewrite_line(source, TableTake, needle, code)
    helper = {line.strip() for p in generated.closure([table_lookup.HELPER.name]) for line in p.code.splitlines()}
    return None if out is None else next(line for line in changed(source, out) if line not in helper and needle.split()[0] in line)


@pytest.mark.parametrize(
    "line, expected",
    [
        ("alpha = self.alphas_cumprod[t]", "alpha = gbfix_take(self.alphas_cumprod, t)"),
        ("alpha = self.alphas_cumprod[prev_t + 1] ** 0.5", "alpha = gbfix_take(self.alphas_cumprod, prev_t + 1) ** 0.5"),
        ("alpha = 1 - self.sigmas[self.step_index]", "alpha = 1 - gbfix_take(self.sigmas, self.step_index)"),
        ("alpha = (self.sigmas[t]).sqrt()", "alpha = (gbfix_take(self.sigmas, t)).sqrt()"),
    ],
)
def test_rewrites_a_read_in_a_method(line, expected):
    assert _rewritten(METHOD.format(line=line), "alpha =") == expected


def test_rewrites_a_read_added_in_place_to_another_name():
    source = METHOD.format(line="alpha = sample * 2\n        alpha += self.sigmas[t]")
    assert _rewritten(source, "alpha +=") == "alpha += gbfix_take(self.sigmas, t)"


def test_rewrites_a_read_in_a_helper_function_whose_result_is_returned_to_a_reader():
    source = """\
    import torch


    def alpha_at(table, t):
        return table[t - 1]


    def step(table, t, x):
        return x * alpha_at(table, t)
    """
    assert _rewritten(source, "return table") == "return gbfix_take(table, t - 1)"


def test_a_result_that_may_be_written_through_takes_only_the_numpy_case():
    source = """\
    import torch


    class Prk:
        def step(self, sample):
            timestep = self.prk_timesteps[self.counter // 4 * 4]
            return self._prev(sample, timestep)
    """
    expected = "timestep = gbfix_take(self.prk_timesteps, self.counter // 4 * 4, read_only=False)"
    assert _rewritten(source, "timestep =", "GB0112") == expected
    kept = METHOD.format(line="alpha = self.ac[t]\n        alpha.mul_(2)")
    assert _rewritten(kept, "alpha =") == "alpha = gbfix_take(self.ac, t, read_only=False)"


@pytest.mark.parametrize(
    "line",
    [
        "alpha = self.ac[0]",  # a literal index does not break
        "alpha = self.ac[t:]",  # a slice
        "alpha = self.ac[t, 0]",  # several indices
        "alpha = self.table()[t]",  # a call the helper call would make before the index
        "alpha = self.ac[t.item()]",
        "self.ac[t] = 1.0\n        alpha = self.ac",  # a write
        "self.ac[t] += 1.0\n        alpha = self.ac",
        "alpha = self.ac[t]\n        self.ac.mul_(2)",  # the table changed in place: the element is a view of it
    ],
)
def test_declines(line):
    assert rewrite_line(METHOD.format(line=line), TableTake, line.split("\n")[0].strip(), "GB0033") is None


def test_declines_a_taken_helper_name():
    source = METHOD.format(line="alpha = self.ac[t]") + "\ngbfix_take = None\n"
    assert rewrite_line(source, TableTake, "alpha =", "GB0033") is None


# ---- the helper against the read it stands for -------------------------------------


@pytest.fixture(scope="module")
def take():
    torch = pytest.importorskip("torch")
    return torch, generated_function(table_lookup.HELPER)


def _same(torch, got, want, what):
    if isinstance(want, type):
        assert got is want, what
    else:
        assert type(got) is type(want), what
        if isinstance(want, torch.Tensor):
            assert torch.equal(got, want) and (got.dtype, got.shape) == (want.dtype, want.shape), what
        else:
            assert got == want, what


def test_the_helper_gives_what_the_read_gives_compiled_and_not(take):
    """Tables of several dtypes and ranks, indices in and out of range, negative,
    of other dtypes and shapes, numpy integers: the same value, dtype and shape, or
    the same error, run eagerly and compiled (the compiled read does not break)."""
    torch, pick = take
    np = pytest.importorskip("numpy")
    from torch._dynamo.utils import counters

    tables = [torch.linspace(0.1, 1.0, 5), torch.arange(5), torch.ones(5, 2).cumsum(0), torch.ones(0)]
    indices = [torch.tensor(i) for i in (-6, -1, 0, 3, 4, 5)] + [torch.tensor(2, dtype=torch.int32), np.int64(3)]
    odd = [torch.tensor([1, 2]), torch.tensor(2.0), torch.tensor(True)]

    def read(table, i):
        return pick(table, i + 0) * 1  # a computed index, as in a scheduler step

    def original(table, i):
        return table[i + 0] * 1

    compiled, compiled_original = torch.compile(read, backend="eager"), torch.compile(original, backend="eager")
    for table, i in itertools.product(tables, indices + odd):
        want = value_or_error(lambda: original(table, i))  # noqa: B023 - called at once
        _same(torch, value_or_error(lambda: read(table, i)), want, (table, i))  # noqa: B023
        torch._dynamo.reset()
        want = value_or_error(lambda: compiled_original(table, i))  # noqa: B023
        torch._dynamo.reset()
        counters.clear()
        _same(torch, value_or_error(lambda: compiled(table, i)), want, (table, i))  # noqa: B023
        if not isinstance(want, type) and i.__class__ is torch.Tensor and i.dim() == 0 and i.dtype != torch.bool:
            assert not counters["graph_break"], (table, i)


def test_the_numpy_table_at_a_symbolic_counter_compiles_without_a_break(take):
    torch, pick = take
    np = pytest.importorskip("numpy")
    from torch._dynamo.utils import counters

    table = torch.linspace(0.1, 1.0, 10)

    class Steps:
        def __init__(self):
            self.counter, self.prk = 0, np.array([9, 7, 7, 5, 5, 3, 3, 1])

        def step(self, x):
            timestep = pick(self.prk, self.counter // 4 * 4, read_only=False)
            self.counter += 1
            return x * pick(table, timestep)

    eager, compiled_steps = Steps(), Steps()
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(compiled_steps.step, backend="eager")
    for _ in range(8):  # the counter turns into a symbolic int on the recompile
        assert torch.equal(compiled(torch.ones(2)), eager.step(torch.ones(2)))
    assert not counters["graph_break"]
    assert type(pick(eager.prk, 4, read_only=False)) is type(eager.prk[4])  # eagerly a numpy scalar, as written


def test_an_index_out_of_range_raises_index_error_under_inductor_as_the_read_does(take):
    """Inductor's own gather raises RuntimeError out of range; the helper's op runs the
    read as written, so the error stays an IndexError."""
    torch, pick = take
    table = torch.linspace(0.1, 1.0, 5)

    def read(x, t):
        return x * pick(table, t + 1)

    torch._dynamo.reset()
    compiled = torch.compile(read)
    assert torch.equal(compiled(torch.ones(2), torch.tensor(2)), torch.ones(2) * table[3])
    with pytest.raises(IndexError):
        compiled(torch.ones(2), torch.tensor(4))
