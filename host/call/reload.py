"""A running Host follows the fleet's lock generation (docs/design.md §4, §12).

When another process accepts a newer lock generation in the shared state store, a Host
that follows generations (opt-in: :meth:`host.Host.follow_generations`) reloads its lock
through the normal checks and switches between calls:

- **notice**: a :class:`~host.store.watch.GenerationWatcher` (PostgreSQL: ``LISTEN``/
  ``NOTIFY`` plus a safety-net poll; local: polling) reports that the store's accepted
  generation is above the one the Host runs;
- **checks**: :meth:`Host.open <host.Host.open>` runs again on the same lock path and
  store — digests, signatures, the lock rules (rollback, fork, package downgrade; never
  ``unsafe_accept_rollback``), compile, ``lock.accepted`` audit record. The new
  generation is built completely beside the running one;
- **switch**: the Host waits for calls in flight to finish, holds new ones for the
  moment of the swap (:class:`CallGate`), and exchanges its registry, components and MCP
  sources with the new ones in one step; the old ones are closed afterwards. A call never
  mixes generations. A plan prepared on the old generation is refused by
  :meth:`Host.execute <host.Host.execute>` (APPROVAL_REQUIRED: "the action changed since
  it was prepared"), because its binding — part of the action digest — names the old
  generation; an approval issued for it authorizes nothing on the new one;
- **refusal**: a reload that fails a check (tampered or missing newer lock, unsigned,
  downgrade, compile error, store down) changes nothing: the old generation keeps
  running, the refusal is logged (``stockade.reload``, ERROR) and audited as
  ``lock.reload_refused`` (``generation`` announced, ``running``, ``code``, ``message``),
  and it is not retried until the store announces a newer generation or the lock file
  changes.

Every outcome is a :class:`ReloadEvent`, passed to ``on_reload`` and kept for
:meth:`GenerationFollower.wait`. :meth:`Host.close <host.Host.close>` stops the watcher
thread (joined, nothing leaks).

Example::

    host = Host.open("stockade.lock", config=config, secrets=None, policy=policy, store=store)
    follower = host.follow_generations()
    ...                      # another process accepts generation N+1
    follower.wait(1, timeout_s=30)   # [ReloadEvent(ok=True, generation=N+1, ...)]
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

from host.errors import StockadeError
from host.store.watch import DEFAULT_POLL_S, GenerationWatcher

if TYPE_CHECKING:
    from host.store.port import StateStore

__all__ = ["CallGate", "Followed", "GenerationFollower", "ReloadEvent", "Reopener", "between_swaps"]

_log = logging.getLogger("stockade.reload")


class CallGate:
    """Calls share the gate; a generation swap takes it alone, between calls.

    A waiting swap holds back new calls (so a busy host still swaps, after the calls in
    flight finish); a thread already inside a call may enter again (no self-deadlock).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._calls = 0
        self._swapping = False
        self._mine = threading.local()

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the gate for one call."""
        depth: int = getattr(self._mine, "depth", 0)
        if depth == 0:
            with self._cond:
                self._cond.wait_for(lambda: not self._swapping)
                self._calls += 1
        self._mine.depth = depth + 1
        try:
            yield
        finally:
            self._mine.depth = depth
            if depth == 0:
                with self._cond:
                    self._calls -= 1
                    if self._calls == 0:
                        self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the gate alone: wait for the calls in flight, hold back new ones."""
        with self._cond:
            self._cond.wait_for(lambda: not self._swapping)
            self._swapping = True
            self._cond.notify_all()  # observers (tests) may wait for a pending swap
            self._cond.wait_for(lambda: self._calls == 0)
        try:
            yield
        finally:
            with self._cond:
                self._swapping = False
                self._cond.notify_all()


class _Gated(Protocol):
    _gate: CallGate


_G = TypeVar("_G", bound=_Gated)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def between_swaps(method: Callable[Concatenate[_G, _P], _R]) -> Callable[Concatenate[_G, _P], _R]:
    """Run a Host method holding its :class:`CallGate` (shared): a generation swap waits
    for it, and it never sees half of one."""

    @functools.wraps(method)
    def gated(self: _G, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._gate.shared():
            return method(self, *args, **kwargs)

    return gated


class Followed(Protocol):
    """What the follower reads and calls of the Host it reloads (:class:`host.Host`).

    This module sits below the Host in the pipeline (:mod:`host.call`), so it names the
    Host by what it uses, and :class:`Reopener` receives ``Host.open`` as a callable.
    """

    @property
    def generation(self) -> int:
        """The lock generation the Host runs."""
        ...

    @property
    def store(self) -> StateStore:
        """The state store whose accepted generation is followed."""
        ...

    def _adopt(self, fresh: Any) -> bool:
        """Swap in ``fresh``'s generation between calls; False once the Host is closed."""
        ...


@dataclass(frozen=True)
class Reopener:
    """Opens the lock again with the arguments a Host was opened with (store not owned).

    Args:
        lock: the lock path the Host was opened from.
        options: the keyword arguments it was opened with.
        opener: opens a Host (``Host.open``).
    """

    lock: Path
    options: Mapping[str, Any]
    opener: Callable[..., Followed]

    def __call__(self) -> Followed:
        return self.opener(self.lock, **self.options)

    def fingerprint(self) -> tuple[int, int, int] | None:
        """(mtime, size, inode) of the lock file: a changed file is worth another attempt."""
        try:
            st = os.stat(self.lock)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)


@dataclass(frozen=True)
class ReloadEvent:
    """One reload attempt.

    Attributes:
        ok: the new generation runs now.
        generation: the generation the store announced.
        running: the generation the Host runs after the attempt.
        code: the error code of a refusal (None when ok).
        message: the refusal's message (None when ok).
    """

    ok: bool
    generation: int
    running: int
    code: str | None = None
    message: str | None = None


class GenerationFollower:
    """Reloads ``host`` when the store holds a newer generation (see the module docstring).

    Args:
        host: the Host to reload in place.
        reopen: opens the Host's lock again (:class:`Reopener`).
        poll_s: seconds between polls of the store (with PostgreSQL notices: the
            safety net for a notice lost while disconnected).
        on_reload: called with every :class:`ReloadEvent`, on the watcher's thread.
    """

    def __init__(
        self,
        host: Followed,
        reopen: Reopener,
        *,
        poll_s: float = DEFAULT_POLL_S,
        on_reload: Callable[[ReloadEvent], None] | None = None,
    ) -> None:
        self._host = host
        self._reopen = reopen
        self._on_reload = on_reload
        self._tried: tuple[int, tuple[int, int, int] | None] | None = None
        self._events: list[ReloadEvent] = []
        self._changed = threading.Condition()
        self._watcher = GenerationWatcher(
            host.store.locks, current=lambda: host.generation, on_newer=self._newer, poll_s=poll_s
        )

    @property
    def watcher(self) -> GenerationWatcher:
        """The watcher (its thread is not alive once the Host is closed)."""
        return self._watcher

    @property
    def thread(self) -> threading.Thread:
        """The watcher thread (not alive once the Host is closed)."""
        return self._watcher.thread

    @property
    def events(self) -> list[ReloadEvent]:
        """Every reload attempt so far, oldest first."""
        with self._changed:
            return list(self._events)

    def start(self) -> GenerationFollower:
        """Start watching; return self."""
        self._watcher.start()
        return self

    def stop(self) -> None:
        """Stop watching (a reload in progress finishes or is discarded first). Idempotent."""
        self._watcher.stop()

    def wait(self, count: int, *, timeout_s: float) -> list[ReloadEvent]:
        """Block until at least ``count`` reload attempts happened (or ``timeout_s``
        passed); return the attempts so far."""
        with self._changed:
            self._changed.wait_for(lambda: len(self._events) >= count, timeout=timeout_s)
            return list(self._events)

    def _newer(self, announced: int) -> None:
        attempt = (announced, self._reopen.fingerprint())
        if attempt == self._tried:
            return  # refused already; wait for a newer generation or a changed lock file
        self._tried = attempt
        running = self._host.generation
        try:
            fresh = self._reopen()
        except StockadeError as exc:
            self._refused(announced, running, exc)
            return
        generation = fresh.generation
        if not self._host._adopt(fresh):  # the Host's hook for this module
            return  # the host closed meanwhile
        _log.warning("lock generation %d loaded (was %d), announced by the store", generation, running)
        self._record(ReloadEvent(ok=True, generation=announced, running=generation))

    def _refused(self, announced: int, running: int, exc: StockadeError) -> None:
        _log.error(
            "lock generation %d announced by the store was refused, keeping generation %d: %s: %s",
            announced, running, exc.code, exc.message,
        )
        try:
            self._host.store.audit.append(
                "lock.reload_refused",
                {"generation": announced, "running": running, "code": exc.code, "message": exc.message},
            )
        except StockadeError as failure:
            _log.error("could not audit the refused reload: %s: %s", failure.code, failure.message)
        self._record(ReloadEvent(False, announced, running, exc.code, exc.message))

    def _record(self, event: ReloadEvent) -> None:
        with self._changed:
            self._events.append(event)
            self._changed.notify_all()
        if self._on_reload is not None:
            self._on_reload(event)
