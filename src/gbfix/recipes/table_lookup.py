"""GB0033 / GB0112 on a table read at an index Dynamo holds as a tensor: `A[i]`.

Diffusion schedulers keep their tables on ``self`` (``alphas_cumprod``, ``sigmas``,
``timesteps``, numpy arrays such as PNDM's ``prk_timesteps``) and read them at a
timestep or step index that compiled code holds as a tensor: ``self.timesteps[index +
1]`` with ``index`` from ``nonzero``, ``self.alphas_cumprod[timestep]`` with a numpy
integer. Indexing with a one-element integer tensor makes it a Python int first
(``aten._local_scalar_dense``, GB0033), and a numpy table read at a symbolic step
counter fails to trace (``select(): argument 'input' must be Tensor, not ndarray``,
GB0112). ``table-take`` routes the read through a module-level helper::

    alpha = self.alphas_cumprod[t]    ->    alpha = gbfix_take(self.alphas_cumprod, t)

which runs ``table[index]`` as written, except while Dynamo traces it: a tensor table
read at a 0-d integer tensor or numpy integer is then an op of the helpers' module
whose fake gives the element's shape and which runs ``table[index]`` and copies it (the
same values, dtype, shape, and the same error for an index out of range, also under
inductor, whose own gather would raise RuntimeError where the read raises IndexError;
a new tensor where the original is a view of the table; the op has no gradient, so a
table that requires one is read as written); a 1-d numpy table read at an int in range
is ``table[[index]][0]`` (the same numpy scalar; the range is checked while tracing, so
a read out of range runs as written and raises as it did).

Declined: a read that is assigned to or deleted, a slice or several indices, an index
that is a literal, impure parts, a table the function changes in place. A result that
is not only read (``analysis.only_read``: it could be written through, or compared by
identity) gets ``read_only=False``: only the numpy case, whose element is a scalar
either way, is taken then.
"""

from __future__ import annotations

import libcst as cst

from gbfix import generated
from gbfix.generated import piece
from gbfix.recipes.analysis import changed_in_place, only_read, pure, scope_of, taken
from gbfix.recipes.base import Decline, Recipe, SiteContext
from gbfix.recipes.op_helpers import OPS
from gbfix.recipes.tree import walk

# `table[index]` as an op: what Dynamo traces of a read whose index it must not turn into a
# Python int (the op runs the read as written, so an index out of range raises IndexError,
# also under inductor). Also guarded-index's.
TAKE_OP = piece("_gbfix_take_op", '''\
# `table[index]` as an op of this module: Dynamo sees its shape only, and it runs
# the read as written (the same value, or the same error), then copies it.
_gbfix_take_name = f"take_{_gbfix_tag}"
if not hasattr(torch.ops.gbfix, _gbfix_take_name):
    _gbfix_lib.define(f"{_gbfix_take_name}(Tensor table, Tensor index) -> Tensor")
    _gbfix_lib.impl(
        _gbfix_take_name,
        torch.compiler.disable(lambda table, index: table[index].clone(memory_format=torch.contiguous_format)),
        "CompositeExplicitAutograd",
    )
    torch.library.register_fake(
        f"gbfix::{_gbfix_take_name}", lambda table, index: table.new_empty(table.shape[1:]), lib=_gbfix_lib
    )
_gbfix_take_op = getattr(torch.ops.gbfix, _gbfix_take_name)
''', needs=(OPS.name,), public=False)

HELPER = piece("gbfix_take", '''\
def gbfix_take(table, index, read_only=True):
    # Added by gbfix: `table[index]`. While Dynamo traces it, a read that would turn
    # a tensor index into a Python int (a break) is taken apart: a tensor table
    # (its element only read, no gradient to it) at a 0-d integer tensor or numpy
    # integer is the op above, the same values as a new tensor; a 1-d numpy table
    # at an int in range is the same numpy scalar. Run eagerly, it is `table[index]`.
    if torch.compiler.is_compiling():
        numpy_index = type(index).__module__ == "numpy"
        if isinstance(table, torch.Tensor) and (isinstance(index, torch.Tensor) or numpy_index):
            at = torch.as_tensor(index)
            if (
                read_only and table.dim() >= 1 and at.dim() == 0
                and at.dtype in (torch.int64, torch.int32, torch.int16, torch.int8)
                and not (table.requires_grad and torch.is_grad_enabled())
            ):
                return _gbfix_take_op(table, at)
        elif type(table).__module__ == "numpy" and table.ndim == 1 and isinstance(index, int):
            if -len(table) <= index < len(table):  # guarded while tracing: out of range, the read raises as written
                return table[[index]][0]
    return table[index]
''', needs=(TAKE_OP.name,))


def _reads(node: cst.CSTNode) -> list[cst.Subscript]:
    """The one-index reads (`A[i]`, `i` not a literal or slice) in ``node``."""
    out = []
    for n in walk(node):
        if isinstance(n, cst.Subscript) and len(n.slice) == 1 and isinstance(n.slice[0].slice, cst.Index):
            index = n.slice[0].slice
            literal = isinstance(index.value, (cst.Integer, cst.SimpleString)) or (
                isinstance(index.value, cst.UnaryOperation) and isinstance(index.value.expression, cst.Integer)
            )
            if index.star is None and not literal:
                out.append(n)
    return out


class TableTake(Recipe):
    name = "table-take"
    codes = ("GB0033", "GB0112")
    safety = "safe"
    rule = "GB0033"
    summary = "`A[i]` at an index Dynamo holds as a tensor (or a numpy table at a symbolic int) -> a helper that reads it through an op while tracing"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        read = self._read(ctx)
        if read is None:
            return None
        up = ctx.file.parent(read)
        if isinstance(up, (cst.AssignTarget, cst.Del)) or (isinstance(up, cst.AugAssign) and up.target is read) or (
            isinstance(up, cst.Element) and isinstance(ctx.file.parent(ctx.file.parent(up)), cst.AssignTarget)
        ):
            raise Decline("the read is a write (`A[i] = v`): the helper would write into a copy")
        table, index = read.value, read.slice[0].slice.value
        if not pure(table) or not pure(index):
            raise Decline("the table or the index calls something: what the table is, and who changes it, is out of sight")
        if changed_in_place(scope_of(ctx, read), table):
            raise Decline("the function changes the table in place: the original's element is a view of it")
        if taken(ctx, HELPER.name):
            raise Decline(f"the module binds {HELPER.name} to something else")
        args = [cst.Arg(table), cst.Arg(index)]
        if not only_read(ctx, read):  # a copy could show: only the numpy read, a scalar either way
            args.append(cst.Arg(cst.Name("False"), keyword=cst.Name("read_only"), equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))))
        self._call = cst.Call(cst.Name(HELPER.name), args).with_changes(lpar=read.lpar, rpar=read.rpar)
        return read

    @staticmethod
    def _read(ctx: SiteContext) -> cst.Subscript | None:
        """The read at the site: the subscript the reported node is in, else the only one
        in the reported statement."""
        for n in (ctx.node, *ctx.ancestors()):
            if isinstance(n, cst.Subscript):
                return n if any(r is n for r in _reads(n)) else None
            if isinstance(n, (cst.BaseSmallStatement, cst.BaseCompoundStatement, cst.Lambda)):
                break
        statement = ctx.enclosing(cst.BaseSmallStatement)
        if statement is None:
            return None
        reads = _reads(statement)
        return reads[0] if len(reads) == 1 else None

    def rewrite(self, node: cst.CSTNode) -> cst.CSTNode:
        for p in generated.closure([HELPER.name]):  # the op's library first
            self.need_helper(p.name, p.code)
        return self._call


RECIPES = (TableTake,)
