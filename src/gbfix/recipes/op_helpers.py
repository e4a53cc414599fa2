"""The run-time code of print-to-op, warn-to-op, logger-to-op and raise-if, as gbfix writes it.

Each helper runs while Dynamo traces the call that replaced ``print``,
``warnings.warn``, a logger call or a check that raises, and hands what is to be
printed (or tested and raised) to an op of the helpers' module, which does it at
run time. The op writes to a 0-element
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


def _gbfix_warn_place(ctx):
    # Run by Dynamo: the category, and the file and line the warning names, from the
    # frames Dynamo traces (innermost last, as '  File "f.py", line 9, in fn').
    stack = io.StringIO()
    ctx.parent().print_bt(file=stack)
    frames = [line[len('  File "') :] for line in stack.getvalue().splitlines() if line.startswith('  File "')]
    frames = [(f.rsplit('", line ', 1)[0], *f.rsplit('", line ', 1)[1].split(", in ", 1)) for f in frames]
    level = ctx.get_local("stacklevel").as_python_constant()
    if level <= len(frames):
        place = (frames[-level][0], int(frames[-level][1]), 0)
    elif frames:  # a caller of the compiled function
        place = (frames[0][0], frames[0][2], level - len(frames))
    else:  # gbfix_warn is the frame compiled: its caller runs uncompiled
        place = (__file__, "gbfix_warn", level)
    _gbfix_pin(ctx, _gbfix_warn_op, (ctx.get_local("category").as_python_constant(), *place))


def gbfix_warn(message, category=UserWarning, stacklevel=1):
    # warnings.warn(message, category, stacklevel) in compiled graphs (a message that
    # is no text while tracing is warned here: Dynamo breaks).
    if torch.compiler.is_compiling() and type(message) is str:
        _gbfix_warn_op(-1, message, _gbfix_sink)
        torch._dynamo.comptime.comptime(_gbfix_warn_place)
    else:
        warnings.warn(message, category, stacklevel + 1)  # gbfix: ignore[GB0007] (uncompiled)
''', imports=(("io", None), ("sys", None), ("warnings", None), ("torch", None)), needs=(OPS.name,))

# The logger's arguments reach the op by kind, as its schema types them: strings
# as text, numbers (sizes and steps Dynamo made symbolic too) as Scalars, tensors
# as tensors (computed by the graph before the op runs), None as a mark; the op
# rebuilds them in order, so the logger's method gets the very arguments of the
# original call: the record's msg/args and a `*_once` method's cache (keyed on
# the arguments) are the same.
LOG = piece("gbfix_log", '''\
def _gbfix_log_body(logger, method, kinds, texts, numbers, tensors, sink):
    # The arguments back in order (s: text, n: number, t: tensor, -: None); after
    # an "f", the first text is an f-string's template, formatted here.
    logger = _gbfix_pinned[logger]
    if logger is None or type(logger) is str:
        logger = logging.getLogger(logger)
    texts, numbers, tensors = iter(texts), iter(numbers), iter(tensors)
    pick = {"s": texts, "n": numbers, "t": tensors}
    template = next(texts) if kinds.startswith("f") else None
    args = [next(pick[k]) if k in pick else None for k in kinds.removeprefix("f")]
    if template is not None:
        args = [template.format(*args)]
    getattr(logger, method)(*args)


_gbfix_log_op = _gbfix_op(
    "log", "int logger, str method, str kinds, str[] texts, Scalar[] numbers, Tensor[] tensors", _gbfix_log_body
)


def _gbfix_log_logger(ctx):
    # Run by Dynamo: the logger itself (no op takes a Logger, and Dynamo cannot read
    # its name: its tracker holds it), or the name logging.getLogger takes.
    value = ctx.get_local("logger")
    if not value.is_python_constant():
        tracked = value._i_will_not_complain_if_bc_breaks_VariableTracker()
        value = getattr(tracked, "realize", lambda: tracked)()
    _gbfix_pin(ctx, _gbfix_log_op, value.as_python_constant() if value.is_python_constant() else value.value)


def gbfix_log(logger, method, *args, template=False):
    # getattr(logger, method)(*args) in compiled graphs (`logger`: a logger or its
    # name). Strings, numbers (exact types), tensors and None go to the op; anything
    # else is logged here (Dynamo breaks). template: args[0] is an f-string's.
    kinds = {str: "s", int: "n", float: "n", bool: "n", type(None): "-"}
    values = args[1:] if template else args
    of = "".join(["t" if isinstance(a, torch.Tensor) else kinds.get(type(a), "?") for a in values])
    if torch.compiler.is_compiling() and "?" not in of:
        texts = [a for a, k in zip(values, of) if k == "s"]
        numbers = [a for a, k in zip(values, of) if k == "n"]
        tensors = [a for a, k in zip(values, of) if k == "t"]
        if template:
            of, texts = "f" + of, [args[0], *texts]
        _gbfix_log_op(-1, method, of, texts, numbers, tensors, _gbfix_sink)
        torch._dynamo.comptime.comptime(_gbfix_log_logger)
    else:
        if logger is None or type(logger) is str:
            logger = logging.getLogger(logger)
        getattr(logger, method)(*([args[0].format(*values)] if template else args))
''', imports=(("logging", None), ("torch", None)), needs=(OPS.name,))

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


def _gbfix_raise_class(ctx):
    # Run by Dynamo: the exception class, which no op takes. In a `try` or `with` block of
    # a frame Dynamo traces, an exception of the op would leave the graph without the
    # handler, `finally` or exit the original ran: there the check breaks, as before.
    tx = ctx._i_will_not_complain_if_bc_breaks_InstructionTranslator()
    while tx is not None:
        if tx.block_stack or getattr(tx.current_instruction, "exn_tab_entry", None) is not None:
            ctx.graph_break("gbfix_raise_if in a try or with block: the check stays a break")
        tx = tx.parent
    _gbfix_pin(ctx, _gbfix_raise_op, ctx.get_local("exc").as_python_constant())


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
