"""One-shot signals from a server process to a test, through a FIFO (no sleeps, bounded waits).

The test creates the FIFO and opens its read end (non-blocking) *before* the server can
write; the server opens the write end, writes one byte and closes it. :meth:`Signal.wait`
blocks in ``select`` until that byte arrives or ``timeout_s`` passes.
"""

from __future__ import annotations

import os
import select
from pathlib import Path

__all__ = ["Signal"]


class Signal:
    """A FIFO at ``path`` whose one byte says that something happened in another process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path, 0o600)
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)

    def wait(self, timeout_s: float = 30.0) -> bool:
        """Whether the byte arrived within ``timeout_s``."""
        try:
            ready, _, _ = select.select([self._fd], [], [], timeout_s)
            return bool(ready) and os.read(self._fd, 1) == b"x"
        finally:
            os.close(self._fd)
