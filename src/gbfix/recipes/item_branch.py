"""GB0124: a scalar read whose value feeds tensor arithmetic and the test of an `if`.

    peak = x.abs().max().item()               peak = x.abs().max().detach().double()
    if peak > 1e4:                      ->    x = torch.where(peak > 1e4, x.clamp(-1e4, 1e4), x)
        x = x.clamp(-1e4, 1e4)

    if x.abs().max().item() > 1e4:      ->    x = torch.where(x.abs().max().detach().double() > 1e4, x.clamp(-1e4, 1e4), x)
        x = x.clamp(-1e4, 1e4)

``item-to-tensor`` alone declines: the `if` would then test a tensor, a break of its
own. ``branch-to-where`` alone has no tensor to test. ``item-then-where`` does both as
one edit of the function: the read as item-to-tensor writes it (in float64, so that
the test compares as Python did: `0.1` is not a float32 number), then each `if` whose
test reads the name as branch-to-where writes it, with all of that recipe's checks
(pure arms of one shape and dtype, names bound on both paths, no in-place update).
Every other use of the name must be one item-to-tensor takes; the `if` must follow the
read in the same function, and a read of an integer tensor is declined.
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from gbfix import edits
from gbfix.locate import ParsedFile
from gbfix.recipes.base import Decline, Replacement, SiteContext
from gbfix.recipes.branch import BranchToWhere
from gbfix.recipes.scalar import ItemToTensor, _Facts
from gbfix.recipes.tree import walk
from gbfix.records import Break, Cause, Frame, Site
from gbfix.sources import SourceFile

_BRANCH = "branch test"  # the partner of a use in an `if` test (see ItemToTensor._uses)


class ItemThenWhere(ItemToTensor):
    name = "item-then-where"
    codes = ("GB0124",)
    safety = "safe"
    summary = "keep a scalar read by .item() a 0-dim tensor, and the `if` that tests it a torch.where"
    rule = "GB0124"
    clamps = False  # its rewrite replaces the read alone

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        self._tests: list[cst.BaseExpression] = []
        fn = ctx.enclosing(cst.FunctionDef)
        f = _Facts(ctx)
        read = self._read(ctx, f)
        if fn is None or read is None or f.dtype(read[1]) == "int":
            return None  # an integer's float64 would promote the arms it divides
        call, source, _ = read
        test = _test_holding(ctx, call)
        if test is not None:  # inline: `if x.abs().max().item() > c:`, the value read for the test alone
            self._tests = [test]
            self._new = self._as_tensor(call, source, zero_dim=f.zero_dim(source), double=True, snapshot=False)
        elif super().anchor(ctx) is None or not self._tests:
            return None
        self._read_at = call
        return fn

    def branch_use(self, f: _Facts, name: cst.Name, assign: cst.Assign, is_float: bool) -> str | None:
        """A load of the name in the test of a later `if` of the same function."""
        ifs = [a for a in f.ctx.ancestors(name) if isinstance(a, cst.If)]
        test = next((i.test for i in ifs if any(n is name for n in walk(i.test))), None)
        if test is None:
            return None
        if f.ctx.file.span(test)[0][0] <= f.ctx.file.span(assign)[1][0]:
            return None  # the test must come after the read: its line is where the site will be
        if not any(t is test for t in self._tests):
            self._tests.append(test)
        return _BRANCH

    def double_for(self, partners: set[str]) -> bool:
        return _BRANCH in partners

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        ctx, fn = self.ctx, node
        assert isinstance(fn, cst.FunctionDef) and self._new is not None
        spans = [ctx.file.span(t) for t in self._tests]
        module = ctx.file.module.deep_replace(self._read_at, self._new)
        assert isinstance(module, cst.Module)
        # the `if`s from the last up: a rewrite above would move the lines of those below it
        for (start, end) in sorted(spans, reverse=True):
            module = self._where_at(module, start, end)
        parsed = _parsed(ctx, module.code)
        (line, col), _ = ctx.file.span(fn)
        found = [n for n in walk(parsed.module) if isinstance(n, cst.FunctionDef) and parsed.span(n)[0] == (line, col)]
        if len(found) != 1:
            raise Decline("the function could not be found again after the rewrite")
        return found[0]

    def _where_at(self, module: cst.Module, start: tuple[int, int], end: tuple[int, int]) -> cst.Module:
        """``module`` with the `if` whose test spans [start, end] rewritten by branch-to-where."""
        ctx = self.ctx
        if start[0] != end[0]:
            raise Decline("the `if` test spans several lines")
        parsed = _parsed(ctx, module.code)
        text = parsed.lines[start[0] - 1]
        if not text.isascii():
            raise Decline("the `if` line is not ASCII")  # Dynamo's columns are bytes, the site's characters
        frame = Frame(str(ctx.site.path), start[0], start[1], end[1], ctx.site.brk.leaf.name if ctx.site.brk.leaf else "")
        brk = Break(causes=(Cause("GB0170", "Data-dependent branching", ""),), stack=(frame,))
        site = Site(ctx.site.path, start[0], start[1], end[1], brk)
        inner = SiteContext(site, parsed.node_at(*start, end[1]), parsed, ctx.capabilities)
        recipe = BranchToWhere()
        rw = recipe.propose(inner)
        if rw is None:
            raise Decline(f"branch-to-where declines the `if` at line {start[0]}: {recipe.declined or 'no rewrite'}")
        for module_name, imported in rw.imports:
            self.need_import(module_name, imported)
        for name, code in rw.helpers:  # the checked select: added once, with this edit
            self.need_helper(name, code)
        edit = replace(rw, imports=(), helpers=()).edit(0, site, BranchToWhere, parsed)
        return cst.parse_module(edits.apply(parsed, [edit]))


class ItemBeforeTest(ItemThenWhere):
    """item-then-where's read alone, the `if`s that test it left to their own recipes.

    On its own the edit moves the break from the read to the first `if` (a tensor test),
    so it is never tried alone (``alone``): the engine's compound round
    (``gbfix.compound``) joins it with the edit another recipe proposes for that `if`
    (report-if for a warning, raise-if for a check, ...) and verifies the two as one edit
    of the function. Inside the body of such an `if`, a use of the name that no tensor op
    takes (a message's value: `f"loss {v:.2f}"`) becomes `v.item()`: there the test held,
    and the number is the one the original read (float64 holds a float32 read exactly).
    A read of an integer tensor stays an integer tensor (no `.double()`), and no `if` that
    tests it may hold a float literal (int64 against a float compares in float32)."""

    name = "item-before-test"
    alone = False
    summary = "keep a scalar read by .item() that an `if` tests a 0-dim tensor; the `if` gets its own recipe's fix in the same edit"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        self._tests: list[cst.BaseExpression] = []
        self._back: list[cst.Name] = []  # uses in an `if` body, read back as a number
        fn = ctx.enclosing(cst.FunctionDef)
        f = _Facts(ctx)
        read = self._read(ctx, f)
        if fn is None or read is None:
            return None
        call, source, _ = read
        self._int = f.dtype(source) == "int"
        test = _test_holding(ctx, call)
        if test is not None:  # inline: `if x.abs().max().item() > c:`
            self._tests = [test]
            self._new = self._as_tensor(call, source, zero_dim=f.zero_dim(source), double=not self._int, snapshot=False)
            self._back = _walrus_uses(ctx, call, test)
        elif ItemToTensor.anchor(self, ctx) is None or not self._tests:
            return None
        if self._int and not all(_against_integers(t) for t in self._tests):
            return None
        self._read_at = call
        return fn if self._back else call

    def branch_use(self, f: _Facts, name: cst.Name, assign: cst.Assign, is_float: bool) -> str | None:
        if (partner := super().branch_use(f, name, assign, is_float)) is not None:
            return partner
        # in the body of a later `if` that tests the name: there, the number itself
        for anc in f.ctx.ancestors(name):
            if isinstance(anc, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return None
            if isinstance(anc, cst.If) and any(isinstance(n, cst.Name) and n.value == name.value for n in walk(anc.test)):
                if f.ctx.file.span(anc)[0][0] <= f.ctx.file.span(assign)[1][0]:
                    return None
                self._back.append(name)
                return _BACK
        return None

    def double_for(self, partners: set[str]) -> bool:
        return _BRANCH in partners and not self._int

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        if node is self._read_at:
            return self._new
        back = {id(n): cst.Call(cst.Attribute(n, cst.Name("item"))) for n in self._back}
        return node.visit(edits.Replace({id(self._read_at): self._new, **back}))


_BACK = "read back"  # the partner of a use in the body of an `if` that tests the name


def _against_integers(test: cst.BaseExpression) -> bool:
    """The test holds no float literal: an int64 tensor compares with an integer as the
    Python int did, where a float literal would be compared in float32. (A name holding a
    float is not seen here; the verifier compares the outcome.)"""
    for node in walk(test):
        if isinstance(node, cst.Float | cst.Imaginary):
            return False
    return True


def _walrus_uses(ctx: SiteContext, call: cst.Call, test: cst.BaseExpression) -> list[cst.Name]:
    """`if (n := int(t.sum())) > 0: log(..., n)`: the uses of ``n`` in the body of the
    `if`, where the test held (read back as the number); Decline for a use anywhere else
    (after the `if`, ``n`` would be a tensor where it was a number)."""
    up = ctx.file.parent(call)
    if not isinstance(up, cst.NamedExpr) or not isinstance(up.target, cst.Name):
        return []
    if_node = ctx.file.parent(test)
    fn = ctx.enclosing(cst.FunctionDef, node=call)
    assert isinstance(if_node, cst.If) and fn is not None
    name = up.target.value
    inside = {id(n) for n in walk(if_node.body)}
    uses = [n for n in walk(fn) if isinstance(n, cst.Name) and n.value == name and n is not up.target]
    if any(id(n) not in inside for n in uses):
        raise Decline(f"`{name}` is used outside the body of the `if` whose test binds it")
    return uses


def _test_holding(ctx: SiteContext, call: cst.Call) -> cst.BaseExpression | None:
    """The test of the `if` that ``call`` is part of (not of a nested function or lambda)."""
    for node in ctx.ancestors(call):
        if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.BaseSuite)):
            return None
        if isinstance(node, cst.If):
            return node.test if any(n is call for n in walk(node.test)) else None
    return None


def _parsed(ctx: SiteContext, text: str) -> ParsedFile:
    encoding = ctx.file.source.encoding
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError as e:
        raise Decline("the rewrite does not encode in this file's encoding") from e
    return ParsedFile(SourceFile(ctx.site.path, data, text, encoding))


RECIPES = (ItemThenWhere, ItemBeforeTest)
