"""Peak resident memory of a piece of work, measured by the kernel (Linux).

:func:`peak_rss_growth` resets the process's peak RSS (``VmHWM``, by writing ``5`` to
``/proc/self/clear_refs``), runs the work and returns how far the peak rose above the RSS
before it: every allocation counts (C buffers of zlib, httpx2 and pydantic included), not
only Python objects as with tracemalloc.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")
MiB = 1024 * 1024


def _status_kib(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    if match is None:
        pytest.skip(f"/proc/self/status has no {field}")
    return int(match.group(1))


def peak_rss_growth(work: Callable[[], T]) -> tuple[T, int]:
    """Run ``work``; return its result and the peak RSS growth in bytes while it ran."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pytest.skip("the peak RSS cannot be reset here (/proc/self/clear_refs)")
    before = _status_kib("VmRSS")
    result = work()
    return result, (_status_kib("VmHWM") - before) * 1024
