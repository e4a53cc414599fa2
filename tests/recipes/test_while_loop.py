"""while-to-while-loop: a `while` on a tensor test as torch.while_loop.

A real run through the engine fixes four spellings (a fixpoint on two tensors as
in kornia's canny, a tolerance loop reading tensor closures, a method reading
`self` and calling a helper, a Python int counter) and rejects a fifth that
while_loop cannot take (closures that are views of one another); the static
tests show what the recipe writes and what it declines, and why."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from gbfix import edits, engine
from gbfix.entry import parse as parse_entry
from gbfix.recipes.while_loop import WhileToWhileLoop
from tests.helpers import ALL_CAPABILITIES, line_site, site_context

CAPS = ALL_CAPABILITIES | {"while_loop"}

PROGRAM = '''\
import torch
import torch.nn.functional as F


def _hysteresis_step(edges, kernel):
    weak = (edges == 0.5).to(edges.dtype)
    strong = (edges == 1).to(edges.dtype)
    magnitude = F.conv2d(edges, kernel, padding=1)
    magnitude = (magnitude == 1).any(1, keepdim=True).to(edges.dtype)
    magnitude = magnitude * weak + strong
    return magnitude + (magnitude == 0) * weak * 0.5


def hysteresis(edges, kernel):
    edges_old = -torch.ones_like(edges)
    while ((edges_old - edges).abs() != 0).any():
        edges_old = edges
        edges = _hysteresis_step(edges, kernel)
    return (edges == 1).float()


def newton_sqrt(a, tol):
    x = torch.ones_like(a)
    err = (x * x - a).abs().max()
    while err > tol:
        x = 0.5 * (x + a / x)
        err = (x * x - a).abs().max()
    return x


def jacobi(A, b, x, tol):
    d = torch.diagonal(A)
    err = (A @ x - b).abs().max()
    while err > tol:
        x = (b - (A @ x - d * x)) / d
        err = (A @ x - b).abs().max()
    return x, err


def _damp(h, target):
    return 0.5 * (h + target)


class Refiner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.tol = 1e-3

    def forward(self, x):
        target = torch.tanh(self.proj(x))
        h = torch.zeros_like(x)
        delta = torch.ones(())
        while not (delta < self.tol):
            new = _damp(h, target)
            delta = (new - h).abs().max()
            h = new
        return self.proj(h), delta


def counted(x):
    n = 0
    while x.max() > 1:
        x = x / 2
        n = n + 1
    return x, n


if __name__ == "__main__":
    torch.manual_seed(0)
    kernel = torch.ones(1, 1, 3, 3)
    hyst = torch.compile(hysteresis, backend="eager")
    for _ in range(2):
        print(hyst((torch.rand(1, 1, 12, 12) * 3).floor() / 2, kernel).sum())
    print(torch.compile(newton_sqrt, backend="eager")(torch.tensor([2.0, 9.0, 0.25]), torch.tensor(1e-6)))
    A = torch.eye(3) * 4 + torch.rand(3, 3)
    solve = torch.compile(jacobi, backend="eager")
    print(solve(A, torch.ones(3), torch.zeros(3), torch.tensor(1e-5)))
    model = torch.compile(Refiner(), backend="eager")
    with torch.no_grad():
        print(model(torch.randn(2, 4)))
    print(torch.compile(counted, backend="eager")(torch.rand(3) * 50))
'''


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("while_loop").resolve()
    script = folder / "loops.py"
    script.write_text(PROGRAM)
    result = engine.fix([script], parse_entry("python loops.py", folder), engine.Options())
    return folder, script, result


def _line(needle: str, nth: int = 0) -> int:
    return [i for i, text in enumerate(PROGRAM.splitlines(), 1) if needle in text][nth]


def test_four_spellings_fixed_and_the_aliasing_one_rejected(fixed):
    folder, script, result = fixed
    applied = {o.edit.site.line for o in result.outcomes if o.status == "applied" and o.edit.recipe == "while-to-while-loop"}
    loops = [_line(s) for s in ("while ((edges_old", "while err > tol:", "while not (delta", "while x.max() > 1")]
    assert applied == set(loops)
    # jacobi's `d` is a view of `A`, both closures of the loop: while_loop rejects the
    # aliasing, the edited run fails, and the verifier keeps the original loop
    (left,) = [f for f in result.findings if f.code == "GB0170" and f.status != "fixed"]
    assert left.line == _line("while err > tol:", 1) and "aliasing" in left.detail
    assert result.remaining == 1
    text = result.fixed[script].decode()
    assert "    d = torch.diagonal(A)\n    err = (A @ x - b).abs().max()\n    while err > tol:\n" in text


def test_what_it_writes(fixed):
    folder, script, result = fixed
    text = result.fixed[script].decode()
    assert textwrap.dedent("""\
        def hysteresis(edges, kernel):
            edges_old = -torch.ones_like(edges)

            def _gbfix_while_cond(edges_old, edges):
                return ((edges_old - edges).abs() != 0).any()

            def _gbfix_while_body(edges_old, edges):
                edges_old = edges
                edges = _hysteresis_step(edges, kernel)
                return edges_old.clone(), edges

            edges_old, edges = torch.while_loop(_gbfix_while_cond, _gbfix_while_body, (edges_old, edges))
            return (edges == 1).float()
        """) in text
    # the method: `self` and the helper are closures; `new` stays a local of the body;
    # carried names in the order the body first binds them
    assert textwrap.indent(textwrap.dedent("""\
        def _gbfix_while_cond(delta, h):
            return torch.logical_not(delta < self.tol)

        def _gbfix_while_body(delta, h):
            new = _damp(h, target)
            delta = (new - h).abs().max()
            h = new
            return delta, h.clone()

        delta, h = torch.while_loop(_gbfix_while_cond, _gbfix_while_body, (delta, h))
        return self.proj(h), delta
        """), "        ") in text
    assert "        return x, n\n\n    x, n = torch.while_loop(" in text


def test_fixed_program_prints_the_same(fixed):
    folder, script, result = fixed
    before = subprocess.run([sys.executable, str(script)], cwd=folder, capture_output=True, text=True, check=True)
    edited = folder / "edited.py"
    edited.write_bytes(result.fixed[script])
    after = subprocess.run([sys.executable, str(edited)], cwd=folder, capture_output=True, text=True, check=True)
    assert after.stdout == before.stdout and "tensor([1.4142, 3.0000, 0.5000])" in after.stdout


# ---- static: what the recipe writes and declines, no torch run ----------------------


def _site(source: str, needle: str, capabilities: frozenset[str] = CAPS):
    """The recipe's view of the `while` test at ``needle`` (the span Dynamo reports: the test)."""
    line, col, _ = line_site(source, needle)
    test_end = source.splitlines()[line - 1].index(":", col)
    return site_context(source, line, col + len("while "), test_end, "GB0170", capabilities)


def _propose(source: str, needle: str = "while "):
    recipe = WhileToWhileLoop()
    rewrite = recipe.propose(_site(textwrap.dedent(source), needle))
    return rewrite, recipe.declined


def _rewrite(source: str, needle: str = "while ") -> str:
    source = textwrap.dedent(source)
    ctx = _site(source, needle)
    rewrite = WhileToWhileLoop().propose(ctx)
    assert rewrite is not None
    return edits.apply(ctx.file, [rewrite.edit(0, ctx.site, WhileToWhileLoop, ctx.file)]).decode()


def test_one_carried_name_one_line_body_and_comments():
    out = _rewrite("""\
        import torch


        def halve(x):
            # until small
            while x.max() > 1: x = x / 2  # halve
            return x
        """)
    assert out == textwrap.dedent("""\
        import torch


        def halve(x):
            # until small
            def _gbfix_while_cond(x):  # halve
                return x.max() > 1

            def _gbfix_while_body(x):
                x = x / 2
                return (x,)

            (x,) = torch.while_loop(_gbfix_while_cond, _gbfix_while_body, (x,))
            return x
        """)


def test_a_second_loop_gets_fresh_names_and_bool_is_dropped():
    out = _rewrite("""\
        import torch


        def two(x, y):
            def _gbfix_while_cond(x):
                return x.max() > 1
            x = x / 2
            while bool((y > 1).any()):
                y = y / 2
            return x + y
        """, "while bool")
    assert "    def _gbfix_while_cond_2(y):\n        return (y > 1).any()\n" in out
    assert "    (y,) = torch.while_loop(_gbfix_while_cond_2, _gbfix_while_body, (y,))\n" in out


def test_temporaries_stay_local_and_conditional_bindings_are_carried():
    out = _rewrite("""\
        import torch


        def f(x, s):
            best = x
            while (x - s).abs().max() > 0.1:
                step = (s - x) / 2
                x = x + step
                if s.dim() == 1:
                    best = x
            return best
        """)
    # `step` is recomputed before every read: a local of the body; `best` is read after
    # the loop and bound only on one path of the body: carried, and returned as a clone
    assert "def _gbfix_while_body(x, best):" in out and "return x, best.clone()" in out


@pytest.mark.parametrize(
    "body, reason",
    [
        (["x = x / 2", "print(x)"], "expression statement"),
        (["x = x / 2", "seen.append(x)"], "expression statement"),
        (["self.x = x / 2", "x = self.x"], "attribute or subscript"),
        (["x = x / 2", "if x.sum() > 3:", "    break"], "`break`"),
        (["x = x.div_(2)"], "in-place op"),
        (["x = x / 2", "x += 1"], "augmented assignment"),
        (["x = x + torch.rand_like(x)"], "random"),
        (["with torch.no_grad():", "    x = x / 2"], "`with`"),
    ],
)
def test_declines_a_body_that_does_more_than_compute_names(body, reason):
    lines = "".join(f"        {line}\n" for line in body)
    source = f"import torch\n\n\ndef f(self, x, seen):\n    while x.max() > 1:\n{lines}    return x\n"
    rewrite, declined = _propose(source)
    assert rewrite is None and reason in declined, declined


def test_declines_a_carried_name_unbound_before_the_loop():
    rewrite, declined = _propose("""\
        import torch


        def f(x):
            while x.max() > 1:
                x = x / 2
                last = x
            return last
        """)
    assert rewrite is None and "`last` may be unbound before the loop" in declined


def test_declines_a_name_the_function_declares_global():
    rewrite, declined = _propose("""\
        import torch

        last = None


        def f(x):
            global last
            while x.max() > 1:
                x = x / 2
                last = x
            return x
        """)
    assert rewrite is None and "global or nonlocal" in declined


def test_declines_an_else_clause_a_test_with_effects_and_a_loop_outside_a_function():
    rewrite, declined = _propose("""\
        import torch


        def f(x):
            while x.max() > 1:
                x = x / 2
            else:
                x = x + 1
            return x
        """)
    assert rewrite is None and "`else:`" in declined
    rewrite, declined = _propose("""\
        import torch


        def f(x):
            while x.add_(-1).max() > 1:
                x = x / 2
            return x
        """)
    assert rewrite is None and "test has effects" in declined
    rewrite, declined = _propose("""\
        import torch

        x = torch.ones(3) * 8
        while x.max() > 1:
            x = x / 2
        """)
    assert rewrite is None and "not inside a function" in declined


def test_not_offered_without_while_loop():
    source = textwrap.dedent("""\
        import torch


        def f(x):
            while x.max() > 1:
                x = x / 2
            return x
        """)
    assert WhileToWhileLoop().propose(_site(source, "while ", ALL_CAPABILITIES)) is None
    assert WhileToWhileLoop().propose(_site(source, "while ")) is not None
