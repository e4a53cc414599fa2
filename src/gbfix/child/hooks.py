"""Record every graph break from Dynamo's own sinks (runs inside the child).

Dynamo reports a break in two places, both private and gated here:
- ``InstructionTranslatorBase.log_graph_break`` sees every tracing-time break,
  before Dynamo's duplicate suppression (hooked where it takes the exception,
  ``(code_options, reason, exc)``: torch 2.11 and later);
- ``convert_frame.log`` gets the "WON'T CONVERT" message of every frame Dynamo
  gives up on, the only place where e.g. GB0003 (generator) and GB0039
  (recompile limit) surface.
Where the first is missing or has another signature (torch 2.10: ``(code_options,
reason, user_stack)``; 2.9: a module function), the graph_breaks artifact log is
parsed instead, which gives lines but no columns.
"""

from __future__ import annotations

import inspect
import logging
import re
import sys
import traceback
from typing import Any

from gbfix import gbcodes

_CHILD_DIR = __file__.rsplit("/", 1)[0]
_WONT_CONVERT = re.compile(r"WON'T CONVERT (\S+) (.+?) line (\d+)")
_RESUME = re.compile(r"torch_dynamo_resume_in_(\w+?)_at_\d+$")


def _parse_message(text: str) -> tuple[str, list[str]]:
    """Explanation and hints out of an ``Unsupported`` message."""
    explanation, hints = "", []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Explanation:"):
            explanation = line[len("Explanation:") :].strip()
        elif line.startswith("Hint:"):
            hints.append(line[len("Hint:") :].strip())
    return explanation, hints


_ENCOUNTERED = "Graph break encountered:"
_WHILE_HANDLING = "*** While handling this graph break, another graph break occurred: ***"


def _handled_cause(reason: str) -> dict[str, Any] | None:
    """The first break of a "failed to handle graph break gracefully" reason.

    A break inside a loop is raised as GB7000 (graph break in loop); the break
    that started it (e.g. GB0170) exists only in the reason text, not as a
    chained exception.
    """
    head, sep, rest = reason.partition(_ENCOUNTERED)
    if not sep:
        return None
    inner = rest.split(_WHILE_HANDLING, 1)[0]
    gb_type = next((line.strip() for line in inner.splitlines() if line.strip()), "")
    if not gb_type:
        return None
    explanation, hints = _parse_message(inner)
    return {"code": gbcodes.code_for(gb_type, inner), "gb_type": gb_type, "explanation": explanation, "hints": hints}


def _causes(exc: BaseException, reason: str = "") -> list[dict[str, Any]]:
    """The chain of graph breaks behind ``exc``, outermost first."""
    out, seen = [], set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        gb_type = getattr(cur, "gb_type", None)
        if gb_type:
            text = str(cur)
            explanation, hints = _parse_message(text)
            out.append(
                {
                    "code": gbcodes.code_for(gb_type, text),
                    "gb_type": gb_type,
                    "explanation": explanation,
                    "hints": hints,
                }
            )
        cur = cur.__cause__ or cur.__context__
    handled = _handled_cause(reason)
    if out and handled and handled["gb_type"] != out[-1]["gb_type"]:
        out.append(handled)
    return out


def _frames(summaries) -> list[dict[str, Any]]:
    """User frames as dicts, resume functions collapsed into the function they resume."""
    out: list[dict[str, Any]] = []
    for fs in summaries:
        if not fs.filename or fs.filename.startswith(_CHILD_DIR) or fs.filename.startswith("<frozen"):
            continue
        m = _RESUME.match(fs.name or "")
        name = m.group(1) if m else fs.name
        frame = {
            "file": fs.filename,
            "line": fs.lineno,
            "col": getattr(fs, "colno", None),
            "end_col": getattr(fs, "end_colno", None),
            "name": name,
        }
        # A resume function is the same Python frame as the function it resumes.
        if out and out[-1]["name"] == name and out[-1]["file"] == fs.filename:
            out[-1] = frame
        else:
            out.append(frame)
    return out


def _stack_above_dynamo():
    try:
        from torch._dynamo.exc import get_stack_above_dynamo

        return list(get_stack_above_dynamo())
    except ImportError:  # pragma: no cover - moved in some release
        return [fs for fs in traceback.extract_stack() if "torch/_dynamo" not in fs.filename]


def _compile_id() -> str | None:
    try:
        from torch._guards import CompileContext

        cid = CompileContext.current_compile_id()
        return str(cid) if cid is not None else None
    except Exception:  # noqa: BLE001 - diagnostics only
        return None


class BreakRecorder:
    """Collects breaks as JSON-ready dicts, deduplicated on the code and the whole stack.

    Not on the leaf frame alone: a break inside a library (copy.py for
    deepcopy) has the same leaf for every user site that reaches it.
    """

    def __init__(self) -> None:
        self.breaks: list[dict[str, Any]] = []
        self._seen: set[tuple] = set()

    def add(self, record: dict[str, Any]) -> None:
        top = record["causes"][0]
        key = (top["code"] or top["gb_type"], *((f["file"], f["line"], f["col"]) for f in record["stack"]))
        if key not in self._seen:
            self._seen.add(key)
            self.breaks.append(record)

    def from_untyped(self, exc: BaseException, stack) -> None:
        self.add({"causes": [_untyped_cause(exc)], "stack": _frames(stack), "compile_id": _compile_id(), "frame_skipped": False})

    def from_exception(self, exc: BaseException, stack, frame_skipped: bool, reason: str = "") -> None:
        causes = _causes(exc, reason)
        if causes:
            self.add(
                {
                    "causes": causes,
                    "stack": _frames(stack),
                    "compile_id": _compile_id(),
                    "frame_skipped": frame_skipped,
                }
            )


def _untyped_cause(exc: BaseException) -> dict[str, Any]:
    """A break Dynamo raised without a registry entry (no ``gb_type``): typically
    a guard on a data-dependent value, e.g. ``if n in cache:`` on an unbacked
    ``int(t)`` once ``capture_scalar_outputs`` is on."""
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    data_dependent = "data-dependent" in text.lower() or "GuardOnDataDependentSymNode" in type(exc).__name__
    explanation = next((ln for ln in lines if "data-dependent" in ln.lower()), lines[0] if lines else "")
    return {
        "code": None,
        "gb_type": "Data-dependent expression" if data_dependent else type(exc).__name__,
        "explanation": explanation,
        "hints": [],
    }


def install(recorder: BreakRecorder) -> None:
    """Hook Dynamo's sinks (or, on a torch that moved them, parse the graph_breaks log)."""
    try:
        from torch._dynamo import convert_frame
        from torch._dynamo.symbolic_convert import InstructionTranslatorBase

        original = InstructionTranslatorBase.log_graph_break
        takes_exc = list(inspect.signature(original).parameters)[1:4] == ["code_options", "reason", "exc"]
    except (ImportError, AttributeError, TypeError, ValueError):
        takes_exc = False
    if not takes_exc:
        _install_log_fallback(recorder)
        return

    def log_graph_break(self, code_options, reason, exc):
        real = list(getattr(exc, "real_stack", None) or [])
        if getattr(exc, "gb_type", None):
            recorder.from_exception(exc, _stack_above_dynamo() + real, frame_skipped=False, reason=str(reason))
        elif exc is not None:
            recorder.from_untyped(exc, _stack_above_dynamo() + real)
        return original(self, code_options, reason, exc)

    InstructionTranslatorBase.log_graph_break = log_graph_break  # type: ignore[method-assign]  # Dynamo private API
    convert_frame.log = _WontConvertLog(convert_frame.log, recorder)  # type: ignore[assignment]  # Dynamo private API


class _WontConvertLog:
    """Stands in for ``convert_frame.log``; records the exception behind "WON'T CONVERT"."""

    def __init__(self, logger: logging.Logger, recorder: BreakRecorder) -> None:
        self._logger = logger
        self._recorder = recorder

    def __getattr__(self, name: str):
        return getattr(self._logger, name)

    def _record(self, msg: object) -> None:
        exc = sys.exc_info()[1]
        m = _WONT_CONVERT.match(str(msg))
        if exc is None or m is None or not getattr(exc, "gb_type", None):
            return
        real = list(getattr(exc, "real_stack", None) or [])
        if not real:
            # Skipped before tracing started (e.g. a generator): point at the def.
            real = [traceback.FrameSummary(m.group(2), int(m.group(3)), m.group(1), line="")]
        self._recorder.from_exception(exc, _stack_above_dynamo() + real, frame_skipped=True)

    def info(self, msg, *args, **kwargs):
        self._record(msg)
        return self._logger.info(msg, *args, **kwargs)

    def warning(self, msg, *args, **kwargs):
        self._record(msg)
        return self._logger.warning(msg, *args, **kwargs)


_LOG_LOC = re.compile(r"Graph break in user code at (.+):(\d+)")
_LOG_REASON = re.compile(r"Graph Break Reason: (.+)")


def _install_log_fallback(recorder: BreakRecorder) -> None:
    """Parse the graph_breaks artifact log: lines only, no columns."""
    import torch._logging

    torch._logging.set_logs(graph_breaks=True)

    class _Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            loc, why = _LOG_LOC.search(text), _LOG_REASON.search(text)
            if not (loc and why):
                return
            gb_type = why.group(1).strip()
            explanation, hints = _parse_message(text)
            cause = {
                "code": gbcodes.code_for(gb_type, text),
                "gb_type": gb_type,
                "explanation": explanation,
                "hints": hints,
            }
            frame = {"file": loc.group(1), "line": int(loc.group(2)), "col": None, "end_col": None, "name": ""}
            recorder.add({"causes": [cause], "stack": [frame], "compile_id": None, "frame_skipped": False})

    handler = _Handler()
    for name in ("torch._dynamo.symbolic_convert", "torch._dynamo.convert_frame"):
        logging.getLogger(name).addHandler(handler)
