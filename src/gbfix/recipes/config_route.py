"""Config routes: switch on the Dynamo option that makes a whole class of break go away.

``.item()`` (GB0124) and ``.tolist()`` on integers (GB0033) trace into the
graph with ``capture_scalar_outputs``; ``nonzero``, boolean-mask indexing and
one-argument ``torch.where`` (GB0036) with ``capture_dynamic_output_shape_ops``;
``nn.LSTM``/``GRU``/``RNN`` (GB0014) with ``allow_rnn``. Each is one
module-level assignment after the imports of the program's entry script (the
script gbfix runs, when it is a target; else the file that breaks, when it is
a script itself). A module others import never gets one, since importing it
would change every compiled function of the program:

    torch._dynamo.config.capture_scalar_outputs = True

Module level because Dynamo reads its config when it traces (the first call),
not at ``torch.compile``: a ``config.patch`` around the compile call would
have no effect. The option is process-wide, so these are the last resort after
every source rewrite; the verifier runs the whole program with it, and the
program's own backend must compile with it too.
"""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from gbfix import generated
from gbfix.locate import ParsedFile
from gbfix.recipes.base import Decline, Recipe, SiteContext
from gbfix.recipes.layout import after_imports


class _ConfigRoute(Recipe):
    option: ClassVar[str]  # the torch._dynamo.config attribute to set
    why: ClassVar[str]  # the comment above the assignment
    safety = "safe"
    process_wide = True

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        home = program_start(ctx, "a torch._dynamo.config setting")
        # Set there already (to either value): the user decided, or it did not help.
        if f"config.{self.option}" in home.module.code:
            return None
        self.into = None if home is ctx.file else home
        return last_import(home)

    def rewrite(self, node: cst.CSTNode) -> cst.FlattenSentinel:
        module = (self.into or self.ctx.file).module
        if not binds_torch(module):
            self.need_import("torch")
        setting = cst.parse_statement(f"torch._dynamo.config.{self.option} = True\n")
        why = cst.EmptyLine(comment=cst.Comment(f"# gbfix: {self.why}; set at import: Dynamo reads it when it traces"))
        return cst.FlattenSentinel([node, setting.with_changes(leading_lines=[cst.EmptyLine(), why])])


def program_start(ctx: SiteContext, what: str) -> ParsedFile:
    """Where the program starts: the entry script when it is a target, else the site's
    file if it is a script; a module others import is declined, since importing it
    would change every compiled function of the program (``what``: the change, for the reason)."""
    if ctx.entry is not None:
        return ctx.entry
    if generated.is_script(ctx.module):
        return ctx.file
    raise Decline(
        f"{what} is process-wide: it belongs where the program starts "
        "(the entry script, before the first compiled call), not in a module others import; "
        "give gbfix the entry script as a target too"
    )


def last_import(home: ParsedFile) -> cst.SimpleStatementLine | None:
    """The file's last top-level import line, which a process-wide change follows; None
    when the imports do not end the file's head (a docstring only, an import in a block)."""
    at = after_imports(home.module)
    last = home.module.body[at - 1] if at else None
    if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], (cst.Import, cst.ImportFrom)):
        return last
    return None


def binds_torch(module: cst.Module) -> bool:
    """A top-level ``import torch`` or ``import torch.x`` binds the name ``torch``."""
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        name = module.code_for_node(alias.name)
                        if alias.asname is None and (name == "torch" or name.startswith("torch.")):
                            return True
    return False


class CaptureScalarOutputs(_ConfigRoute):
    name = "capture-scalar-outputs"
    codes = ("GB0124", "GB0033")
    option = "capture_scalar_outputs"
    requires = frozenset({"config.capture_scalar_outputs"})
    why = "trace .item() / .tolist() into the graph as symbolic scalars"
    summary = "set torch._dynamo.config.capture_scalar_outputs = True at import: .item() stays in the graph"
    rule = "GB0124"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        # A traced `assert t.max().item() < n` becomes a runtime assert of the graph:
        # a failing check raises RuntimeError, not AssertionError with its message.
        if ctx.enclosing(cst.Assert) is not None:
            raise Decline("the read feeds an assert, which would raise RuntimeError instead of AssertionError")
        return super().anchor(ctx)


class CaptureDynamicOutputShapeOps(_ConfigRoute):
    name = "capture-dynamic-output-shape-ops"
    codes = ("GB0036",)
    option = "capture_dynamic_output_shape_ops"
    requires = frozenset({"config.capture_dynamic_output_shape_ops"})
    why = "trace ops whose output shape depends on data (nonzero, boolean masks)"
    summary = "set torch._dynamo.config.capture_dynamic_output_shape_ops = True at import: data-dependent shapes stay in the graph"
    rule = "GB0036"


class AllowRnn(_ConfigRoute):
    name = "allow-rnn"
    codes = ("GB0014",)
    option = "allow_rnn"
    requires = frozenset({"config.allow_rnn"})
    why = "trace nn.LSTM / nn.GRU / nn.RNN instead of breaking the graph around them"
    summary = "set torch._dynamo.config.allow_rnn = True at import: recurrent modules are traced"
    rule = "GB0014"


class TraceAutogradOps(_ConfigRoute):
    name = "trace-autograd-ops"
    codes = ("GB9186",)
    option = "trace_autograd_ops"
    requires = frozenset({"config.trace_autograd_ops"})
    why = "trace torch.autograd.grad into the graph"
    summary = "set torch._dynamo.config.trace_autograd_ops = True at import: torch.autograd.grad stays in the graph"
    rule = "GB9186"


RECIPES = (CaptureScalarOutputs, CaptureDynamicOutputShapeOps, AllowRnn, TraceAutogradOps)
