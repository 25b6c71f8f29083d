"""Notice a newer lock generation accepted by another process (docs/design.md §4, §12).

A :class:`GenerationWatcher` runs one daemon thread that compares the store's accepted
generation (:meth:`~host.store.port.LockGenerationPort.current_generation`) with the
generation the caller runs (``current()``) and calls ``on_newer(generation)`` whenever
the store's is higher. It wakes:

- on a ``NOTIFY`` from the store, when the backend can listen (PostgreSQL: a
  :meth:`~host.store.postgres.PgLockGenerations.listen` connection; an accept in any
  process notifies at commit);
- every ``poll_s`` seconds otherwise, and also with a listener, so a notification lost
  while the listening connection was down is caught up by the next poll;
- at once on :meth:`stop` (a self-pipe shares the ``select`` with the listener), so
  closing a host never waits for a poll interval.

Errors never end the thread: an unreachable store is logged (once per outage) and
retried at the next wake; an exception from ``on_newer`` is logged. ``on_newer`` runs on
the watcher's thread and may take long (a reload compiles); it is called again at later
wakes while the store stays ahead, so it must decide itself whether a retry is useful.

Example::

    watcher = GenerationWatcher(store.locks, current=lambda: host.generation,
                                on_newer=reload, poll_s=5.0).start()
    ...
    watcher.stop()   # joins the thread
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable
from typing import Final, Protocol, runtime_checkable

from host.errors import StockadeError
from host.store.port import LockGenerationPort

__all__ = ["DEFAULT_POLL_S", "GenerationListener", "GenerationWatcher", "ListeningLocks"]

DEFAULT_POLL_S: Final = 5.0  # s between polls of the accepted generation
_JOIN_TIMEOUT_S: Final = 60.0  # s stop() waits for an on_newer in progress (a compile)

_log = logging.getLogger("stockade.reload")


@runtime_checkable
class GenerationListener(Protocol):
    """An open subscription to "a generation was accepted" notices."""

    def fileno(self) -> int:
        """A descriptor that becomes readable when a notice may have arrived."""
        ...

    def drain(self) -> int:
        """Consume the notices that arrived; return how many.

        Raises:
            StoreUnavailable: the subscription was lost (close it and listen again).
        """
        ...

    def close(self) -> None:
        """End the subscription. Idempotent."""
        ...


@runtime_checkable
class ListeningLocks(Protocol):
    """A lock-generation port that can push notices (the PostgreSQL backend)."""

    def listen(self) -> GenerationListener:
        """Subscribe to accept notices.

        Raises:
            StoreUnavailable: the store could not be reached.
        """
        ...


class GenerationWatcher:
    """Calls ``on_newer`` when the store holds a newer generation (see the module docstring).

    Args:
        locks: the store's lock-generation port.
        current: the generation the caller runs now.
        on_newer: called on the watcher thread with the store's newer generation.
        poll_s: seconds between polls (with a listener: between safety-net polls).
        name: the thread's name.
    """

    def __init__(
        self,
        locks: LockGenerationPort,
        *,
        current: Callable[[], int],
        on_newer: Callable[[int], None],
        poll_s: float = DEFAULT_POLL_S,
        name: str = "stockade-generation-watch",
    ) -> None:
        if not poll_s > 0:
            raise ValueError("poll_s must be positive")
        self._locks = locks
        self._current = current
        self._on_newer = on_newer
        self._poll_s = float(poll_s)
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._pipe_guard = threading.Lock()  # stop() writes and the thread closes under it
        self._started = False
        self._pipe_open = True
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._checks = 0
        self._checked = threading.Condition()
        self._troubles: set[str] = set()  # what is failing now ("listen", "read"), logged once

    @property
    def thread(self) -> threading.Thread:
        """The watcher's thread (not alive before :meth:`start` and after :meth:`stop`)."""
        return self._thread

    def wait_checks(self, more: int, *, timeout_s: float) -> bool:
        """Block until the watcher compared the generations ``more`` more times (each
        comparison finished, ``on_newer`` included); False if ``timeout_s`` passed first."""
        with self._checked:
            target = self._checks + more
            return self._checked.wait_for(lambda: self._checks >= target, timeout=timeout_s)

    def start(self) -> GenerationWatcher:
        """Start the thread; return self."""
        self._started = True
        self._thread.start()
        return self

    def stop(self, *, timeout_s: float = _JOIN_TIMEOUT_S) -> None:
        """Stop the thread and wait for it (an ``on_newer`` in progress finishes first).
        Idempotent; a no-op on the watcher's own thread (it ends when ``on_newer`` returns).
        """
        with self._pipe_guard:
            if not self._stopping.is_set():
                self._stopping.set()
                if self._pipe_open:
                    os.write(self._wake_w, b"x")  # the thread closes the pipe once it sees stopping
                if not self._started:
                    self._close_pipe()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
            if self._thread.is_alive():  # pragma: no cover - a reload stuck for a minute
                _log.error("the generation watcher did not stop within %.0f s", timeout_s)

    def _run(self) -> None:
        listener: GenerationListener | None = None
        try:
            while not self._stopping.is_set():
                if listener is None:
                    listener = self._listen()
                self._check()
                with self._checked:
                    self._checks += 1
                    self._checked.notify_all()
                if not self._wait(listener) and listener is not None:
                    listener.close()
                    listener = None
        finally:
            if listener is not None:
                listener.close()
            with self._pipe_guard:
                self._close_pipe()

    def _close_pipe(self) -> None:
        if self._pipe_open:
            self._pipe_open = False
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _listen(self) -> GenerationListener | None:
        if not isinstance(self._locks, ListeningLocks):
            return None
        try:
            listener = self._locks.listen()
        except StockadeError as exc:
            self._trouble("listen", f"cannot listen for lock generations, polling every {self._poll_s:g} s: "
                          f"{exc.message}")
            return None
        self._recovered("listen")
        return listener

    def _check(self) -> None:
        try:
            accepted = self._locks.current_generation()
        except StockadeError as exc:
            self._trouble("read", f"cannot read the accepted lock generation: {exc.message}")
            return
        self._recovered("read")
        if accepted is not None and accepted > self._current() and not self._stopping.is_set():
            try:
                self._on_newer(accepted)
            except Exception:  # the thread must outlive a faulty callback
                _log.exception("handling lock generation %d failed", accepted)

    def _wait(self, listener: GenerationListener | None) -> bool:
        """Wait for a notice, a stop or the poll interval; False when the listener broke."""
        fds = [self._wake_r] if listener is None else [self._wake_r, listener.fileno()]
        ready, _, _ = select.select(fds, [], [], self._poll_s)
        if listener is None or listener.fileno() not in ready:
            return True
        try:
            listener.drain()
        except StockadeError as exc:
            self._trouble("listen", f"lost the lock generation listener: {exc.message}")
            return False
        return True

    def _trouble(self, kind: str, message: str) -> None:
        if kind not in self._troubles:
            _log.error("%s", message)
            self._troubles.add(kind)

    def _recovered(self, kind: str) -> None:
        if kind in self._troubles:
            self._troubles.discard(kind)
            _log.warning("the lock generation watcher works again (%s)", kind)
