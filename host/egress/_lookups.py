"""A small pool of resolver threads that callers may abandon.

``getaddrinfo`` cannot be interrupted, so a lookup that must finish before a deadline runs
in a worker thread; the caller waits at most until the deadline and then walks away. The
pool keeps at most ``size`` threads, busy ones (abandoned lookups included) and idle ones;
when every thread is busy, :meth:`LookupPool.run` refuses at once instead of queueing, so
a resolver that hangs can never pile up threads or delay later calls. Idle threads are
reused (a hand-off costs about 20 µs, a new thread about 65 µs here) and exit after
:data:`IDLE_EXIT_S` without work.

Example::

    pool = LookupPool(32)
    answer = pool.run(lambda: resolver(host), timeout=0.5)   # raises LookupBusy/LookupTimeout
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Final, TypeVar

__all__ = ["IDLE_EXIT_S", "LookupBusy", "LookupPool", "LookupTimeout"]

IDLE_EXIT_S: Final = 30.0  # s an idle worker waits for work before it exits

_T = TypeVar("_T")


class LookupBusy(Exception):
    """Every worker is busy (hung lookups included): the lookup was not started."""


class LookupTimeout(Exception):
    """The lookup did not finish in time; its worker is abandoned (it ends on its own)."""


class _Job:
    __slots__ = ("done", "error", "fn", "value")

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.value: object = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as exc:  # handed to the waiting caller, re-raised there
            self.error = exc
        finally:
            self.done.set()


class LookupPool:
    """At most ``size`` daemon worker threads running lookups for callers with deadlines.

    Args:
        size: the most threads alive at once, busy or idle.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self._size = size
        self._cond = threading.Condition()
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._threads = 0
        self._idle = 0

    def run(self, fn: Callable[[], _T], *, timeout: float) -> _T:
        """Run ``fn`` in a worker and wait at most ``timeout`` seconds for it.

        Raises:
            LookupBusy: no worker is free and the pool is full.
            LookupTimeout: ``fn`` did not return in time (it keeps running, abandoned).
            BaseException: whatever ``fn`` raised.

        Returns:
            What ``fn`` returned.
        """
        job = _Job(fn)
        self._dispatch(job)
        if not job.done.wait(timeout):
            raise LookupTimeout(f"no answer within {timeout:.3f} s")
        if job.error is not None:
            raise job.error
        return job.value  # type: ignore[return-value]  # _Job stores fn's _T result

    def wait_quiet(self, timeout: float) -> bool:
        """Wait until no lookup is running (for tests); True if that happened in time."""
        with self._cond:
            return self._cond.wait_for(lambda: self._threads == self._idle, timeout)

    def _dispatch(self, job: _Job) -> None:
        with self._cond:
            if self._idle > 0:
                self._idle -= 1  # reserve an idle worker: it will take this job
                start = False
            elif self._threads < self._size:
                self._threads += 1
                start = True
            else:
                raise LookupBusy(f"all {self._size} lookup workers are busy")
        if start:
            try:
                threading.Thread(target=self._work, name="stockade-dns", daemon=True).start()
            except RuntimeError:
                with self._cond:
                    self._threads -= 1
                    self._cond.notify_all()
                raise LookupBusy("cannot start a lookup worker") from None
        self._jobs.put(job)

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=IDLE_EXIT_S)
            except queue.Empty:
                with self._cond:
                    if self._idle > 0:  # nobody reserved us: exit
                        self._idle -= 1
                        self._threads -= 1
                        self._cond.notify_all()
                        return
                continue  # a job was reserved for an idle worker: take it
            job.run()
            with self._cond:
                self._idle += 1
                self._cond.notify_all()
