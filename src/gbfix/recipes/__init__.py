"""The recipe registry: which recipes answer a break, in order of preference.

To add a recipe: write a ``Recipe`` subclass in a module here, list it in that
module's ``RECIPES`` (most preferred first), name the module below, and add its
examples to ``rules/<GB code>.md`` (the tests run them).
"""

from __future__ import annotations

import importlib

import libcst as cst

from gbfix.recipes.base import Recipe, Rewrite, SiteContext

_MODULES = (
    "print_op",  # print through a helper: a library op for text known while tracing
    "print_call",
    "logging_call",
    "warn_call",
    "scalar",
    "item_branch",  # a scalar read that an `if` tests: item-to-tensor and branch-to-where as one edit
    "numpy_scalar",  # numpy math on Python numbers: the math module's, so no tensor reaches a Python test
    "raise_if",  # `if <tensor>: raise` / an assert on a tensor: an op raises the same exception; before the unsafe checks
    "guarded_index",  # `a[i] if i >= 0 else b` with a tensor index: torch.where over a clamped index
    "same_arms",  # `a if t else b` whose arms give the same Python number: the test is not asked
    "table_lookup",  # `a[i]` at an index Dynamo holds as a tensor: a gather while tracing
    "report_if",  # `if <tensor>: <print / warn / log>`: an op tests and reports at run time (branch-to-where declines these)
    "branch",
    "loop_branch",
    "while_loop",  # a `while` on a tensor test: torch.while_loop over the names it carries
    "explicit_break",
    "shapes",
    "size_item",  # a tensor given as a size read with .item(): joined with capture_scalar_outputs
    "masked_assign",  # `A[M] = B[M]`: torch.where written into A, before the config route
    "dispatch",
    "expert_loop",
    "copying",
    "timing",
    "env_check",  # a cached environment probe: a constant of the graph, before the opaque-op wrappers
    "generator",
    "split_step",
    "grad_mode",
    "sorting",
    "comprehension_loop",  # a comprehension Dynamo compiles as its own frame (3.11): the same loop as a for statement
    "library_logger",  # a library's logger from the user's side: its module global bound to a leaf-logging stand-in
    "library_class",  # a break inside a library class: the other recipes, on a subclass in the user's code
    "wrap",  # opaque ops around a helper: after every recipe that keeps the code traced
    "config_route",  # global config: the fallback after every source rewrite
    "rc_counter",  # recompile sites (RC codes): a counter on a module
    "rc_numbers",  # a float argument
    "rc_sizes",  # sizes that automatic dynamic shapes does not settle
)


def all_recipes() -> tuple[type[Recipe], ...]:
    return load(_MODULES)


def load(names: tuple[str, ...]) -> tuple[type[Recipe], ...]:
    """The recipes of the named modules, in order; a module not written yet is skipped."""
    out: list[type[Recipe]] = []
    for name in names:
        try:
            module = importlib.import_module(f"gbfix.recipes.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"gbfix.recipes.{name}":
                raise
            continue
        out.extend(module.RECIPES)
    return tuple(out)


def listed_before(module: str) -> tuple[type[Recipe], ...]:
    """The recipes of the modules the registry lists before ``module``."""
    return load(_MODULES[: _MODULES.index(module)])


def named(name: str) -> type[Recipe]:
    """The recipe class an Edit names (looked up each time: tests patch the registry)."""
    return next(r for r in all_recipes() if r.name == name)


def finalize(module: cst.Module) -> cst.Module:
    """Every recipe's pass over the whole edited file (``Recipe.finalize``), once each."""
    done = set()
    for recipe in all_recipes():
        if recipe.finalize.__func__ not in done:  # subclasses share their base's pass
            done.add(recipe.finalize.__func__)
            module = recipe.finalize(module)
    return module


def candidates(code: str, *, unsafe: bool) -> list[type[Recipe]]:
    """Recipes answering a root-cause GB code, safest first, unsafe ones only if allowed."""
    found = [r for r in all_recipes() if code in r.codes and (unsafe or r.safety == "safe")]
    return sorted(found, key=lambda r: r.safety != "safe")


__all__ = ["Recipe", "Rewrite", "SiteContext", "all_recipes", "candidates", "finalize", "listed_before", "load", "named"]
