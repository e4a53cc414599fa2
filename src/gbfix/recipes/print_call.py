"""GB0059: ``print(...)`` inside compiled code.

``torch._higher_order_ops.print(fmt, *args)`` is a higher-order op that stays
in the graph and at run time calls ``builtins.print(fmt.format(*args))``. The
rewrite turns the print's arguments into one format string plus the values
that must be formatted at run time, so the printed text stays the same:

- ``print`` applies ``str()`` to each argument, while ``"{}".format(t)`` of a
  0-dim tensor formats its item: plain arguments become ``{!s}`` fields;
- string and number literals are folded into the format string, ``sep`` too;
- f-strings keep their conversions and format specs (``{x:.3f}`` -> ``{:.3f}``,
  ``{x=}`` -> ``x={!r}``): ``str.format`` formats a field exactly as an f-string;
- tuples, lists, dicts and shapes are turned into text by Dynamo (``str(...)``)
  before they reach the op: given as they are, a ``torch.Size`` prints as a
  plain tuple, and inductor fails to compile the op with any container argument.
  (Dynamo cannot ``str()`` symbolic sizes: once shapes turn dynamic it breaks
  there, and the verifier rejects the edit.)

Declined: ``print`` that is not the builtin, ``file=``, ``end`` other than a
newline, a non-literal ``sep``, ``*args``/``**kwargs``, nested format specs,
and values the op cannot take (``self``, generators, lambdas).
"""

from __future__ import annotations

import ast

import libcst as cst

from gbfix.recipes.analysis import (
    builtin_at,
    call_at,
    is_builtin,
)
from gbfix.recipes.base import Decline, Recipe, SiteContext

# --- shared by the recipes that rewrite a call (also used by logging_call, warn_call)


def str_literal(value: str) -> str:
    """A Python literal for ``value``, double-quoted where possible."""
    text = repr(value)
    if text.startswith("'") and '"' not in value:
        text = '"' + text[1:-1] + '"'
    return text


# --- print -> torch._higher_order_ops.print

# Containers and shapes: converted to text by Dynamo at trace time (see module doc).
_TO_TEXT_CALLS = frozenset({"tuple", "list", "dict", "set", "sorted"})
_CONVERSION = {None: "str", "s": "str", "r": "repr", "a": "ascii"}


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _is_string(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))


def has_fstring(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.ConcatenatedString):
        return has_fstring(node.left) or has_fstring(node.right)
    return isinstance(node, cst.FormattedString)


def _fields(node: cst.BaseExpression) -> list[cst.FormattedStringExpression]:
    """The replacement fields of a (possibly concatenated) f-string, left to right."""
    if isinstance(node, cst.ConcatenatedString):
        return _fields(node.left) + _fields(node.right)
    if isinstance(node, cst.FormattedString):
        return [p for p in node.parts if isinstance(p, cst.FormattedStringExpression)]
    return []


def _constant_text(node: cst.BaseExpression, code: str) -> str | None:
    """What ``print`` writes for a literal argument, or None if it is not a literal."""
    number = (cst.Integer, cst.Float, cst.Imaginary)
    signed = isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus))
    constant_name = isinstance(node, cst.Name) and node.value in ("None", "True", "False")
    if not (
        isinstance(node, (cst.SimpleString, cst.ConcatenatedString, *number))
        or constant_name
        or (signed and isinstance(node.expression, number))
    ):
        return None
    value = ast.literal_eval("(" + code + ")")
    if isinstance(value, bytes):
        raise Decline("bytes literal")
    return str(value)


def _to_text(node: cst.BaseExpression) -> bool:
    """Containers and shapes: values that must reach the op as text."""
    if isinstance(node, (cst.Tuple, cst.List, cst.Dict, cst.Set)):
        return True
    if isinstance(node, cst.Attribute) and node.attr.value == "shape":
        return True
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Name) and func.value in _TO_TEXT_CALLS:
            return True
        if isinstance(func, cst.Attribute) and func.attr.value == "size" and not node.args:
            return True
    return False


def _opaque(node: cst.BaseExpression) -> bool:
    """Values Dynamo cannot hand to the op, or whose text is not reproducible."""
    if isinstance(node, (cst.GeneratorExp, cst.ListComp, cst.SetComp, cst.DictComp, cst.Lambda, cst.Await, cst.Yield)):
        return True
    if isinstance(node, cst.SimpleString) and "b" in node.prefix.lower():
        return True
    if isinstance(node, cst.Name) and node.value in ("self", "cls"):
        return True  # a module or object: Dynamo cannot pass it as an argument
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "tolist"


class PrintToHop(Recipe):
    name = "print-to-hop"
    codes = ("GB0059",)
    safety = "safe"
    requires = frozenset({"hop_print"})
    summary = "print(...) -> torch._higher_order_ops.print(fmt, *args): prints at run time from inside the graph"
    rule = "GB0059"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        call = call_at(ctx)
        if call is None or not isinstance(call.func, cst.Name) or call.func.value != "print":
            return None
        if not is_builtin(ctx, call.func):
            return None
        self._ctx, self._call = ctx, call
        self._new = self._hop_call(call)
        return call

    def rewrite(self, node: cst.CSTNode) -> cst.CSTNode:
        self.need_import("torch")
        return self._new

    def replacement(self) -> cst.Call:
        """The ``torch._higher_order_ops.print`` call built by the last ``anchor`` that took its site."""
        return self._new

    # --- building the format string ---------------------------------------

    def _hop_call(self, call: cst.Call) -> cst.Call:
        sep, pieces = " ", []
        values: list[cst.BaseExpression] = []
        for arg in call.args:
            if arg.star:
                raise Decline("*args / **kwargs")
            keyword = arg.keyword.value if arg.keyword else None
            if keyword is None:
                pieces.append(self._piece(arg.value, values))
            elif keyword == "sep":
                sep = self._keyword_text(arg.value, default=" ")
            elif keyword == "end":
                if self._keyword_text(arg.value, default="\n") != "\n":
                    raise Decline("the op always ends the line")
            elif keyword == "flush":
                if not isinstance(arg.value, cst.Name):
                    raise Decline("dropping flush= must not drop an evaluation")
            else:
                raise Decline(f"{keyword}=")  # file=: the op always writes to sys.stdout
        fmt = _escape(sep).join(pieces)
        args = [cst.Arg(cst.SimpleString(str_literal(fmt)))] + [cst.Arg(v) for v in values]
        return cst.Call(func=cst.parse_expression("torch._higher_order_ops.print"), args=args)

    def _keyword_text(self, node: cst.BaseExpression, default: str) -> str:
        if isinstance(node, cst.Name) and node.value == "None":
            return default
        if _is_string(node) and not has_fstring(node):
            value = ast.literal_eval("(" + self._ctx.code(node) + ")")
            if isinstance(value, str):
                return value
        raise Decline("not a string literal")

    def _piece(self, node: cst.BaseExpression, values: list[cst.BaseExpression]) -> str:
        """One positional argument as format-string text; runtime values go to ``values``."""
        if has_fstring(node):
            return self._fstring(node, values)
        text = _constant_text(node, self._ctx.code(node))
        if text is not None:
            return _escape(text)
        return self._field(node, "s", None, values)

    def _field(self, node: cst.BaseExpression, conversion: str | None, spec: str | None, values: list) -> str:
        if _opaque(node):
            raise Decline("value the op cannot take")
        if _to_text(node):
            convert = _CONVERSION[conversion]
            if spec or not builtin_at(self._ctx, self._call, convert):
                raise Decline("format spec on a container, or a shadowed str/repr/ascii")
            values.append(cst.Call(cst.Name(convert), [cst.Arg(node)]))
            return "{}"
        values.append(node)
        return "{" + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"

    def _fstring(self, node: cst.BaseExpression, values: list) -> str:
        # Python's own parser gives the text between fields with escapes and
        # ``{{`` resolved, and expands ``{x=}`` into "x=" plus a ``!r`` field.
        joined = ast.parse("(" + self._ctx.code(node) + ")", mode="eval").body
        fields = iter(_fields(node))
        out = []
        for part in joined.values if isinstance(joined, ast.JoinedStr) else []:
            if isinstance(part, ast.Constant):
                out.append(_escape(part.value))
                continue
            expr = next(fields, None)
            if expr is None:
                raise Decline("f-string fields do not line up")
            spec = None
            if part.format_spec is not None:
                spec_parts = part.format_spec.values
                if not all(isinstance(p, ast.Constant) for p in spec_parts):
                    raise Decline("nested replacement field in a format spec")
                spec = "".join(p.value for p in spec_parts)
                if "{" in spec or "}" in spec:
                    raise Decline("brace in a format spec")
            conversion = None if part.conversion == -1 else chr(part.conversion)
            out.append(self._field(expr.expression, conversion, spec, values))
        if next(fields, None) is not None:
            raise Decline("f-string fields do not line up")
        return "".join(out)


def format_fields(ctx: SiteContext, call: cst.Call, node: cst.BaseExpression) -> tuple[str, list[cst.BaseExpression]] | None:
    """``node`` (an f-string, possibly concatenated with strings) as a ``str.format``
    template and the values of its fields, as print-to-hop builds them; None
    when a field cannot be written so (nested specs, values the ops cannot take)."""
    hop = PrintToHop()
    hop._ctx, hop._call = ctx, call
    values: list[cst.BaseExpression] = []
    try:
        return hop._piece(node, values), values
    except Decline:
        return None


def _item_receiver(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``t`` for ``t.item()``, else None."""
    if isinstance(node, cst.Call) and not node.args and isinstance(node.func, cst.Attribute) and node.func.attr.value == "item":
        return node.func.value
    return None


class PrintToHopKeepTensor(PrintToHop):
    """As print-to-hop, and ``f"{t.item():.4f}"`` passes ``t`` itself.

    ``format(t, spec)`` of a 0-dim tensor formats ``t.item()``, so the text is
    the same and the ``.item()`` break goes too. A tensor of shape [1] formats
    differently: the verifier then rejects this and print-to-hop is tried.
    """

    name = "print-to-hop-keep-tensor"
    summary = "print(f\"{t.item():.4f}\") -> torch._higher_order_ops.print(\"{:.4f}\", t): no .item() break either"

    def anchor(self, ctx: SiteContext) -> cst.CSTNode | None:
        self._kept = 0
        node = super().anchor(ctx)
        return node if self._kept else None

    def _field(self, node: cst.BaseExpression, conversion: str | None, spec: str | None, values: list) -> str:
        receiver = _item_receiver(node) if conversion is None else None
        if receiver is not None and not _opaque(receiver):
            self._kept += 1
            values.append(receiver)
            return "{" + (f":{spec}" if spec else "") + "}"
        return super()._field(node, conversion, spec, values)


RECIPES = (PrintToHopKeepTensor, PrintToHop)
