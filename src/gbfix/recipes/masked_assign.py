"""GB0036 on a masked copy between tensors: `A[M] = B[M]`.

Code copies the elements a boolean mask selects from one tensor into another:
``eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]``
(sequence ends), ``out[mask] = expert_out[mask]``, ``self.buf[m] = new[m]``. The read
``B[M]`` has as many elements as the mask holds, a shape Dynamo cannot know while
tracing (``aten.nonzero``, GB0036); the write ``A[M] = v`` alone does not break, nor
does ``A[M] = 0.0``. ``masked-copy`` routes the statement through a module-level
helper::

    A[M] = B[M]    ->    gbfix_masked_copy(A, M, B)

which, when indexing would read the mask as a boolean mask over A's and B's leading
dimensions (a bool tensor, on their device, A and B of one dtype and as many
dimensions, their trailing sizes equal or B's 1, A not expanded), writes
``torch.where(M, B, A)`` into A with ``copy_`` (the mask given trailing dimensions
of size 1, so a mask over rows selects rows): the same values, in the same tensor
(views and aliases of A see the change, as they see ``index_put_``'s), the same
gradients (B's where the mask holds, A's old value's elsewhere). For anything else
(another dtype, which ``index_put_`` rejects; an integer or uint8 mask; shapes that
indexing rejects or broadcasts another way; not tensors) it runs ``A[M] = B[M]`` as
written, and raises or warns as the original does.

Declined: the mask, A or B may have effects (the helper evaluates the mask once, the
original twice, and A before B), augmented assignment (``A[M] += B[M]``), two
different masks, a right side that is not ``<expr>[M]``, an index that is not a lone
mask (``A[M, :3]``, a slice, a literal), several targets.
"""

from __future__ import annotations

import libcst as cst

from gbfix.generated import piece
from gbfix.recipes.analysis import pure, taken
from gbfix.recipes.base import Decline, Recipe, SiteContext
from gbfix.recipes.branch import _bare
from gbfix.recipes.guarded_index import _lookup, _same
from gbfix.recipes.tree import nodes

HELPER = piece("gbfix_masked_copy", '''\
def gbfix_masked_copy(target, mask, source):
    # Added by gbfix: `target[mask] = source[mask]` without the data-dependent shape
    # of `source[mask]`: where the boolean mask holds, `source`, elsewhere `target`
    # as it was, written into `target` in place (its views see it, as they see the
    # original's). What indexing would treat otherwise (another dtype or device,
    # shapes it rejects or broadcasts another way, a mask that is not boolean,
    # not tensors) runs as written, and raises as the original does.
    if (
        isinstance(target, torch.Tensor) and isinstance(mask, torch.Tensor) and isinstance(source, torch.Tensor)
        and mask.dtype == torch.bool and target.dtype == source.dtype
        and target.device == mask.device == source.device
        and 1 <= mask.dim() <= target.dim() == source.dim()
        and mask.shape == target.shape[:mask.dim()] == source.shape[:mask.dim()]
        and all(s in (1, t) for s, t in zip(source.shape[mask.dim():], target.shape[mask.dim():]))
        and all(step != 0 or n <= 1 for step, n in zip(target.stride(), target.shape))  # copy_ rejects an expanded target
    ):
        trailing = (1,) * (target.dim() - mask.dim())
        target.copy_(torch.where(mask.reshape(mask.shape + trailing), source, target))
    else:
        target[mask] = source[mask]
''')

# Indexes that are not a mask: literals, tuples of several indices, `...`, lists.
_NOT_MASKS = (cst.Integer, cst.Float, cst.SimpleString, cst.Tuple, cst.Ellipsis, cst.List)


class MaskedCopy(Recipe):
    name = "masked-copy"
    codes = ("GB0036",)
    safety = "safe"
    rule = "GB0036"
    summary = "A[M] = B[M] -> gbfix_masked_copy(A, M, B): torch.where(M, B, A) written into A, no data-dependent shape"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        statement = ctx.enclosing(cst.BaseSmallStatement)
        if isinstance(statement, cst.AugAssign) and isinstance(statement.target, cst.Subscript):
            raise Decline("augmented assignment (`A[M] += B[M]`): it reads A[M] too, and casts another way")
        if not isinstance(statement, cst.Assign) or not isinstance(statement.targets[-1].target, cst.Subscript):
            return None
        if len(statement.targets) != 1:
            raise Decline("several targets (`A[M] = C[M] = B[M]`)")
        target, value = statement.targets[0].target, _bare(statement.value)
        written = _lookup(target)
        if written is None:
            if not isinstance(value, cst.Subscript):
                return None  # not a copy between subscripts: the break is another read
            raise Decline("the target's index is not a lone mask (`A[M, :3]`, a slice): the helper copies whole rows")
        a, mask = written
        read = _lookup(value)
        if read is None:
            if any(_same(r[1], mask) for r in map(_lookup, nodes(value, cst.Subscript)) if r is not None):
                raise Decline("the right side is not `B[M]`: only a copy of the masked elements is a where")
            return None  # the break is not the masked read
        b, other = read
        if not _same(mask, other):
            raise Decline("the two sides index with different masks")
        if isinstance(_bare(mask), _NOT_MASKS):
            raise Decline("the index is a literal or a tuple, not a mask")
        if not all(pure(e) for e in (a, mask, b)):
            raise Decline("the mask, the target or the source may have effects: the helper evaluates the mask once")
        if taken(ctx, HELPER.name):
            raise Decline(f"the module binds {HELPER.name} to something else")
        self._call = cst.Call(cst.Name(HELPER.name), [cst.Arg(_bare(a)), cst.Arg(_bare(mask)), cst.Arg(_bare(b))])
        return statement

    def rewrite(self, node: cst.CSTNode) -> cst.CSTNode:
        self.need_helper(HELPER.name, HELPER.code)
        return cst.Expr(self._call, semicolon=node.semicolon)


RECIPES = (MaskedCopy,)
