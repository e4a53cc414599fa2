"""Record the log records and warnings the program emits (runs inside the child).

Both are compared between runs: a rewrite that drops, duplicates or changes a
log line or a warning is not behaviour-preserving.
"""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Any


def _is_torch_internal(name_or_path: str) -> bool:
    return name_or_path == "torch" or name_or_path.startswith("torch.") or "/torch/" in name_or_path


class OutputCapture:
    def __init__(self) -> None:
        self.logs: list[dict[str, Any]] = []
        self.warnings: list[dict[str, Any]] = []

    def install(self) -> None:
        # callHandlers runs once a record passed the logger's level and filters:
        # exactly the records that get emitted, whatever handlers exist.
        original_call = logging.Logger.callHandlers
        logs = self.logs

        def call_handlers(logger: logging.Logger, record: logging.LogRecord) -> None:
            if not _is_torch_internal(record.name):
                logs.append({"logger": record.name, "level": record.levelname, "message": record.getMessage()})
            original_call(logger, record)

        logging.Logger.callHandlers = call_handlers  # type: ignore[method-assign, assignment]

        # warnings.warn ends in warnings._showwarnmsg also under catch_warnings
        # (pytest records warnings that way), unlike warnings.showwarning.
        original_show = warnings._showwarnmsg  # type: ignore[attr-defined]
        seen = self.warnings

        def show(msg: warnings.WarningMessage) -> None:
            # Who called warnings.warn (a C function, so the next frame up),
            # not where the warning points: stacklevel can point anywhere.
            caller = sys._getframe(1).f_code.co_filename
            if not _is_torch_internal(caller):
                seen.append({"category": msg.category.__name__, "message": str(msg.message)})
            original_show(msg)

        warnings._showwarnmsg = show  # type: ignore[attr-defined]
