"""The run-time code of warn-to-leaf and logger-to-leaf, as gbfix writes it.

A ``torch._dynamo.decorators.leaf_function`` runs eagerly inside the compiled
graph, but takes neither a class nor a ``Logger`` as an argument. So the shared
code is a factory (one piece of the generated module): each module that warns
or logs builds the leaf function it calls once, at import, from a lambda that
returns its category or logger::

    _gbfix_warn_FutureWarning = gbfix_warn_leaf(lambda: FutureWarning)
    _gbfix_log_logger = gbfix_log_leaf(lambda: logger)

The lambda is evaluated when the helper runs, so the name is looked up as the
original call looked it up, in the module's own globals (a logger bound below
the line, or bound again, is found); no name travels as a string.
"""

from __future__ import annotations

from gbfix.generated import piece

# Logger methods that emit a record and return None. `warning_once` / `info_once`
# are the lru_cached methods transformers adds to Logger; `exception` is left
# out: it logs the exception being handled, which differs inside the helper.
LOGGER_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "critical", "fatal", "log", "warning_once", "info_once"}
)

# The lambda is the warning module's own code: its globals give the module's name,
# filters and once-per-location registry, and its line is where a warning with
# stacklevel 1 shows, as warnings.warn(message, category) written in that module.
WARN_LEAF = piece("gbfix_warn_leaf", '''\
def gbfix_warn_leaf(category):
    # A leaf function (kept in compiled graphs, run at run time) that warns with
    # category(); `category` is a lambda of the module that warns.
    names, code = category.__globals__, category.__code__

    @torch._dynamo.decorators.leaf_function
    def gbfix_warn_leaf_call(message, stacklevel=1):
        if stacklevel > 1:  # the line of a caller, as warnings.warn finds it
            warnings.warn(message, category(), stacklevel)
        else:
            warnings.warn_explicit(
                message, category(), code.co_filename, code.co_firstlineno,
                module=names["__name__"], registry=names.setdefault("__warningregistry__", {}), module_globals=names,
            )

    @gbfix_warn_leaf_call.register_fake
    def _(message, stacklevel=1):
        return None

    def gbfix_warn_leaf_or_warn(message, stacklevel=1):
        # Traced, the leaf function; run as plain Python (in a frame Dynamo left to
        # eager) the warning itself, from the caller's line: a leaf function called
        # eagerly has its own frame compiled, which breaks at the warning.
        if torch.compiler.is_compiling():
            gbfix_warn_leaf_call(message, stacklevel)
        else:
            warnings.warn(message, category(), stacklevel + 1)

    return gbfix_warn_leaf_or_warn
''', imports=(("warnings", None), ("torch", None)))

LOG_LEAF = piece("gbfix_log_leaf", '''\
def gbfix_log_leaf(logger):
    # A leaf function (kept in compiled graphs, run at run time) that calls a
    # method of logger(); `logger` is a lambda of the module that logs.
    @torch._dynamo.decorators.leaf_function
    def gbfix_log_leaf_call(method, *args):
        getattr(logger(), method)(*args)

    @gbfix_log_leaf_call.register_fake
    def _(method, *args):
        return None

    def gbfix_log_leaf_or_log(method, *args):
        # Traced, the leaf function; run as plain Python (in a frame Dynamo left to
        # eager) the logger's own call: a leaf function called eagerly has its own
        # frame compiled, which breaks at the logger.
        if torch.compiler.is_compiling():
            gbfix_log_leaf_call(method, *args)
        else:
            getattr(logger(), method)(*args)

    return gbfix_log_leaf_or_log
''')

# A library's logger, seen from the user's side (library-logger): the library
# module's logger global is bound to this stand-in, so the library's own calls
# reach the leaf function without a byte of the library changing.
LEAF_LOGGER = piece("gbfix_leaf_logger", f'''\
def gbfix_leaf_logger(module, name="logger"):
    # Binds the global `name` of `module` (a logger) to a stand-in whose logging
    # methods, called with text, numbers and None only, run as a leaf function (kept
    # in compiled graphs, run at run time); any other call (a tensor, a size, a
    # keyword argument, whose text the leaf function could change) and everything
    # else is the logger's own.
    module = importlib.import_module(module)
    logger = getattr(module, name)
    log = gbfix_log_leaf(lambda: logger)
    plain = (str, int, float, type(None))

    def method(name):
        def call(self, *args, **kwargs):
            if kwargs or [arg for arg in args if not isinstance(arg, plain)]:
                return getattr(logger, name)(*args, **kwargs)
            log(name, *args)

        return call

    class GbfixLeafLogger:
        def __getattr__(self, name):
            return getattr(logger, name)

        def __setattr__(self, name, value):
            setattr(logger, name, value)

    for method_name in ({", ".join(f'"{m}"' for m in sorted(LOGGER_METHODS))}):
        setattr(GbfixLeafLogger, method_name, method(method_name))
    setattr(module, name, GbfixLeafLogger())
''', imports=(("importlib", None), ("torch", None)), needs=(LOG_LEAF.name,))


def binding(factory: str, kind: str, name: str) -> tuple[str, str]:
    """The module-level line that builds, with ``factory``, the leaf helper for the
    module's ``name`` (a category or a logger): the helper's name and the line."""
    helper = f"_gbfix_{kind}_{name}"
    return helper, f"{helper} = {factory}(lambda: {name})\n"
