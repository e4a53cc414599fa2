"""Record every recompile and its failing guards (runs inside the child).

Dynamo checks why a frame it compiled before must compile again in
``get_and_maybe_log_recompilation_reasons(cache_entries, frame, backend)``
(``convert_frame`` imports it by name), one reason per cache entry, most recent
entry first. Wrapping it gives each recompile, its compile id and the guard text;
``guard_manager.check_verbose(f_locals)`` gives the user stack that created the
failed guard (``torch._guards.Guard.user_stack``, kept on the leaf guard). Then
``exceeds_recompile_limit(cache_size, compile_id)`` says whether the frame hit
``recompile_limit`` (from then on it runs eagerly).

All of these are private: where one is missing (another torch), what it gave is
left out (no user stack; no limit flag) and ``notes`` says so; where the first is
missing, nothing is recorded.
"""

from __future__ import annotations

import re
from typing import Any

from gbfix.child.hooks import _compile_id, _frames, _stack_above_dynamo

MAX_RECOMPILES = 256  # per run: a program that recompiles forever still gives a small result
_COMMENT = re.compile(r"\s{2,}#\s")  # Dynamo's verbose guard: "<guard>   # <source line>  # <file>:<line> in <fn>"


def guard_text(reason: str) -> str:
    """The failed guard out of one of Dynamo's reasons (``"0/1: self.calls == 1   # ..."``)."""
    first = reason.split("\n", 1)[0]
    head, sep, rest = first.partition(": ")
    if sep and re.fullmatch(r"\[?\d+/\d+\]?(?:_\d+)?", head.strip()):
        first = rest
    return _COMMENT.split(first, 1)[0].strip()


class RecompileRecorder:
    """Recompiles as JSON-ready dicts (see ``gbfix.records.Recompile``)."""

    def __init__(self) -> None:
        self.recompiles: list[dict[str, Any]] = []
        self.notes: list[str] = []

    def add(self, cache_entries, frame, reasons: list[str]) -> None:
        if len(self.recompiles) >= MAX_RECOMPILES:
            return
        guards, seen = [], set()
        stacks = _user_stacks(cache_entries, frame, self.notes)
        for i, reason in enumerate(reasons):
            text = guard_text(reason)
            stack = stacks[i] if i < len(stacks) else None
            key = (text, tuple((f["file"], f["line"]) for f in stack or ()))
            if text and key not in seen:
                seen.add(key)
                guards.append({"text": text, "stack": stack or []})
        code = frame.f_code
        self.recompiles.append(
            {
                "function": code.co_name,
                "file": code.co_filename,
                "line": code.co_firstlineno,
                "compile_id": _compile_id(),
                "guards": guards,
                "stack": _frames(_stack_above_dynamo()),
                "limit": None,
            }
        )

    def limit_hit(self, limit_type: str, value: Any) -> None:
        """The frame of the latest recompile hit ``limit_type``: Dynamo runs it eagerly from now on."""
        cid = _compile_id()
        for rec in reversed(self.recompiles):
            if rec["compile_id"] == cid:
                rec["limit"] = f"{limit_type} ({value})"
                return


def _user_stacks(cache_entries, frame, notes: list[str]) -> list[list[dict[str, Any]] | None]:
    """Per cache entry, the user stack that created its failed guard (None: Dynamo kept none)."""
    out: list[list[dict[str, Any]] | None] = []
    for entry in cache_entries:
        try:
            info = entry.guard_manager.check_verbose(frame.f_locals)
            stack = getattr(info, "user_stack", None)
        except Exception:  # noqa: BLE001 - a deleted or foreign guard manager: no stack for it
            stack = None
        out.append(_frames(stack) if stack else None)
    return out


def install(recorder: RecompileRecorder) -> None:
    """Wrap Dynamo's recompile-reason and recompile-limit checks (where this torch has them)."""
    try:
        from torch._dynamo import config, convert_frame

        reasons_fn = convert_frame.get_and_maybe_log_recompilation_reasons
    except (ImportError, AttributeError):
        recorder.notes.append("this torch has no convert_frame.get_and_maybe_log_recompilation_reasons: recompiles not recorded")
        return

    def get_and_maybe_log_recompilation_reasons(cache_entries, frame, *args, **kwargs):
        reasons = reasons_fn(cache_entries, frame, *args, **kwargs)
        if not kwargs.get("skip_logging"):
            try:
                recorder.add(list(cache_entries), frame, list(reasons or ()))
            except Exception as e:  # noqa: BLE001 - recording must never change the program's run
                recorder.notes.append(f"a recompile was not recorded: {type(e).__name__}: {e}")
        return reasons

    convert_frame.get_and_maybe_log_recompilation_reasons = get_and_maybe_log_recompilation_reasons
    limit_fn = getattr(convert_frame, "exceeds_recompile_limit", None)
    if limit_fn is None:
        recorder.notes.append("this torch has no convert_frame.exceeds_recompile_limit: recompile-limit hits not flagged")
        return

    def exceeds_recompile_limit(*args, **kwargs):
        result = limit_fn(*args, **kwargs)
        try:
            exceeded, limit_type = result
            if exceeded:
                recorder.limit_hit(limit_type, getattr(config, limit_type, "?"))
        except Exception:  # noqa: BLE001, S110 - another return shape: no flag, the run goes on
            pass
        return result

    convert_frame.exceeds_recompile_limit = exceeds_recompile_limit
