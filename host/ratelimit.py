"""Per (principal, tool) rate limits over a minute and an hour (docs/design.md §6 step 7).

Each window is a *sliding* window kept as counters in fixed buckets (1 s buckets for the
minute, 60 s buckets for the hour). A call is admitted when, for each window, the calls
counted in the current bucket and the previous 60 buckets stay under the limit; both
windows are consumed together, or neither. Counting one bucket beyond the window is
conservative: a call is counted for up to one bucket width longer than the window
(at most 61 s for the minute window, 61 min for the hour), never shorter, so no 60 s
(or 3600 s) span ever holds more calls than the limit. The memory per key is at most
122 counters whatever the limits are.

A refusal is :class:`~host.errors.RateLimited` with ``details["retry_after_s"]``: the
time after which the same call would be admitted if nothing else is consumed.

Memory is bounded: keys whose buckets have all expired are pruned, and at most
:data:`MAX_KEYS` (principal, tool) keys are tracked; when the table is full of live
keys a call under a new key is refused (fail closed) rather than forgetting counts.

Example::

    limiter = RateLimiter()
    limiter.check_and_consume(("p", "alice"), "tracker.list-issues", per_minute=60, per_hour=1000)
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from host.errors import RateLimited

__all__ = ["MAX_KEYS", "RateLimiter"]

MAX_KEYS = 100_000  # (principal, tool) keys tracked at once
_PRUNE_EVERY = 1024  # calls between sweeps of expired keys
_BUCKETS = 60  # buckets per window (the window spans the current one and 60 before it)


@dataclass(frozen=True, slots=True)
class _Window:
    name: str
    width_s: float  # seconds per bucket; the window is _BUCKETS * width_s


_MINUTE = _Window("minute", 1.0)
_HOUR = _Window("hour", 60.0)


@dataclass(slots=True)
class _Counts:
    minute: dict[int, int] = field(default_factory=dict)
    hour: dict[int, int] = field(default_factory=dict)


def _prune(buckets: dict[int, int], current: int) -> None:
    oldest = current - _BUCKETS
    for index in [i for i in buckets if i < oldest]:
        del buckets[index]


def _retry_after(buckets: dict[int, int], limit: int, window: _Window, now: float) -> float:
    """Seconds until enough old buckets leave the window for one more call."""
    remaining = sum(buckets.values())
    for index in sorted(buckets):
        remaining -= buckets[index]
        if remaining < limit:
            leaves_at = (index + _BUCKETS + 1) * window.width_s
            # Rounded up to the millisecond so that now + retry_after is admitted.
            return max(math.ceil((leaves_at - now) * 1000.0) / 1000.0, 0.0)
    return window.width_s * (_BUCKETS + 1)  # pragma: no cover - unreachable for limit >= 1


def _check_limit(name: str, value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int or None, got {value!r}")


class RateLimiter:
    """Thread-safe per (principal, tool) minute and hour limits.

    Args:
        clock: monotonic seconds (inject a fake in tests).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[tuple[tuple[str, str], str], _Counts] = {}
        self._calls = 0

    def check_and_consume(
        self, principal_key: tuple[str, str], tool: str, *, per_minute: int | None, per_hour: int | None
    ) -> None:
        """Admit one call of ``tool`` by ``principal_key`` and count it, or refuse it.

        Args:
            principal_key: ``(project, subject)`` of the principal.
            tool: the exact tool name.
            per_minute: calls allowed in any 60 s; ``None`` for no minute limit.
            per_hour: calls allowed in any 3600 s; ``None`` for no hour limit.

        Raises:
            RateLimited: a window is full (nothing is counted); ``details`` carry
                ``retry_after_s``, ``window``, ``limit`` and ``tool``.
            ValueError: a limit that is not a positive int or None.
        """
        _check_limit("per_minute", per_minute)
        _check_limit("per_hour", per_hour)
        if per_minute is None and per_hour is None:
            return
        key = (principal_key, tool)
        with self._lock:
            now = float(self._clock())
            self._maybe_sweep(now)
            counts = self._keys.get(key)
            if counts is None:
                if len(self._keys) >= MAX_KEYS:
                    self._sweep(now)
                if len(self._keys) >= MAX_KEYS:
                    raise RateLimited(
                        "too many callers are being rate limited at once; try again shortly",
                        retry_after_s=1.0, window="minute", limit=per_minute or per_hour, tool=tool,
                    )
                counts = _Counts()
            checks = ((_MINUTE, counts.minute, per_minute), (_HOUR, counts.hour, per_hour))
            refusals: list[tuple[float, _Window, int]] = []
            for window, buckets, limit in checks:
                if limit is None:
                    continue
                _prune(buckets, math.floor(now / window.width_s))
                if sum(buckets.values()) >= limit:
                    refusals.append((_retry_after(buckets, limit, window, now), window, limit))
            if refusals:
                retry, window, limit = max(refusals, key=lambda r: r[0])
                raise RateLimited(
                    f"{tool} may be called {limit} times per {window.name}; retry in {retry:.3f} s",
                    retry_after_s=retry, window=window.name, limit=limit, tool=tool,
                )
            for window, buckets, limit in checks:
                if limit is not None:
                    index = math.floor(now / window.width_s)
                    buckets[index] = buckets.get(index, 0) + 1
            self._keys[key] = counts

    def _maybe_sweep(self, now: float) -> None:
        self._calls += 1
        if self._calls % _PRUNE_EVERY == 0:
            self._sweep(now)

    def _sweep(self, now: float) -> None:
        minute_now = math.floor(now / _MINUTE.width_s)
        hour_now = math.floor(now / _HOUR.width_s)
        for key in list(self._keys):
            counts = self._keys[key]
            _prune(counts.minute, minute_now)
            _prune(counts.hour, hour_now)
            if not counts.minute and not counts.hour:
                del self._keys[key]

    def tracked_keys(self) -> int:
        """How many (principal, tool) keys hold live counts (for tests and metrics)."""
        with self._lock:
            return len(self._keys)
