"""What a recipe is: a small LibCST transformer that rewrites one break site.

A recipe declares the GB codes it answers, its safety, the torch APIs it needs
and the rules/ catalog entry holding its before/after examples. Given a site it
picks the node to rewrite (``anchor``) and transforms that subtree; the engine
turns the result into an Edit and the verifier decides whether it is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar, overload

import libcst as cst

from gbfix.locate import ParsedFile
from gbfix.records import Edit, ObservedCall, Recompile, Safety, Site

Replacement = cst.CSTNode | cst.FlattenSentinel | cst.RemovalSentinel
Node = TypeVar("Node", bound=cst.CSTNode)


@dataclass(frozen=True)
class SiteContext:
    """Everything a recipe may look at: the site, its node and the parsed file."""

    site: Site
    node: cst.CSTNode  # innermost node at the break's span
    file: ParsedFile
    capabilities: frozenset[str]  # fix APIs the installed torch has (see gbfix.child)
    # Calls of user functions seen in an uncompiled run, by (path, first line of
    # the def, decorators included); filled for recipes that ask (see ``Recipe.observe``).
    observed: Mapping[tuple[Path, int], tuple[ObservedCall, ...]] = field(default_factory=dict)
    # The program's entry script, when it is a target: where a process-wide setting goes.
    entry: ParsedFile | None = None
    # For a recompile site (an RC code): the latest recompile, its failed guard first.
    recompile: Recompile | None = None

    @property
    def module(self) -> cst.Module:
        return self.file.module

    def ancestors(self, node: cst.CSTNode | None = None) -> tuple[cst.CSTNode, ...]:
        return self.file.ancestors(node or self.node)

    @overload
    def enclosing(self, kind: type[Node], /, *, node: cst.CSTNode | None = None) -> Node | None: ...
    @overload
    def enclosing(self, *types: type, node: cst.CSTNode | None = None) -> cst.CSTNode | None: ...
    def enclosing(self, *types: type, node: cst.CSTNode | None = None) -> cst.CSTNode | None:
        """``node`` itself or its nearest ancestor of one of ``types``."""
        start = node or self.node
        for n in (start, *self.ancestors(start)):
            if isinstance(n, types):
                return n
        return None

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)


@dataclass(frozen=True)
class Rewrite:
    original: cst.CSTNode
    replacement: Replacement
    message: str
    imports: tuple[tuple[str, str | None], ...] = ()
    helpers: tuple[tuple[str, str], ...] = ()  # (name, code) of module-level helpers the replacement calls
    into: ParsedFile | None = None  # the file ``original`` is in, when not the site's

    def edit(self, edit_id: int, site: Site, recipe: type[Recipe], file: ParsedFile) -> Edit:
        """The Edit; ``file``: the site's parsed file."""
        into = self.into or file
        start, end = into.span(self.original)
        return Edit(
            edit_id, site, recipe.name, recipe.safety, self.message, start, end,
            self.original, self.replacement, self.imports, self.helpers,
            None if into.source.path == site.path else into.source.path,
        )


class Decline(Exception):
    """Raised by a recipe's ``anchor``/``rewrite``/``observe``: the site is not
    one it can rewrite with the same behaviour; the message says why, for the
    report of a site left unfixed."""


class Recipe(cst.CSTTransformer):
    """Base class. Subclasses set the class attributes and implement ``anchor``,
    plus ``leave_*`` methods (or override ``rewrite``) that transform the anchor."""

    name: ClassVar[str]  # kebab-case, unique
    codes: ClassVar[tuple[str, ...]]  # GB codes answered, matched against the root cause
    safety: ClassVar[Safety] = "safe"
    requires: ClassVar[frozenset[str]] = frozenset()  # capabilities, see gbfix.child
    # What the verifier tolerates for this recipe: "order" (unsafe recipes only):
    # stdout lines / log records may come out in another order; "compile-boundary":
    # the edit moves torch.compile, so compiled outputs are not compared call for
    # call (stdout, logs and warnings still are).
    tolerates: ClassVar[frozenset[str]] = frozenset()
    # The edit changes the whole process (a config assignment), not only its span:
    # the verifier then also rejects it for a new break anywhere in the targets.
    process_wide: ClassVar[bool] = False
    # False: the edit moves its break on to a later line by design (a read kept a tensor that
    # an `if` then tests), so it is only tried joined with that line's fix (gbfix.compound).
    alone: ClassVar[bool] = True
    summary: ClassVar[str]  # one line for reports: what the rewrite does
    rule: ClassVar[str]  # rules/<rule>.md holds the examples; usually the GB code

    def __init__(self) -> None:
        super().__init__()
        self.ctx: SiteContext | None = None
        self.imports: list[tuple[str, str | None]] = []
        self.helpers: list[tuple[str, str]] = []
        self.declined: str | None = None  # why the last ``propose`` gave nothing, when the recipe said
        self.into: ParsedFile | None = None  # set by ``anchor`` when it anchors in another file than the site's

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        """The node this recipe rewrites at the site; None (or ``Decline``) if it does not apply."""
        raise NotImplementedError

    def observe(self, ctx: SiteContext) -> cst.FunctionDef | None:
        """A user function whose calls this recipe needs to see (arguments and
        results, from an uncompiled run) before it can propose; None: no need.
        The engine runs the program once to observe them and proposes again
        with ``ctx.observed`` filled."""
        return None

    def observation(self, ctx: SiteContext) -> cst.FunctionDef | None:
        """``observe`` as the engine asks it: a recipe that cannot run here, or declines, needs none."""
        if not self.requires <= ctx.capabilities:
            return None
        try:
            return self.observe(ctx)
        except Decline:
            return None

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        """Transform the anchor; default: visit it with this transformer."""
        return node.visit(self)

    def propose(self, ctx: SiteContext) -> Rewrite | None:
        self.declined, self.into = None, None
        if not self.requires <= ctx.capabilities:
            return None
        try:
            node = self.anchor(ctx)
            if node is None:
                return None
            self.ctx, self.imports, self.helpers = ctx, [], []
            new = self.rewrite(node)
        except Decline as why:
            self.declined = str(why)
            return None
        if new is None or (isinstance(new, cst.CSTNode) and new.deep_equals(node)):
            return None
        return Rewrite(
            node, new, self.summary, tuple(dict.fromkeys(self.imports)), tuple(dict.fromkeys(self.helpers)), self.into
        )

    def need_import(self, module: str, name: str | None = None) -> None:
        self.imports.append((module, name))

    @classmethod
    def finalize(cls, module: cst.Module) -> cst.Module:
        """A pass over the whole edited file, after every edit of the file is in
        (a recipe whose code depends on where it lands brings it up to date here)."""
        return module

    def need_helper(self, name: str, code: str) -> None:
        """A module-level definition the replacement calls, added after the imports
        unless the file defines ``name`` already (edits adding the same one share it)."""
        self.helpers.append((name, code))
