"""The child process: ``python -m gbfix.child SPEC.json``.

Runs the user's entry once under Dynamo with the hooks installed and writes a
JSON result to the path named in the spec. The program's own stdout and stderr
are left alone (the parent captures them); nothing here prints to stdout.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import NoReturn


def _seed(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


def _capabilities() -> list[str]:
    """Which fix APIs this torch has: recipes that need a missing one are not offered."""
    import torch

    probes: dict[str, Callable[..., object]] = {
        "hop_print": lambda: torch._higher_order_ops.print,
        "leaf_function": lambda: torch._dynamo.decorators.leaf_function,
        "nonstrict_trace": lambda: torch._dynamo.nonstrict_trace,
        "custom_op": lambda: torch.library.custom_op,
        # wrap-custom-op's recompute backward turns autograd back on inside its op (private guard)
        "custom_op_autograd": lambda: (torch._C._SetExcludeDispatchKeyGuard, torch._C.DispatchKey.AutogradFunctionality),
        "cond": lambda: torch.cond,
        "while_loop": lambda: torch.while_loop,
        "check": lambda: torch._check,
        "reorderable_logging": lambda: torch._dynamo.config.reorderable_logging_functions,
        # The log/warn/print op helpers: an op defined in a torch.library.Library, with a fake kernel.
        "register_fake": lambda: torch.library.register_fake,
        "mark_dynamic": lambda: torch._dynamo.mark_dynamic,
        "fail_on_recompile": lambda: torch.compiler.set_stance,
    }
    # Config routes, gated on the option existing in this release.
    for option in ("capture_scalar_outputs", "capture_dynamic_output_shape_ops", "allow_rnn", "trace_autograd_ops", "allow_unspec_int_on_nn_module"):
        probes[f"config.{option}"] = lambda option=option: getattr(torch._dynamo.config, option)
    out = []
    for name, probe in probes.items():
        try:
            probe()
            out.append(name)
        except AttributeError:
            pass
    return out


def _graphs() -> int | None:
    """How many graphs Dynamo compiled (handed to a backend) in this process: the counter
    Dynamo bumps after each backend call. None where this torch has no such counter."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - a private counter; its absence only loses the count
        return None


def _sources(entry: dict) -> list[str]:
    """The user's Python files this run loaded (what a cached result depends on): the
    entry's file and the files of imported modules outside the interpreter's library
    and the installed packages."""
    import importlib.util
    import sysconfig

    import gbfix
    from gbfix.result_cache import package_folders

    installed = package_folders() | {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
    folders = installed | {os.path.dirname(gbfix.__file__)}
    skip = tuple(os.path.join(p, "") for p in folders | {os.path.realpath(p) for p in folders})
    # Most modules (torch's thousands) are named under an installed folder as they are:
    # dropped before the costly realpath.
    files = {f for m in list(sys.modules.values()) if isinstance(f := getattr(m, "__file__", None), str) and not f.startswith(skip)}
    if entry["kind"] == "script":
        files.add(os.path.abspath(entry["target"]))
    elif entry["kind"] == "module":
        try:
            spec = importlib.util.find_spec(entry["target"])  # run as __main__: not in sys.modules
        except (ImportError, AttributeError, ValueError):
            spec = None
        if spec is not None and spec.origin is not None:
            files.add(spec.origin)
    # (torch.ops and torch.classes have a bare "_ops.py" as __file__)
    real = {os.path.realpath(f) for f in files if f.endswith(".py") and os.path.isabs(f)}
    return sorted(f for f in real if not f.startswith(skip))


def _one_line(e: BaseException) -> str:
    """``Type: message`` on one line; a first line that ends in a colon (``backend='x'
    raised:``) is joined to the next, which says what happened."""
    lines = [ln.strip() for ln in f"{type(e).__name__}: {e}".splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return f"{lines[0]} {lines[1]}"
    return lines[0] if str(e) else type(e).__name__


def main(spec_path: str) -> int:
    started = time.perf_counter()
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)

    import torch

    from gbfix.child import hooks
    from gbfix.child.capture import OutputCapture
    from gbfix.child.compile_patch import CompileRecorder
    from gbfix.child.entry_runner import EntryFailed, run, run_main_again
    from gbfix.child.observe import CallObserver
    from gbfix.child.outputs import compare_calls
    from gbfix.child.overlay import OverlayFinder
    from gbfix.child.recompiles import RecompileRecorder
    from gbfix.child.recompiles import install as install_recompiles
    from gbfix.child.writes import WriteRecorder

    breaks = hooks.BreakRecorder()
    hooks.install(breaks)
    recompiles = RecompileRecorder()
    install_recompiles(recompiles)
    capture = OutputCapture()
    capture.install()
    compiles = CompileRecorder(spec["backend"], spec.get("fullgraph"))  # "none": TORCHDYNAMO_DISABLE is set
    compiles.install()
    overlay = OverlayFinder(spec.get("overlay", {}))
    overlay.install()
    observer = CallObserver(spec.get("observe", []))
    observer.install()
    _seed(spec.get("seed", 0))

    os.chdir(spec["cwd"])
    writes = WriteRecorder(os.path.dirname(spec["result"]), spec["cwd"])
    writes.install()  # last: what the program writes, not what gbfix's setup did
    error = None
    try:
        run(spec["entry"], overlay)
    except EntryFailed as e:
        error = str(e)
    except BaseException as e:  # noqa: BLE001 - the user's program may raise anything
        traceback.print_exc()
        error = _one_line(e)
    finally:
        sys.settrace(None)
        sys.stdout.flush()
    proof = _prove_no_recompiles(run_main_again) if spec.get("no_recompiles") and error is None else None

    torch.save(compiles.calls, spec["outputs_out"])
    mismatch = None
    if spec.get("baseline_outputs"):
        expected = torch.load(spec["baseline_outputs"], weights_only=False)
        mismatch = compare_calls(expected, compiles.calls)

    result = {
        "error": error,
        "breaks": breaks.breaks,
        "logs": capture.logs,
        "warnings": capture.warnings,
        "compiled_calls": len(compiles.calls),
        "output_mismatch": mismatch,
        "compile_sites": compiles.sites,
        "torch_version": torch.__version__,
        "capabilities": _capabilities(),
        "observed": observer.results(),
        "graphs": _graphs(),
        "recompiles": recompiles.recompiles,
        "recompile_notes": recompiles.notes,
        "recompile_proof": proof,
        "sources": _sources(spec["entry"]),
        "wrote": writes.result(),
        "seconds": time.perf_counter() - started,
    }
    tmp = spec["result"] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(tmp, spec["result"])
    return 0


def _prove_no_recompiles(again) -> str:
    """Run the main block again under ``set_stance("fail_on_recompile")``: the first pass
    was the warm-up. "" when nothing compiled again, else why (Dynamo's message: the frame
    and the failed guards)."""
    import torch

    from gbfix.child.entry_runner import EntryFailed
    from gbfix.child.recompiles import guard_text

    if not hasattr(torch.compiler, "set_stance"):
        return "this torch has no torch.compiler.set_stance"
    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            again()
    except EntryFailed as e:
        return str(e)
    except BaseException as e:  # noqa: BLE001 - the user's program may raise anything
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        if not lines or "fail_on_recompile" not in lines[0]:
            return f"the program failed when run again: {_one_line(e)}"
        # "Detected recompile ... function name: 'f', line number: 6", then "- 0/0: <guard>   # <source line>"
        guards = [guard_text(ln[2:]) for ln in lines[1:] if ln.startswith("- ") and ": " in ln and "stack" not in ln]
        return lines[0] + (f"; failed guard: `{guards[0]}`" if guards else "")
    finally:
        sys.stdout.flush()
    return ""


def leave(rc: int) -> NoReturn:
    """End the run as the interpreter's exit would, less its teardown.

    The user's threads are joined and atexit handlers run (a program's last
    output or log lines come from them), then the process ends without freeing
    its modules one by one: with torch loaded that teardown takes over a second,
    on every run. (Objects still alive then are not finalised: a ``__del__`` that
    prints at exit is not seen, in any run, so no comparison depends on it.)
    """
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is None:  # a Python without it: the slow exit, not a wrong one
        sys.exit(rc)
    # As Py_Finalize does: threading's own exit hooks (which stop executors' workers),
    # then the wait for non-daemon threads, then the atexit handlers.
    shutdown()  # no public way to run these early
    atexit._run_exitfuncs()  # noqa: SLF001
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001, S110 - a stream the program closed or replaced
            pass
    os._exit(rc)


if __name__ == "__main__":
    leave(main(sys.argv[1]))
