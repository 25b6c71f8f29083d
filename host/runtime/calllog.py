"""The bounded log of one call: the ``log`` import, WASI stdout and stderr (docs/design.md §8).

Every byte the guest writes is counted against ``max_log_bytes``. What fits is kept (a
write that crosses the limit is cut at a UTF-8 boundary); the rest is dropped, counted,
and replaced by one marker line from the host. Writes never fail towards the guest: a
guest that floods its output keeps running (under fuel and deadline) but the host keeps
at most ``max_log_bytes``.

The log also watches for the messages language runtimes print when an allocation fails
(CPython ``MemoryError``, Rust ``memory allocation of N bytes failed``, C/JS
``out of memory``), in kept *and* dropped output, so a trap that follows can be reported
as SANDBOX_MEMORY (see :mod:`host.runtime.sandbox`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Final

from host.runtime.models import LogLevel, LogLine, LogSource

__all__ = ["OOM_MARKERS", "CallLog", "mentions_oom"]

OOM_MARKERS: Final = re.compile(
    rb"MemoryError|out of memory|memory allocation of \d+ bytes failed|Cannot allocate memory",
    re.IGNORECASE,
)
"""Messages language runtimes print when the allocator is refused memory."""

_STREAM_LEVEL: Final[dict[LogSource, LogLevel]] = {"stdout": "info", "stderr": "warn"}


def mentions_oom(text: str) -> bool:
    """Whether ``text`` contains an allocation-failure message (:data:`OOM_MARKERS`)."""
    return OOM_MARKERS.search(text.encode("utf-8", "replace")) is not None


class CallLog:
    """Collects one call's output up to ``max_bytes``.

    Args:
        max_bytes: bytes of guest output kept.

    Writers may be called from wasmtime's callbacks; a lock keeps the counters exact even
    if a future WASI implementation writes from another thread.
    """

    __slots__ = ("_dropped", "_entries", "_kept", "_lock", "_max", "_oom", "_partial")

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._kept = 0
        self._dropped = 0
        self._oom = False
        self._entries: list[tuple[LogSource, LogLevel, bytes]] = []
        self._partial: dict[LogSource, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self._lock = threading.Lock()

    @property
    def kept_bytes(self) -> int:
        """Bytes of guest output kept."""
        return self._kept

    @property
    def truncated(self) -> bool:
        """Whether any guest output was dropped."""
        return self._dropped > 0

    @property
    def saw_oom(self) -> bool:
        """Whether the guest printed an allocation-failure message (kept or dropped)."""
        return self._oom

    def _admit(self, data: bytes) -> bytes:
        """The part of ``data`` that fits; counts the rest as dropped. Lock held."""
        if not self._oom and OOM_MARKERS.search(data) is not None:
            self._oom = True
        room = self._max - self._kept
        if len(data) <= room:
            self._kept += len(data)
            return data
        cut = _utf8_prefix(data, max(room, 0))
        self._kept += len(cut)
        self._dropped += len(data) - len(cut)
        return cut

    def log(self, level: LogLevel, message: str) -> None:
        """Record a message from the ``log`` import."""
        data = message.encode("utf-8", "replace")
        with self._lock:
            kept = self._admit(data)
            if kept:
                self._entries.append(("log", level, kept))

    def writer(self, source: LogSource) -> Callable[[bytes], int]:
        """A WASI ``stdout_custom``/``stderr_custom`` callback for ``source``.

        The callback never raises (wasmtime-py prints exceptions from it) and always
        reports the whole write as done, so a flooding guest is not told to retry.
        """

        def write(data: bytes) -> int:
            size = len(data)
            try:
                self._write_stream(source, data)
            except Exception:  # noqa: S110  # must never raise into wasmtime; output is best effort
                pass
            return size

        return write

    def _write_stream(self, source: LogSource, data: bytes) -> None:
        with self._lock:
            kept = self._admit(bytes(data))
            if not kept:
                return
            buffer = self._partial[source]
            level = _STREAM_LEVEL[source]
            start = 0
            newline = kept.find(b"\n")
            while newline >= 0:
                buffer += kept[start:newline]
                self._entries.append((source, level, bytes(buffer)))
                buffer.clear()
                start = newline + 1
                newline = kept.find(b"\n", start)
            buffer += kept[start:]

    def lines(self, scrub: Callable[[str], str]) -> tuple[LogLine, ...]:
        """The log, in order: unfinished stream lines flushed, the marker last.

        Args:
            scrub: applied to every line's text (removes staged secret values).

        Returns:
            the lines.
        """
        with self._lock:
            entries = list(self._entries)
            for source, buffer in self._partial.items():
                if buffer:
                    entries.append((source, _STREAM_LEVEL[source], bytes(buffer)))
            dropped = self._dropped
        out = [
            LogLine(source=source, level=level, text=scrub(data.decode("utf-8", "replace")))
            for source, level, data in entries
        ]
        if dropped:
            out.append(
                LogLine(
                    source="host",
                    level="warn",
                    text=f"[log truncated: {dropped} bytes over the {self._max}-byte limit dropped]",
                )
            )
        return tuple(out)


def _utf8_prefix(data: bytes, limit: int) -> bytes:
    """The longest prefix of ``data`` of at most ``limit`` bytes that ends on a character."""
    if limit >= len(data):
        return data
    cut = limit
    # Step back over continuation bytes (10xxxxxx) so no character is split.
    while cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return data[:cut]
