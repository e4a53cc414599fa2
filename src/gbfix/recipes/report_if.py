"""GB0170: an `if` on a tensor whose body only reports: a print, a warning, a log record.

    if grad_norm > 10.0:                         ->  gbfix_print_if(grad_norm > 10.0, "iter {}: norm {:.3f}", it, grad_norm)
        print(f"iter {it}: norm {grad_norm:.3f}")

    if fully_masked.any():                       ->  pred = fully_masked.any()
        warnings.warn(f"{int(fully_masked.sum())} rows")   gbfix_warn_if(pred, "{} rows", fully_masked.sum(), cast={0: "int"})

    if aux > 2.0:                                ->  gbfix_log_if(aux > 2.0, "moe", "info", "high aux loss %.3f", aux)
        logging.getLogger("moe").info("high aux loss %.3f", aux)

Why: model code reports on what a tensor holds (a NaN, a collapsed router, a large
gradient norm), and Dynamo ends the graph at the `if`, whose truth value is only known
at run time. The branch recipes cannot take it: a report can neither run on both arms
(torch.where) nor inside torch.cond. So the `if` and its report become one call of a
helper (``op_helpers``: gbfix_print_if, gbfix_warn_if, gbfix_log_if) that hands the
tensor and the message's values to an op of the graph. At run time the op tests the
tensor with Python's truth value (a tensor of several elements raises as the `if` did)
and only then makes the message and reports it: the same text (the values formatted
there as the f-string, `%`, str.format or `+` would; `int(t)`, `float(t)`, `t.item()`,
`str(t)` and `repr(t)` in the message applied there, as ``cast``: ``message``, which
raise-if shares), on the same stream, in order with the graph's other reports (the op
writes the sink of ``op_helpers``). Uncompiled the helper is the `if`: it tests the
value and reports only then.

Reports taken: the builtin ``print`` (as print-to-hop takes it), ``warnings.warn`` (as
warn-to-op takes it), a Logger method (as logger-to-op takes it), and the gbfix_print /
gbfix_warn / gbfix_log calls those recipes wrote in an earlier round, and a call of a
function of the program that only reports (``report_function``: a `warn_once` wrapper),
which the op of gbfix_call_if calls at run time. A warning names
the line of its call, so each report stays on its line: where the `if` line would
otherwise go, ``pred = <test>`` takes it (an `else:` line: ``torch.logical_not(pred)``),
and the rewrite is declined where a warning would move. A Python part of the test stays
an `if` around the rewrite (``SplitTest``).

The message's values are now evaluated whenever the `if` runs, not only where its test
holds: each must have no effect and raise no error (``message.risk``): names bound before the
`if`, attributes, literals, comparisons and `+ - *`, a few total tensor methods (`sum`,
`any`, `isnan`, ...), or a part of the test itself. Besides reports, an `if` without `else:`
may assign names, as branch-to-where takes an arm of assignments (`if not torch.isfinite(loss):
logger.warning(...); loss = torch.zeros_like(loss)`): each becomes a select by the test,
bound first (`pred = ...`), in its place among the reports; and it may end in `return a`
where `return b` follows the `if`: one `return <select>(pred, a, b)` after the reports. An
`else:` may hold what this recipe wrote for an `elif` of reports (its tests join the `if`'s).
Declined: an `if` whose `else:` is an `elif` (the `elif` is taken first), a body or `else:`
with anything else, a Python part of the test after the tensor one (tested first, it would
skip the tensor's truth value and its error), a test of several tensor operands not each
shown to hold one element (``torch.logical_and`` would broadcast them)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import cast

import libcst as cst
import libcst.matchers as m

from gbfix import generated
from gbfix.recipes import message, op_helpers
from gbfix.recipes.analysis import (
    COMPARISONS,
    bound_before,
    called,
    is_builtin,
    is_module_global,
    is_torch_call,
    name_of,
    pure,
    qualified_names,
    scope_of,
    single_binding,
    taken,
)
from gbfix.recipes.base import Decline, Recipe, Replacement, SiteContext
from gbfix.recipes.branch import (
    WHERE,
    SplitTest,
    _bare,
    _is_elif,
    _returned,
    _select_arm,
    _static_value,
    _where_steps,
    fit,
    fresh,
    general_update,
    make_call,
    site_branch,
)
from gbfix.recipes.leaf_helpers import LOGGER_METHODS
from gbfix.recipes.logging_call import (
    LoggerToOp,
    defines_helper,
    helper_fits,
    not_a_plain_value,
    not_text_or_number,
    observed_owner,
)
from gbfix.recipes.print_call import PrintToHop
from gbfix.recipes.report_function import report_function
from gbfix.recipes.tree import keyword_arg, names_outside, variable_names, walk
from gbfix.recipes.vocabulary import FULL_REDUCTIONS
from gbfix.recipes.warn_call import WarnRecipe, _bind, _is_chain

_PRINT, _WARN, _LOG, _CALL = op_helpers.PRINT_IF.name, op_helpers.WARN_IF.name, op_helpers.LOG_IF.name, op_helpers.CALL_IF.name
# What an earlier round wrote for a report (print-to-op, warn-to-op, logger-to-op): its kind.
_WRITTEN = {op_helpers.PRINT.name: "print", op_helpers.WARN.name: "warn", op_helpers.LOG.name: "log"}
# What this recipe wrote for an `elif` of reports, in the `else:` of the `if` before it:
# the helper, and how many arguments come before the message's values (after the test).
_WRITTEN_IF = {_PRINT: 1, _WARN: 1, _LOG: 2, _CALL: 1}
_TRUE = cst.Name("True")


@dataclass
class _Report:
    """One report of the `if`, as its conditional helper takes it."""

    call: cst.Call  # as the `if` wrote it
    helper: str  # gbfix_print_if / gbfix_warn_if / gbfix_log_if / gbfix_call_if
    head: list[cst.BaseExpression]  # the template (print, warn); the logger and the method (log); the function (call)
    values: list[cst.BaseExpression]  # the message's values (percent: the operand of `%`)
    keywords: dict[str, cst.BaseExpression] = field(default_factory=dict)
    cast: dict[int, str] = field(default_factory=dict)  # index of a value (a `%` tuple's item) -> its cast
    star: int | None = None  # the index of a `*values` argument (a log call's)
    line_bound: bool = False  # a warning naming the line of its call (stacklevel 1)
    inner: cst.BaseExpression | None = None  # the own test of a conditional call an earlier round wrote

    @property
    def percent(self) -> bool:
        return self.keywords.get("percent") is _TRUE


class ReportIf(Recipe):
    name = "report-if"
    codes = ("GB0170",)
    safety = "safe"
    rule = "GB0170"
    requires = frozenset({"register_fake"})
    summary = (
        "`if <tensor>: <print / warnings.warn / logger call / a function that only reports>` -> gbfix_print_if /"
        " gbfix_warn_if / gbfix_log_if / gbfix_call_if: an op in the graph tests the tensor and reports at run time"
    )

    def observe(self, ctx: SiteContext) -> cst.FunctionDef | None:
        """The function holding the `if`, when a report's argument is one of its
        parameters: an uncompiled run tells text, numbers and tensors (what the op
        takes) from anything else, and a warning's text from a Warning."""
        try:
            found = _report_if(ctx)
        except Decline:
            return None
        names = (n for call in (found[2] if found else ()) for a in call.args for n in walk(a.value) if _read_whole(ctx, n))
        return next(filter(None, (observed_owner(ctx, n) for n in names)), None)

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        found = _report_if(ctx)
        if found is None:
            return None
        if_node, test, calls, self._selects, self._ret = found
        if isinstance(if_node.orelse, cst.If):
            raise Decline("an `elif`: its test runs only where the `if`'s does not hold")
        if if_node.orelse is not None and test.prefix is not None:
            raise Decline("an `else:` after a Python part of the test")
        if if_node.orelse is not None and _is_elif(ctx, if_node) and not (
            pure(test.cond) and isinstance(if_node.body, cst.IndentedBlock) and isinstance(if_node.orelse.body, cst.IndentedBlock)
        ):
            raise Decline("an `else:` after an `elif` whose test may have effects (its `else:` evaluates it again), or on one line")
        if not test.leading:
            raise Decline("a Python part of the test comes after the tensor one: tested first, it would skip the tensor's truth value")
        why = _one_truth(test, scope_of(ctx, if_node))
        if why:
            raise Decline(why)
        self._tensors = _tensors(test)
        reports = {id(c): self._report(ctx, c) for c in calls}
        for r in reports.values():
            if r.helper != _LOG:  # logger-to-op's match checked a log call's values
                for value in message.flat(r.values, r.percent):
                    why = None if any(value.deep_equals(t) for t in self._tensors) else not_a_plain_value(ctx, value)
                    if why:
                        raise Decline(f"`{ctx.code(value)}` in `{ctx.code(r.call)}` {why}: the op takes text, numbers, tensors and None")
            inner = [] if r.inner is None or _bound_earlier_in_else(ctx, if_node, r.inner, r.call) else [r.inner]
            for node in [*r.head, *r.values, *r.keywords.values(), *inner]:
                why = message.risk(ctx, node, if_node, test.cond)
                if why:
                    raise Decline(f"`{ctx.code(node)}` in `{ctx.code(r.call)}` {why}: it would be evaluated where the test does not hold")
        self._helpers = list(dict.fromkeys(r.helper for r in reports.values()))
        if not all(helper_fits(ctx, h) for h in self._helpers):
            return None
        self._selected: dict[int, cst.BaseSmallStatement] = {}
        self._plan = self._layout(ctx, if_node, test, reports)
        replaced: cst.CSTNode = if_node if self._ret is None else self._returns(ctx, if_node, test)
        if self._torch and not generated.imports_torch(ctx.module):
            raise Decline("the rewrite calls torch.logical_not, and the module does not import torch at module level")
        return replaced

    def rewrite(self, node: cst.CSTNode) -> Replacement | None:
        for p in generated.closure(self._helpers):
            self.need_helper(p.name, p.code)
        if self._torch:
            self.need_import("torch")
        return self._plan

    # --- each report as its helper takes it ---------------------------------------

    def _report(self, ctx: SiteContext, call: cst.Call) -> _Report:
        kind = _kind(ctx, call)
        if kind == "print":
            return self._print(ctx, call)
        if kind == "warn":
            return self._warn(ctx, call)
        if kind == "call":  # a function that only reports, called from the op as it is
            return self._call(ctx, call)
        if kind == "written if":
            return self._written_if(ctx, call)
        assert kind == "log"
        return self._log(ctx, call)

    def _written_if(self, ctx: SiteContext, call: cst.Call) -> _Report:
        """`gbfix_log_if(c2, logger, "info", ...)`: what this recipe wrote for an `elif` of
        reports in an earlier round, now in the `else:` of the `if` before it. It reports
        where both tests say so: its own test joins the `if`'s (``_small``), and is now
        evaluated whenever the `if` runs, so it must be pure."""
        helper = cast(cst.Name, call.func).value
        positional = [a for a in call.args if a.keyword is None]
        if any(a.star for a in positional[: 1 + _WRITTEN_IF[helper]]) or len(positional) < 1 + _WRITTEN_IF[helper]:
            raise Decline(f"`{ctx.code(call)}` is not a call report-if writes")
        inner = positional[0].value
        if not pure(inner):
            raise Decline(f"`{ctx.code(inner)}` may have effects: it would be evaluated whenever the `if` runs")
        head = [a.value for a in positional[1 : 1 + _WRITTEN_IF[helper]]]
        r = _Report(call, helper, head, [a.value for a in positional[1 + _WRITTEN_IF[helper] :]], inner=inner)
        stars = [i for i, a in enumerate(positional[1 + _WRITTEN_IF[helper] :]) if a.star]
        r.star = stars[0] if stars else None
        r.keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        level = r.keywords.get("stacklevel")
        r.line_bound = helper == _WARN and (level is None or (isinstance(level, cst.Integer) and level.value == "1"))
        return r

    def _print(self, ctx: SiteContext, call: cst.Call) -> _Report:
        if isinstance(call.func, cst.Name) and call.func.value == op_helpers.PRINT.name:
            args = call.args  # gbfix_print(fmt, *values): what print-to-op wrote
            if not args or any(a.keyword or a.star for a in args) or not isinstance(args[0].value, cst.SimpleString):
                raise Decline(f"`{ctx.code(call)}` is not a call print-to-op writes")
            fmt: cst.BaseExpression = args[0].value
            values = [a.value for a in args[1:]]
        else:
            hop = PrintToHop()
            if _delegated(ctx, call, hop.anchor) is None:
                raise Decline(f"`{ctx.code(call)}` is not a print print-to-hop takes")
            fmt, *values = [a.value for a in hop.replacement().args]
        r = _Report(call, _PRINT, [fmt], values)
        percent = False
        if isinstance(fmt, cst.SimpleString) and fmt.evaluated_value == "{!s}" and len(values) == 1:
            # print(<a message>): a `%` or str.format of a literal is made at run time too
            text, parts, percent = message.template(ctx, call, values[0])
            if text is not None:
                r.head, r.values = [message.text_literal(text)], parts
        if percent:
            r.keywords["percent"] = _TRUE
        r.cast = message.uncast(ctx, r.values, percent)
        return r

    def _warn(self, ctx: SiteContext, call: cst.Call) -> _Report:
        written = isinstance(call.func, cst.Name) and call.func.value == op_helpers.WARN.name
        if written or _delegated(ctx, call, WarnRecipe().match) is not None:
            bound = _bind(call)  # gbfix_warn takes warnings.warn's parameters
        else:
            bound = None
        if bound is None or "message" not in bound:
            raise Decline(f"`{ctx.code(call)}`: a warning warn-to-op does not take (a Warning instance, a stacklevel that is no number, ...)")
        category, stacklevel = bound.get("category"), bound.get("stacklevel")
        if category is not None and not _is_chain(category.value):
            raise Decline(f"`{ctx.code(call)}`: a category that is not a name")
        level = 1
        if stacklevel is not None:
            level = int(stacklevel.value.value, 0) if isinstance(stacklevel.value, cst.Integer) else 0
            if level < 1:
                raise Decline(f"`{ctx.code(call)}`: a stacklevel that is no number from 1 up")
        said = bound["message"].value
        text, values, percent = message.template(ctx, call, said)
        if text is None:  # the message as it is: text (a Warning instance would bring its own category)
            why = not_text_or_number(ctx, said)
            if why:
                raise Decline(f"the message `{ctx.code(said)}` {why}")
            text, values = "{}", [said]
        r = _Report(call, _WARN, [message.text_literal(text)], values, line_bound=level == 1)
        if percent:
            r.keywords["percent"] = _TRUE
        if category is not None:
            r.keywords["category"] = category.value
        if stacklevel is not None:
            r.keywords["stacklevel"] = stacklevel.value
        r.cast = message.uncast(ctx, r.values, percent)
        return r

    def _call(self, ctx: SiteContext, call: cst.Call) -> _Report:
        r = _Report(call, _CALL, [call.func], [a.value for a in call.args])
        r.cast = message.uncast(ctx, r.values, False)
        for i, value in enumerate(r.values):
            # a tensor would reach the function detached (str() of it loses its grad_fn)
            why = None if i in r.cast else not_text_or_number(ctx, value)
            if why:
                raise Decline(f"`{ctx.code(value)}` in `{ctx.code(call)}` {why}: the function gets text and numbers")
        return r

    def _log(self, ctx: SiteContext, call: cst.Call) -> _Report:
        if isinstance(call.func, cst.Name):  # gbfix_log(logger, method, *args, template=...): what logger-to-op wrote
            written = call
        else:
            recipe = LoggerToOp()
            recipe.tensors = tuple(self._tensors)
            if _delegated(ctx, call, recipe.match) is None:
                raise Decline(f"`{ctx.code(call)}` is not a logger call logger-to-op takes (keyword arguments, ...)")
            written = recipe.reroute(call)
        positional = [a for a in written.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in written.args if a.keyword is not None}
        if len(positional) < 3 or positional[0].star or positional[1].star or set(keywords) - {"template"}:
            raise Decline(f"`{ctx.code(call)}` is not a call logger-to-op writes")
        if any(a.star == "**" for a in positional):
            raise Decline(f"`{ctx.code(call)}` has `**` arguments")
        stars = [i for i, a in enumerate(positional[2:]) if a.star]
        r = _Report(call, _LOG, [positional[0].value, positional[1].value], [a.value for a in positional[2:]])
        r.star = stars[0] if len(stars) == 1 else None
        if len(stars) > 1:
            raise Decline(f"`{ctx.code(call)}` has several starred arguments")
        if "template" in keywords:
            r.keywords["template"] = keywords["template"]
        r.cast = message.uncast(ctx, r.values, False, r.star)
        return r

    # --- the rewrite ----------------------------------------------------------------

    def _layout(self, ctx: SiteContext, if_node: cst.If, test: SplitTest, reports: dict[int, _Report]) -> Replacement:
        """What goes in place of the `if`: each report made conditional, on the line it
        was on (a warning names it)."""
        (line, column), _ = ctx.file.span(if_node)
        body, orelse = if_node.body, if_node.orelse
        in_body = [reports[id(c)] for c in _calls(body)]
        in_else = [reports[id(c)] for c in _calls(orelse.body)] if isinstance(orelse, cst.Else) else []
        warns = any(r.line_bound for r in in_body + in_else)
        if warns and ctx.file.span(if_node.test)[1][0] != line:
            raise Decline("the test spans several lines: the warning would name another line")
        cond: cst.BaseExpression = test.tensor
        # torch.logical_* the rewrite writes (a `not`, an `else:`), where the test had no torch
        self._torch = orelse is not None or "torch" in variable_names(cond) and "torch" not in variable_names(test.cond)
        # an update the body makes (report-if's _report_if took only such): the test is
        # bound first where it may read what an update changes
        updated = {name_of(sm.targets[0].target) for sm in _smalls(body) if isinstance(sm, cst.Assign)}
        reread = bool(updated & variable_names(test.cond))
        bind = test.prefix is None and not _is_elif(ctx, if_node) and isinstance(body, cst.IndentedBlock) and (
            len(reports) > 1 or warns or reread or bool(self._selects) or self._ret is not None
        )
        if (self._selects or self._ret is not None) and not bind:
            raise Decline("an assignment or a return beside the report, after a Python part of the test or on the `if` line")
        if reread and not bind:
            changed: set[str | None] = set()
            for sm in _smalls(body) + (_smalls(orelse.body) if isinstance(orelse, cst.Else) else []):
                if isinstance(sm, cst.Assign):
                    changed.add(name_of(sm.targets[0].target))
                elif changed & variable_names(test.cond):
                    raise Decline("a report comes after an update of what the test reads, and would test the updated value")
        if len(reports) > 1 and not bind and not pure(test.cond):
            raise Decline("the test may have effects, and each report would evaluate it")
        if test.prefix is not None or _is_elif(ctx, if_node):
            block = self._block(body, cond, reports, column + 4)
            if test.kind == "or":
                # `if P or c: B` -> `if P: B` + `else: <B if c>`: the reports move to new lines
                if warns:
                    raise Decline("an `or` test: the warnings in its new `else:` would name other lines")
                return if_node.with_changes(test=test.prefix, orelse=cst.Else(body=block))
            if test.prefix is not None:  # `if P and c: B` -> `if P: <B if c>`, on the same lines
                return if_node.with_changes(test=test.prefix, body=block)
            if isinstance(orelse, cst.Else):
                # `elif c: B else: C` -> `else: <B if c>`, `not_pred = torch.logical_not(c)` on the
                # `else:` line, `<C if not_pred>`: every report keeps its line
                assert isinstance(block, cst.IndentedBlock) and isinstance(orelse.body, cst.IndentedBlock)
                name = fresh(scope_of(ctx, if_node), "not_pred", set())
                tail = [_assign(name, make_call("torch.logical_not", cond), orelse.leading_lines, orelse.body.header)]
                tail += self._lines(orelse.body, cst.Name(name), reports, column + 4)
                block = block.with_changes(body=[*block.body, *tail])
            return cst.Else(body=block, leading_lines=if_node.leading_lines)  # `elif c: B` -> `else: <B if c>`
        lines: list[cst.SimpleStatementLine] = []
        if bind:
            # `pred = <test>` takes the `if` line: each report keeps its own
            name = fresh(scope_of(ctx, if_node), "pred", set())
            lines.append(_assign(name, cond, if_node.leading_lines, body.header))
            cond = cst.Name(name)
            self._pred = cond
            self._selected = self._select(ctx, if_node, replace(test, tensor=cond))
            lines += self._lines(body, cond, reports, column)
        else:  # one print or log record (lines do not matter), or a one-line `if c: <reports>`
            lines += self._lines(body, cond, reports, column)
            header = [cst.EmptyLine(comment=body.header.comment)] if isinstance(body, cst.IndentedBlock) and body.header.comment else []
            lines[0] = lines[0].with_changes(leading_lines=[*if_node.leading_lines, *header, *lines[0].leading_lines])
            if isinstance(body, cst.SimpleStatementSuite):
                lines[0] = lines[0].with_changes(trailing_whitespace=body.trailing_whitespace)
        if isinstance(orelse, cst.Else):
            negated: cst.BaseExpression = make_call("torch.logical_not", cond)
            else_lines = self._lines(orelse.body, negated, reports, column)
            if isinstance(orelse.body, cst.IndentedBlock):
                if any(r.line_bound for r in in_else):
                    if not isinstance(cond, cst.Name):
                        raise Decline("an `else:` of warnings after a one-line `if`: the warnings would name other lines")
                    # the `else:` line takes `not_pred = torch.logical_not(pred)`
                    name = fresh(scope_of(ctx, if_node), "not_pred", {cond.value})
                    else_lines = [_assign(name, negated, orelse.leading_lines, orelse.body.header)]
                    else_lines += self._lines(orelse.body, cst.Name(name), reports, column)
                else:
                    header = [cst.EmptyLine(comment=orelse.body.header.comment)] if orelse.body.header.comment else []
                    lead = [*orelse.leading_lines, *header, *else_lines[0].leading_lines]
                    else_lines[0] = else_lines[0].with_changes(leading_lines=lead)
            else:
                else_lines[0] = else_lines[0].with_changes(leading_lines=orelse.leading_lines, trailing_whitespace=orelse.body.trailing_whitespace)
            lines += else_lines
        return lines[0] if len(lines) == 1 else cst.FlattenSentinel(lines)

    def _select(self, ctx: SiteContext, if_node: cst.If, test: SplitTest) -> dict[int, cst.BaseSmallStatement]:
        """The assignments beside the reports, each a select by the bound test (`loss =
        torch.where(pred, torch.zeros_like(loss), loss)`), as branch-to-where writes an
        arm of assignments: by id of the assignment. A report after one reads the
        selected value, which is the assigned one where the test holds, as before."""
        if not self._selects:
            return {}
        steps = _where_steps(ctx, if_node, test, self._selects, in_place=False)
        if steps is None or len(steps) != len(self._selects):
            raise Decline(f"the `if` does more than report: `{ctx.code(self._selects[0]).strip()}`")
        if any(isinstance(st, cst.Assign) and isinstance(st.value, cst.Call) and name_of(st.value.func) == WHERE.name for st in steps):
            if taken(ctx, WHERE.name):
                raise Decline(f"the module binds {WHERE.name} to something else")
            self._helpers.append(WHERE.name)
        return {id(a): step for a, step in zip(self._selects, steps)}

    def _returns(self, ctx: SiteContext, if_node: cst.If, test: SplitTest) -> cst.IndentedBlock:
        """`if c: <reports>; return a` + `return b` (the statement after the `if`): the
        block with both replaced by the `if`'s rewrite ending in `return <select>(pred, a, b)`,
        the select branch-to-where would write for `a if c else b` (``self._plan`` set)."""
        block = ctx.file.parent(if_node)
        i = block.body.index(if_node) if isinstance(block, cst.IndentedBlock) else -1
        following = block.body[i + 1] if 0 <= i < len(block.body) - 1 else None
        b = _returned(cst.IndentedBlock(body=[following])) if isinstance(following, cst.SimpleStatementLine) else None
        assert isinstance(block, cst.IndentedBlock) and self._ret is not None and self._ret.value is not None
        if b is None or following is None:
            raise Decline("the `if` returns, and no `return` of a value follows it")
        why, func, a, b = _select_arm(ctx, if_node, replace(test, tensor=self._pred), self._ret.value, b, False)
        if why:
            raise Decline(why)
        if func == WHERE.name:
            if taken(ctx, WHERE.name):
                raise Decline(f"the module binds {WHERE.name} to something else")
            self._helpers.append(WHERE.name)
        ret = cst.Return(value=make_call(func, self._pred, a, b))
        lines = list(self._plan.nodes) if isinstance(self._plan, cst.FlattenSentinel) else [self._plan]
        last = cast(cst.SimpleStatementLine, lines[-1])
        lines[-1] = last.with_changes(
            body=[fit(ret, ctx.file.span(if_node)[0][1])],
            leading_lines=[*last.leading_lines, *following.leading_lines],
            trailing_whitespace=following.trailing_whitespace,
        )
        self._plan = block.with_changes(body=[*block.body[:i], *lines, *block.body[i + 2 :]])
        return block

    def _block(self, suite: cst.BaseSuite, cond: cst.BaseExpression, reports: dict[int, _Report], column: int) -> cst.BaseSuite:
        """``suite`` with each report made conditional, in place."""
        if isinstance(suite, cst.SimpleStatementSuite):  # `if c: <reports>` stays one line
            return suite.with_changes(body=[self._small(sm, cond, reports, None) for sm in suite.body])
        assert isinstance(suite, cst.IndentedBlock)
        return suite.with_changes(body=self._lines(suite, cond, reports, column))

    def _lines(self, suite: cst.BaseSuite, cond: cst.BaseExpression, reports: dict[int, _Report], column: int) -> list[cst.SimpleStatementLine]:
        """The lines of an arm, each report made conditional (comments and line ends kept)."""
        if isinstance(suite, cst.SimpleStatementSuite):  # one line, as it was
            return [cst.SimpleStatementLine(body=[self._small(sm, cond, reports, None) for sm in suite.body])]
        out = []
        for stmt in suite.body:
            assert isinstance(stmt, cst.SimpleStatementLine)  # _report_if took only such lines
            out.append(stmt.with_changes(body=[self._small(sm, cond, reports, column) for sm in stmt.body]))
        return out

    def _small(self, small: cst.BaseSmallStatement, cond: cst.BaseExpression, reports: dict[int, _Report], column: int | None) -> cst.BaseSmallStatement:
        """The conditional call of the report ``small`` makes, laid out one argument a line
        when it is long (not on a one-line `if`: ``column`` None)."""
        if id(small) in self._selected:
            return self._selected[id(small)]
        if not (isinstance(small, cst.Expr) and id(small.value) in reports):
            return small  # an update that is the identity where the test is false: as written
        r = reports[id(small.value)]
        if r.inner is not None:
            cond = make_call("torch.logical_and", cond, r.inner)
        args = [cst.Arg(_bare(cond)), *(cst.Arg(h) for h in r.head)]
        args += [cst.Arg(v, star="*" if i == r.star else "") for i, v in enumerate(r.values)]
        keywords = {"cast": message.cast_argument(r.cast), **r.keywords} if r.cast else r.keywords
        args += [keyword_arg(k, v) for k, v in keywords.items()]
        small = small.with_changes(value=cst.Call(cst.Name(r.helper), args))
        return small if column is None else fit(small, column)


def _read_whole(ctx: SiteContext, node: cst.CSTNode) -> bool:
    """A name whose own value a report takes (not `self` in `self.logger`, not a callee)."""
    up = ctx.file.parent(node)
    return isinstance(node, cst.Name) and not (isinstance(up, cst.Attribute) and up.value is node) and not (
        isinstance(up, cst.Call) and up.func is node
    )


def _delegated(ctx: SiteContext, call: cst.Call, match: Callable[[SiteContext], cst.CSTNode | None]) -> cst.CSTNode | None:
    """What the recipe of the report's own break (print-to-hop, warn-to-op, logger-to-op)
    makes of ``call``; its reason, with the call, when it declines."""
    try:
        return match(replace(ctx, node=call))
    except Decline as why:
        raise Decline(f"`{ctx.code(call)}`: {why}") from None


def _assign(name: str, value: cst.BaseExpression, leading: tuple[cst.EmptyLine, ...] | list[cst.EmptyLine], header: cst.TrailingWhitespace) -> cst.SimpleStatementLine:
    """`name = value` on the line of an `if` or an `else:` (its comments kept)."""
    return cst.SimpleStatementLine(
        [cst.Assign([cst.AssignTarget(cst.Name(name))], _bare(value))], leading_lines=leading, trailing_whitespace=header
    )


# --- what the `if` holds --------------------------------------------------------------


def _report_if(
    ctx: SiteContext,
) -> tuple[cst.If, SplitTest, list[cst.Call], list[cst.Assign], cst.Return | None] | None:
    """The site's `if`, its test, and the report calls of its arms; None when no arm
    reports; ``Decline`` when an arm does anything else too."""
    found = site_branch(ctx)
    if found is None or not isinstance(found[0], cst.If):
        return None
    if_node, test = found[0], found[1]
    arms = [if_node.body] + ([if_node.orelse.body] if isinstance(if_node.orelse, cst.Else) else [])
    statements = [s for arm in arms if isinstance(arm, cst.IndentedBlock) for s in arm.body]
    smalls = [sm for arm in arms for sm in _smalls(arm)]
    reports = [sm.value for sm in smalls if isinstance(sm, cst.Expr) and isinstance(sm.value, cst.Call) and _kind(ctx, sm.value)]
    if not reports:
        return None
    compound = next((s for s in statements if not isinstance(s, cst.SimpleStatementLine)), None)
    # besides reports, the body may update a tensor in a way that leaves it as it is where
    # the test is false (`x = x.masked_fill(M, 0)` under `if M.any():`): it then runs always
    updates = {id(sm) for sm in _smalls(if_node.body) if general_update(ctx, if_node, test.cond, sm)}
    # or any other assignment of a name, in an `if` without `else:`: a torch.where picks
    # its value (``ReportIf._selects``; branch-to-where's checks)
    selects = [
        sm for sm in _smalls(if_node.body)
        if if_node.orelse is None and id(sm) not in updates and m.matches(sm, m.Assign(targets=[m.AssignTarget(target=m.Name())]))
    ]
    # an `else:` may bind a name nothing outside it reads to a pure test of tensors (the
    # `not_pred = torch.logical_not(c)` this recipe wrote for an `elif` with an `else:`): it runs always
    if isinstance(if_node.orelse, cst.Else):
        outside = names_outside(scope_of(ctx, if_node), if_node.orelse)
        updates |= {
            id(sm) for sm in _smalls(if_node.orelse.body)
            if m.matches(sm, m.Assign(targets=[m.AssignTarget(target=m.Name())])) and pure(sm.value)
            and isinstance(sm.value, cst.Call) and is_torch_call(sm.value) and name_of(sm.targets[0].target) not in outside
            and not bound_before(ctx, cast(str, name_of(sm.targets[0].target)), if_node)
        }
    # and end in `return a`, when `return b` follows the `if` (``ReportIf._returns``)
    last = _smalls(if_node.body)[-1]
    ret = last if if_node.orelse is None and isinstance(last, cst.Return) and last.value is not None else None
    other = next(
        (
            sm for sm in smalls
            if not (isinstance(sm, cst.Expr) and any(sm.value is c for c in reports))
            and id(sm) not in updates and sm not in selects and sm is not ret
        ),
        None,
    )
    if compound is not None or other is not None:
        shown = ctx.code(other).strip() if other is not None else ctx.code(compound).splitlines()[0].strip()
        raise Decline(f"the `if` does more than report: `{shown}`")
    return if_node, test, reports, cast(list[cst.Assign], selects), ret


def _bound_earlier_in_else(ctx: SiteContext, if_node: cst.If, name: cst.BaseExpression, call: cst.Call) -> bool:
    """``name`` is bound in the `if`'s `else:` before ``call``: by one of the temporaries
    ``_report_if`` let run always (`not_pred = torch.logical_not(c)`), which stay before it."""
    if not isinstance(name, cst.Name) or not isinstance(if_node.orelse, cst.Else):
        return False
    line = ctx.file.span(call)[0][0]
    return any(
        isinstance(sm, cst.Assign) and name_of(sm.targets[0].target) == name.value and ctx.file.span(sm)[0][0] < line
        for sm in _smalls(if_node.orelse.body)
    )


def _smalls(suite: cst.BaseSuite) -> list[cst.BaseSmallStatement]:
    if isinstance(suite, cst.SimpleStatementSuite):
        return list(suite.body)
    return [sm for line in suite.body if isinstance(line, cst.SimpleStatementLine) for sm in line.body]


def _calls(suite: cst.BaseSuite) -> list[cst.Call]:
    return [sm.value for sm in _smalls(suite) if isinstance(sm, cst.Expr) and isinstance(sm.value, cst.Call)]


def _kind(ctx: SiteContext, call: cst.Call) -> str | None:
    """"print", "warn" or "log" for a report call, or one an earlier round wrote; "call"
    for a call of a function that only reports (``report_function``); else None."""
    func = call.func
    if isinstance(func, cst.Name):
        if func.value == "print" and is_builtin(ctx, func):
            return "print"
        if func.value in _WRITTEN and is_module_global(ctx, func) and defines_helper(ctx, func.value):
            return _WRITTEN[func.value]
        if func.value in _WRITTEN_IF and is_module_global(ctx, func) and defines_helper(ctx, func.value):
            return "written if"
    if qualified_names(ctx, func) == {"warnings.warn"}:
        return "warn"
    if isinstance(func, cst.Attribute) and func.attr.value in LOGGER_METHODS:
        return "log"
    if report_function(ctx, call) is not None:
        return "call"
    return None


def _tensors(test: SplitTest) -> list[cst.BaseExpression]:
    """What the test shows to be tensors: its tensor operands (Dynamo broke on them, or
    their shape shows it), and the one operand of such a comparison that is not a Python
    value (`aux` in `aux > 2.0`)."""
    out = []
    for leaf in _leaves(test.cond):
        out.append(leaf)
        if isinstance(leaf, cst.Comparison):
            parts = [_bare(p) for p in (leaf.left, *(c.comparator for c in leaf.comparisons))]
            rest = [p for p in parts if not _static_value(p)]
            out += rest if len(rest) == 1 else []
    return out


def _one_truth(test: SplitTest, scope: cst.CSTNode) -> str | None:
    """Why the tensor condition may have another truth value than the test, or None. A
    test of several tensor operands (`a.any() and b.all()`, `lo < t < hi`) becomes one
    elementwise ``torch.logical_*``, whose truth value is Python's where each operand
    holds one element: where one holds several, Python raises (or short-circuits past
    it) and the broadcast one may not."""
    leaves = _leaves(test.cond)
    if len(leaves) == 1 and not (isinstance(leaves[0], cst.Comparison) and len(leaves[0].comparisons) > 1):
        return None
    pairs: list[cst.BaseExpression] = []
    for leaf in leaves:
        if isinstance(leaf, cst.Comparison) and len(leaf.comparisons) > 1:
            every = [leaf.left, *(c.comparator for c in leaf.comparisons)]
            pairs += [cst.Comparison(a, [c.with_changes(comparator=b)]) for a, b, c in zip(every, every[1:], leaf.comparisons)]
        else:
            pairs.append(leaf)
    if all(_single(p, scope) for p in pairs):
        return None
    return "a test of several tensor operands not each shown to hold one element (torch.logical_and would broadcast them)"


def _leaves(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of a test's `and` / `or` / `not`."""
    expr = _bare(expr)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        return _leaves(expr.expression)
    if isinstance(expr, cst.BooleanOperation):
        return _leaves(expr.left) + _leaves(expr.right)
    return [expr]


def _single(expr: cst.BaseExpression, scope: cst.CSTNode, _depth: int = 0) -> bool:
    """A tensor of one element whatever its inputs: a full reduction (`x.any()`,
    `torch.isnan(x).any()`, `x.abs().max()`), a name bound once to one
    (`pos_rate = labels.mean()`), its negation, or its comparison with another or
    with a Python number."""
    expr = _bare(expr)
    if isinstance(expr, cst.Name) and _depth < 4:
        value = single_binding(scope, expr.value)
        return value is not None and _single(value, scope, _depth + 1)
    if isinstance(expr, cst.UnaryOperation):
        return _single(expr.expression, scope, _depth)
    if isinstance(expr, cst.Call):
        recv, name = called(expr)
        if name not in FULL_REDUCTIONS or any(a.keyword is not None or a.star for a in expr.args):
            return False
        return len(expr.args) == 1 if is_torch_call(expr) else recv is not None and not expr.args
    if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1 and isinstance(expr.comparisons[0].operator, COMPARISONS):
        a, b = expr.left, expr.comparisons[0].comparator
        one = functools.partial(_single, scope=scope, _depth=_depth)
        return (one(a) and (one(b) or _static_value(b))) or (_static_value(a) and one(b))
    return False


RECIPES = (ReportIf,)
