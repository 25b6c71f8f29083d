"""Structured log lines: one JSON object per record, with the trace id inside a span.

``stockade serve --log-format json`` puts :class:`JsonFormatter` on stderr (behind the
rate limit of repeated messages, :class:`host.mcp.limits.RateLimitedLog`), so a log
pipeline can parse every line and join it to its trace.

A line holds ``time`` (RFC 3339, UTC, milliseconds), ``level``, ``logger``, ``message``
and, when the record was logged inside a recorded span, ``trace_id`` and ``span_id``. Of
an exception only its type is kept (``exception``): an exception's message or traceback
can quote an input value, and host log messages are written to carry none
(``CONTRIBUTING.md principle 11``).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Final

from host import observe

__all__ = ["JsonFormatter"]

_LEVELS: Final = {logging.WARNING: "warn", logging.CRITICAL: "fatal"}


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one JSON object, without a trailing newline."""
        seconds = int(record.created)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        line: dict[str, Any] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": _LEVELS.get(record.levelno, record.levelname.lower()),
            "logger": record.name,
            "message": record.getMessage(),
        }
        ids = observe.span_ids()
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        if record.exc_info and record.exc_info[0] is not None:
            line["exception"] = record.exc_info[0].__name__
        return json.dumps(line, ensure_ascii=False, separators=(",", ":"))
