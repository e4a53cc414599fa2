"""The run-time code of print-to-op, warn-to-op, logger-to-op, report-if and raise-if, as gbfix writes it.

Each helper runs while Dynamo traces the call that replaced ``print``,
``warnings.warn``, a logger call (report-if: the `if` on a tensor around one) or a
check that raises, and hands what is to be printed (or tested and raised) to an op
of the helpers' module, which does it at run time (report-if's and raise-if's: only
when the tensor it is given holds). The op writes to a 0-element
tensor, the sink: that write keeps it in the graph (an op with no output is dead
code to inductor) and in order with the graph's other ops, also with
``fullgraph=True`` and in training; unlike an effectful op (``with_effects``) it
leaves the graph in inductor's FX graph cache, and a call costs a plain op call.

Nothing here depends on where the calls are: what an op needs that is no tensor,
text or number (a logger, a warning's category and the caller's file and line)
is read while Dynamo traces, by ``comptime`` (Dynamo runs the function it is
given with the tracer's state, and ignores it uncompiled), kept in a list of the
process and passed to the op as its index.
"""

from __future__ import annotations

from gbfix.generated import piece

# The op namespace of the module holding the helpers (a package's _gbfix.py or a
# script), and the sink. An op is defined once per process: a module reloaded or
# imported again finds it, with the list of pinned objects its first copy made.
OPS = piece("_gbfix_op", '''\
# Ops named after this module (ops are process-wide), each writing to this
# 0-element tensor: that keeps it in compiled graphs, in order.
_gbfix_lib = torch.library.Library("gbfix", "FRAGMENT")
_gbfix_tag = "".join(c if c.isalnum() else "_" for c in __name__)
_gbfix_sink = torch.empty(0)
# What an op needs that it cannot take (a logger, a class), pinned while Dynamo
# traces and passed as an index; one list per process, kept across reloads.
_gbfix_pinned = torch.ops.gbfix.__dict__.setdefault(f"_pinned_{_gbfix_tag}", [])


def _gbfix_op(name, schema, body, tags=()):
    # Defined once per process; the body is kept out of Dynamo, which would
    # otherwise compile it as a frame of its own when called from a skipped frame.
    qualname = f"{name}_{_gbfix_tag}"
    if not hasattr(torch.ops.gbfix, qualname):
        _gbfix_lib.define(f"{qualname}({schema}, Tensor(a!) sink) -> ()", tags=tags)
        _gbfix_lib.impl(qualname, torch.compiler.disable(body), "CompositeExplicitAutograd")
        torch.library.register_fake(f"gbfix::{qualname}", lambda *args: None, lib=_gbfix_lib)
    return getattr(torch.ops.gbfix, qualname)


def _gbfix_pin(ctx, op, value):
    # Run by Dynamo (comptime) right after a helper called `op` with index -1.
    index = next((i for i, v in enumerate(_gbfix_pinned) if v is value or (type(v) is tuple and v == value)), None)
    if index is None:
        _gbfix_pinned.append(value)
        index = len(_gbfix_pinned) - 1
    node = next(n for n in reversed(ctx.graph().nodes) if n.target in (op, op.default))
    node.update_arg(0, index)
''', public=False)

# Values reach an op by kind, as its schema types them: strings as text, numbers
# (sizes and steps Dynamo made symbolic too) as Scalars, tensors as tensors
# (computed by the graph before the op runs), None as a mark; the op rebuilds them
# in order.
VALUES = piece("_gbfix_pack", '''\
def _gbfix_pack(values):
    # (kinds, texts, numbers, tensors) for an op's typed arguments, kinds a letter a
    # value (s: text, n: number, t: tensor, -: None); None when one is of another kind.
    of = {str: "s", int: "n", float: "n", bool: "n", type(None): "-"}
    kinds = "".join(["t" if isinstance(v, torch.Tensor) else of.get(type(v), "?") for v in values])
    if "?" in kinds:
        return None
    texts = [v for v, k in zip(values, kinds) if k == "s"]
    numbers = [v for v, k in zip(values, kinds) if k == "n"]
    tensors = [v for v, k in zip(values, kinds) if k == "t"]
    return kinds, texts, numbers, tensors


def _gbfix_unpack(kinds, texts, numbers, tensors):
    # The values _gbfix_pack took apart, back in order.
    texts, numbers, tensors = iter(texts), iter(numbers), iter(tensors)
    pick = {"s": texts, "n": numbers, "t": tensors}
    return [next(pick[k]) if k in pick else None for k in kinds]
''', public=False)

PRINT = piece("gbfix_print", '''\
_gbfix_print_op = _gbfix_op("print", "str text", lambda text, sink: print(text))


def gbfix_print(fmt, *values):
    # print(fmt.format(*values)) in compiled graphs: text known while tracing goes
    # to the op, tensors and symbolic sizes to torch's print op.
    if all([isinstance(v, (str, int, float, type(None))) for v in values]):
        _gbfix_print_op(fmt.format(*values), _gbfix_sink)
    else:
        torch._higher_order_ops.print(fmt, *values)
''', needs=(OPS.name,))

# The file and line a warning names (the caller's, or with a stacklevel a caller of
# it) come from Dynamo's stack of the frames it traces (print_bt, the public form
# of it). Where that frame is not among them (gbfix_warn compiled as a frame of its
# own, called from a frame Dynamo skipped; a stacklevel reaching past the compiled
# function), the body finds it at run time on the Python stack, counting up from
# the frame it is known to be above.
WARN = piece("gbfix_warn", '''\
_gbfix_modules = {}  # filename -> its module's globals (its name and warning registry)


def _gbfix_warn_body(where, message, sink):
    # warnings.warn at the caller's line, with that module's filters and registry.
    category, filename, at, up = _gbfix_pinned[where]  # `at`: a line, or with `up` a function
    lineno = at
    if up:  # `up` frames above the innermost running frame of function `at` of `filename`
        frame = sys._getframe()
        while frame is not None and (frame.f_code.co_filename, frame.f_code.co_name) != (filename, at):
            frame = frame.f_back
        for _ in range(up):
            frame = frame and frame.f_back
        if frame is None:
            filename, lineno = "sys", 1  # as warnings.warn names a stacklevel past the stack
        else:
            filename, lineno = frame.f_code.co_filename, frame.f_lineno
    if filename not in _gbfix_modules:
        found = [vars(m) for m in list(sys.modules.values()) if getattr(m, "__file__", None) == filename]
        _gbfix_modules[filename] = found[0] if found else {"__name__": filename.rsplit("/", 1)[-1].removesuffix(".py")}
    names = _gbfix_modules[filename]
    warnings.warn_explicit(
        message, category, filename, lineno,
        module=names["__name__"], registry=names.setdefault("__warningregistry__", {}), module_globals=names,
    )


_gbfix_warn_op = _gbfix_op("warn", "int where, str message", _gbfix_warn_body)


def _gbfix_warn_place(ctx, op=_gbfix_warn_op):
    # Run by Dynamo in the helper that called `op`: the category, and the file and line
    # the warning names, from the frames Dynamo traces (innermost last, as
    # '  File "f.py", line 9, in fn'; the last is the helper's own).
    stack = io.StringIO()
    ctx.print_bt(file=stack)
    frames = [line[len('  File "') :] for line in stack.getvalue().splitlines() if line.startswith('  File "')]
    *frames, helper = [(f.rsplit('", line ', 1)[0], *f.rsplit('", line ', 1)[1].split(", in ", 1)) for f in frames]
    level = ctx.get_local("stacklevel").as_python_constant()
    if level <= len(frames):
        place = (frames[-level][0], int(frames[-level][1]), 0)
    elif frames:  # a caller of the compiled function
        place = (frames[0][0], frames[0][2], level - len(frames))
    else:  # the helper is the frame compiled: its caller runs uncompiled
        place = (__file__, helper[2], level)
    _gbfix_pin(ctx, op, (ctx.get_local("category").as_python_constant(), *place))


def gbfix_warn(message, category=UserWarning, stacklevel=1):
    # warnings.warn(message, category, stacklevel) in compiled graphs (a message that
    # is no text while tracing is warned here: Dynamo breaks).
    if torch.compiler.is_compiling() and type(message) is str:
        _gbfix_warn_op(-1, message, _gbfix_sink)
        torch._dynamo.comptime.comptime(_gbfix_warn_place)
    else:
        warnings.warn(message, category, stacklevel + 1)  # gbfix: ignore[GB0007] (uncompiled)
''', imports=(("io", None), ("sys", None), ("warnings", None), ("torch", None)), needs=(OPS.name,))

# The logger's arguments reach the op by kind (_gbfix_pack) and the op rebuilds
# them in order, so the logger's method gets the very arguments of the original
# call: the record's msg/args and a `*_once` method's cache (keyed on the
# arguments) are the same.
LOG = piece("gbfix_log", '''\
def _gbfix_log_call(logger, method, args, template):
    # getattr(logger, method)(*args) at run time (`logger`: the index of a pinned logger
    # or name); template: args[0] is an f-string's template, formatted here.
    logger = _gbfix_pinned[logger]
    if logger is None or type(logger) is str:
        logger = logging.getLogger(logger)
    getattr(logger, method)(*([args[0].format(*args[1:])] if template else args))


def _gbfix_log_body(logger, method, kinds, texts, numbers, tensors, sink):
    # The arguments back in order; kinds starting with "f": a template first.
    args = _gbfix_unpack(kinds.removeprefix("f"), texts, numbers, tensors)
    _gbfix_log_call(logger, method, args, kinds.startswith("f"))


_gbfix_log_op = _gbfix_op(
    "log", "int logger, str method, str kinds, str[] texts, Scalar[] numbers, Tensor[] tensors", _gbfix_log_body
)


def _gbfix_log_logger(ctx, op=_gbfix_log_op):
    # Run by Dynamo in the helper that called `op`: the logger itself (no op takes a
    # Logger, and Dynamo cannot read its name: its tracker holds it), or the name
    # logging.getLogger takes.
    value = ctx.get_local("logger")
    if not value.is_python_constant():
        tracked = value._i_will_not_complain_if_bc_breaks_VariableTracker()
        value = getattr(tracked, "realize", lambda: tracked)()
    _gbfix_pin(ctx, op, value.as_python_constant() if value.is_python_constant() else value.value)


def gbfix_log(logger, method, *args, template=False):
    # getattr(logger, method)(*args) in compiled graphs (`logger`: a logger or its
    # name). Strings, numbers (exact types), tensors and None go to the op; anything
    # else is logged here (Dynamo breaks). template: args[0] is an f-string's.
    packed = _gbfix_pack(args)
    if torch.compiler.is_compiling() and packed is not None:
        kinds, texts, numbers, tensors = packed
        _gbfix_log_op(-1, method, ("f" if template else "") + kinds, texts, numbers, tensors, _gbfix_sink)
        torch._dynamo.comptime.comptime(_gbfix_log_logger)
    else:
        if logger is None or type(logger) is str:
            logger = logging.getLogger(logger)
        getattr(logger, method)(*([args[0].format(*args[1:])] if template else args))
''', imports=(("logging", None), ("torch", None)), needs=(OPS.name, VALUES.name))

# `if cond: raise exc(*args)` (raise-if, assert-to-raise-if): the test and the raise run
# in an op at run time, so the exception is the original's, class and message; the op
# writes the sink as the print/warn/log ops do, so a report before the check comes out
# before it, and one after it does not when it raises. The class is pinned (no op takes
# one); the message must be text while Dynamo traces. A message written as a lambda is
# built only when it is needed, as the original built it: uncompiled, only when the
# test holds; compiled, while Dynamo traces. Anything else (a test that is no tensor, a
# message that is no text then) runs the original statement here (Dynamo breaks on a
# tensor test, as it did before).
RAISE = piece("gbfix_raise_if", '''\
def _gbfix_raise_body(exc, cond, args, sink):
    # The original `if cond: raise exc(*args)`, at run time.
    if cond:
        raise _gbfix_pinned[exc](*args)


# cudagraph_unsafe: a CUDA graph would replay the graph's kernels without the op's test
_gbfix_raise_op = _gbfix_op("raise_if", "int exc, Tensor cond, str[] args", _gbfix_raise_body, (torch.Tag.cudagraph_unsafe,))


def _gbfix_raise_class(ctx, op=_gbfix_raise_op):
    # Run by Dynamo in the helper that called `op`: the exception class, which no op
    # takes. In a `try` or `with` block of a frame Dynamo traces, an exception of the op
    # would leave the graph without the handler, `finally` or exit the original ran:
    # there the check breaks, as before.
    tx = ctx._i_will_not_complain_if_bc_breaks_InstructionTranslator()
    while tx is not None:
        if tx.block_stack or getattr(tx.current_instruction, "exn_tab_entry", None) is not None:
            ctx.graph_break("gbfix_raise_if in a try or with block: the check stays a break")
        tx = tx.parent
    _gbfix_pin(ctx, op, ctx.get_local("exc").as_python_constant())


def gbfix_raise_if(cond, exc, *message):
    # `if cond: raise exc(*message)`, a message given as a lambda built only then. In
    # compiled graphs, with a tensor test and text known while tracing: an op tests and raises.
    if torch.compiler.is_compiling() and isinstance(cond, torch.Tensor):
        args = [m() if callable(m) else m for m in message]
        if all([type(a) is str for a in args]):
            _gbfix_raise_op(-1, cond.detach(), args, _gbfix_sink)
            torch._dynamo.comptime.comptime(_gbfix_raise_class)
            return
    if cond:
        raise exc(*[m() if callable(m) else m for m in message])
''', needs=(OPS.name,))

# report-if: `if <tensor>: <print / warnings.warn / logger call>` as one call that
# keeps the test and the report in the graph. Its op gets the tensor and tests it at
# run time (Python's truth value, so a tensor of several elements raises as the `if`
# did); only then does it make the message and report it. The message's values reach
# the op by kind; a cast the message applied (`int(t)`, `float(t)`, `t.item()`:
# `cast={0: "int"}`) is applied there too, at run time, only when the test holds. Eagerly (uncompiled, or a
# value of another kind) the helper is the `if` it replaced. raise-if's
# gbfix_raise_if_format makes its exception's message the same way (RAISE_FORMAT).
MESSAGE = piece("_gbfix_message", '''\
_gbfix_cast_of = {"int": int, "float": float, "item": lambda v: v.item(), "str": str, "repr": repr, "round": round}
_gbfix_cast_of.update({m: lambda v, m=m: getattr(v, m)() for m in ("max", "min", "amax", "amin", "argmax", "argmin")})
_gbfix_if_schema = "Tensor cond, str fmt, bool percent, str[] casts, str kinds, str[] texts, Scalar[] numbers, Tensor[] tensors"


def _gbfix_message(values, cast, percent):
    # The values a message is made of (with percent, values[0] is the operand of `%`:
    # a tuple's items), the cast of each ("" or what `_gbfix_cast` applies, from `cast`:
    # {index: cast}) and the values packed for an op.
    values = values[0] if percent and type(values[0]) is tuple else values
    casts = [(cast or {}).get(i, "") for i in range(len(values))]
    return values, casts, _gbfix_pack(values)


def _gbfix_cast(values, casts):
    # The values with their casts applied, innermost first: int(v), float(v), v.item(),
    # str(v), repr(v), round(v) and "round:2", round(v, 2) ("item,round:2": round(v.item(), 2)),
    # v.max() and the other reductions ("max,item": v.max().item()).
    return [_gbfix_cast_one(v, c) for v, c in zip(values, casts)]


def _gbfix_cast_one(value, casts):
    for cast in filter(None, casts.split(",")):
        name, _, digits = cast.partition(":")
        value = round(value, int(digits)) if digits else _gbfix_cast_of[name](value)
    return value


def _gbfix_text(fmt, values, casts, percent):
    # The message: `fmt % tuple(values)` (percent) or fmt.format(*values), the values cast first.
    values = _gbfix_cast(values, casts)
    return fmt % tuple(values) if percent else fmt.format(*values)
''', public=False, needs=(VALUES.name,))

PRINT_IF = piece("gbfix_print_if", '''\
def _gbfix_print_if_body(cond, fmt, percent, casts, kinds, texts, numbers, tensors, sink):
    if cond:
        print(_gbfix_text(fmt, _gbfix_unpack(kinds, texts, numbers, tensors), casts, percent))


_gbfix_print_if_op = _gbfix_op("print_if", _gbfix_if_schema, _gbfix_print_if_body)


def gbfix_print_if(cond, fmt, *values, cast=None, percent=False):
    # `if cond: print(fmt.format(*values))` (percent: `fmt % values[0]`), in compiled
    # graphs too: for a tensor cond the op tests it and prints at run time.
    values, casts, packed = _gbfix_message(values, cast, percent)
    if torch.compiler.is_compiling() and isinstance(cond, torch.Tensor) and packed is not None:
        _gbfix_print_if_op(cond, fmt, percent, casts, *packed, _gbfix_sink)
    elif cond:
        print(_gbfix_text(fmt, values, casts, percent))  # gbfix: ignore[GB0059] (uncompiled)
''', needs=(OPS.name, MESSAGE.name))

WARN_IF = piece("gbfix_warn_if", '''\
def _gbfix_warn_if_body(where, cond, fmt, percent, casts, kinds, texts, numbers, tensors, sink):
    if cond:
        _gbfix_warn_body(where, _gbfix_text(fmt, _gbfix_unpack(kinds, texts, numbers, tensors), casts, percent), sink)


_gbfix_warn_if_op = _gbfix_op("warn_if", "int where, " + _gbfix_if_schema, _gbfix_warn_if_body)


def gbfix_warn_if(cond, fmt, *values, cast=None, percent=False, category=UserWarning, stacklevel=1):
    # `if cond: warnings.warn(<the text gbfix_print_if prints>, category, stacklevel)`,
    # in compiled graphs too, from the caller's line, as gbfix_warn warns.
    values, casts, packed = _gbfix_message(values, cast, percent)
    if torch.compiler.is_compiling() and isinstance(cond, torch.Tensor) and packed is not None:
        _gbfix_warn_if_op(-1, cond, fmt, percent, casts, *packed, _gbfix_sink)
        torch._dynamo.comptime.comptime(lambda ctx: _gbfix_warn_place(ctx, _gbfix_warn_if_op))
    elif cond:
        warnings.warn(_gbfix_text(fmt, values, casts, percent), category, stacklevel + 1)  # gbfix: ignore[GB0007] (uncompiled)
''', imports=(("warnings", None), ("torch", None)), needs=(WARN.name, MESSAGE.name))

LOG_IF = piece("gbfix_log_if", '''\
def _gbfix_log_if_body(logger, cond, method, template, casts, kinds, texts, numbers, tensors, sink):
    if cond:
        _gbfix_log_call(logger, method, _gbfix_cast(_gbfix_unpack(kinds, texts, numbers, tensors), casts), template)


_gbfix_log_if_op = _gbfix_op(
    "log_if",
    "int logger, Tensor cond, str method, bool template, str[] casts, str kinds, str[] texts, Scalar[] numbers, Tensor[] tensors",
    _gbfix_log_if_body,
)


def gbfix_log_if(cond, logger, method, *args, cast=None, template=False):
    # `if cond: getattr(logger, method)(*args)`, in compiled graphs too: for a tensor
    # cond the op tests it and logs at run time, as gbfix_log logs.
    args, casts, packed = _gbfix_message(args, cast, False)
    if torch.compiler.is_compiling() and isinstance(cond, torch.Tensor) and packed is not None:
        _gbfix_log_if_op(-1, cond, method, template, casts, *packed, _gbfix_sink)
        torch._dynamo.comptime.comptime(lambda ctx: _gbfix_log_logger(ctx, _gbfix_log_if_op))
    elif cond:
        gbfix_log(logger, method, *_gbfix_cast(args, casts), template=template)
''', imports=(("torch", None),), needs=(LOG.name, MESSAGE.name))

# report-if's call of a function that only reports (``report_function``: a `warn_once`
# wrapper): the log op with the function pinned in place of a logger, and "__call__"
# for its method, so at run time the op calls it only where the test holds.
CALL_IF = piece("gbfix_call_if", '''\
def gbfix_call_if(cond, fn, *args, cast=None):
    # `if cond: fn(*args)` for a function that only reports, in compiled graphs too:
    # for a tensor cond the op tests it and calls fn at run time, as gbfix_log_if
    # calls a logger's method.
    gbfix_log_if(cond, fn, "__call__", *args, cast=cast)
''', imports=(), needs=(LOG_IF.name,))

# raise-if with a message that formats a tensor (`raise FloatingPointError(f"non-finite loss
# {loss}")`): its text is only known at run time, so the op makes it there, as the report-if
# ops make theirs (_gbfix_message, _gbfix_text), and only where the test holds. The op
# formats detached tensors: where the message shows a tensor through str() or repr() and
# the tensor requires grad or is of a subclass (its grad_fn, `requires_grad=True`,
# "Parameter containing:"), a detached one would read otherwise, and the helper keeps the
# `if` as written (Dynamo breaks there, as before). A template's `!r`, `!s`, `!a` (`%r`,
# `%s`, `%a`) count for each of its values.
RAISE_FORMAT = piece("gbfix_raise_if_format", '''\
def _gbfix_raise_format_body(exc, cond, fmt, percent, casts, kinds, texts, numbers, tensors, sink):
    # The original `if cond: raise exc(<its message>)`, at run time. The tensors detached
    # again: a compiled graph may hand the op the input a detached value was made from.
    if cond:
        values = _gbfix_unpack(kinds, texts, numbers, [t.detach() for t in tensors])
        raise _gbfix_pinned[exc](_gbfix_text(fmt, values, casts, percent))


_gbfix_raise_format_op = _gbfix_op(
    "raise_if_format", "int exc, " + _gbfix_if_schema, _gbfix_raise_format_body, (torch.Tag.cudagraph_unsafe,)
)


def _gbfix_by_str(fmt, values, casts, percent):
    # Whether the message shows, through str() or repr(), a tensor that requires grad or is
    # of a subclass: by a conversion of the template (it counts for every value), a cast, or
    # a `{}` field of one that is no 0-dim torch.Tensor (Tensor.__format__ formats those
    # as their number).
    if percent:
        text = any([p.lstrip("-#0 +0123456789.*")[:1] in ("r", "s", "a") for p in fmt.replace("%%", "").split("%")[1:]])
    else:
        text = "!r" in fmt or "!s" in fmt or "!a" in fmt
    return any([
        isinstance(v, torch.Tensor) and (v.requires_grad or type(v) is not torch.Tensor)
        and (text or c in ("str", "repr") or (c == "" and not percent and (v.dim() != 0 or type(v) is not torch.Tensor)))
        for v, c in zip(values, casts)
    ])


def gbfix_raise_if_format(cond, exc, fmt, *values, cast=None, percent=False):
    # `if cond: raise exc(fmt.format(*values))` (percent: `fmt % values[0]`; cast: as
    # gbfix_print_if takes it), the message made only when cond holds. In compiled graphs,
    # for a tensor cond: an op tests it, makes the message and raises, at run time.
    values, casts, packed = _gbfix_message(values, cast, percent)
    if torch.compiler.is_compiling() and isinstance(cond, torch.Tensor) and packed is not None:
        if not _gbfix_by_str(fmt, values, casts, percent):
            kinds, texts, numbers, tensors = packed
            tensors = [t.detach() for t in tensors]
            _gbfix_raise_format_op(-1, cond.detach(), fmt, percent, casts, kinds, texts, numbers, tensors, _gbfix_sink)
            torch._dynamo.comptime.comptime(lambda ctx: _gbfix_raise_class(ctx, _gbfix_raise_format_op))
            return
    if cond:
        raise exc(_gbfix_text(fmt, values, casts, percent))
''', needs=(RAISE.name, MESSAGE.name))
