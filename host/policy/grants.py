"""Session grants ("always, for this session") and the final policy verdict (docs/design.md §6 step 4).

A person answering an approval prompt with "always" grants that tool for the rest of the
session. A grant is keyed by (principal, session, tool) — principal being
``(project, subject)`` — so it never crosses sessions or principals, and it only
*discharges ask*: it is not an input to the deny/disabled decision at all.
:func:`final_decision` is the one place the gateway combines the engine's verdict, the
tool policy's mode and the grant, and a deny or disabled always wins there, whatever
was granted before (tightening a tool to ``disabled`` after "always" takes effect on the
next call).

Bounds (no grant is unbounded): each grant ends ``ttl_s`` after it was given (default
:data:`DEFAULT_GRANT_TTL_S`, 8 h; at most 7 days) and may carry a call count
(``max_calls``), counted once per call by :meth:`SessionGrants.consume` when the Host
runs a call the grant discharged; :meth:`SessionGrants.revoke` ends one grant,
:meth:`SessionGrants.clear_grants` many. The Host records ``session_grant.granted`` and
``session_grant.revoked``; each use is its call's outcome record (``discharged_by:
"session_grant"``).

Memory is bounded: at most :data:`MAX_GRANT_KEYS` (principal, session) pairs and
:data:`MAX_TOOLS_PER_SESSION` tools per pair; beyond that the oldest pair is dropped,
which only means a person is asked again (the safe direction).

Example::

    grants = SessionGrants()
    grants.grant(("p", "alice"), "s1", "tracker.create-issue")
    final_decision(Verdict.REQUIRE_APPROVAL, ToolMode.ASK,
                   grants.discharges(("p", "alice"), "s1", "tracker.create-issue"))  # "allow"
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from host.policy.engine import Verdict
from host.policy.toolpolicy import ToolMode

__all__ = [
    "DEFAULT_GRANT_TTL_S",
    "MAX_GRANT_KEYS",
    "MAX_TOOLS_PER_SESSION",
    "FinalVerdict",
    "SessionGrants",
    "check_grant_bounds",
    "final_decision",
]

MAX_GRANT_KEYS = 100_000  # (principal, session) pairs holding grants
MAX_TOOLS_PER_SESSION = 1024  # tools granted in one (principal, session)

FinalVerdict = Literal["allow", "approval", "deny"]

_PrincipalKey = tuple[str, str]


def _check_key(principal_key: object, session: object, tool: object | None = None) -> None:
    if (
        not isinstance(principal_key, tuple)
        or len(principal_key) != 2
        or not all(isinstance(part, str) and part for part in principal_key)
    ):
        raise TypeError("principal_key must be a (project, subject) tuple of non-empty strings")
    if not isinstance(session, str) or not session:
        raise TypeError("session must be a non-empty string")
    if tool is not None and (not isinstance(tool, str) or not tool):
        raise TypeError("tool must be a non-empty string")


DEFAULT_GRANT_TTL_S: Final = 8 * 3600.0
"""s a session grant lasts unless the host app says otherwise: a working day. "Always, for
this session" was unbounded before; a session left open overnight (or a token reused
by an unattended job) no longer keeps it."""
MAX_GRANT_TTL_S: Final = 7 * 86_400.0  # s, the longest a session grant may be given for
MAX_GRANT_CALLS: Final = 1_000_000  # calls one session grant may allow


def check_grant_bounds(ttl_s: object, max_calls: object) -> None:
    """Refuse a grant that would never end or never run out.

    Raises:
        ValueError: ``ttl_s`` not a positive, finite number of seconds up to
            :data:`MAX_GRANT_TTL_S`; ``max_calls`` neither ``None`` nor an int in
            1..:data:`MAX_GRANT_CALLS` (caller misuse: the host app passes these).
    """
    finite = not isinstance(ttl_s, bool) and isinstance(ttl_s, (int, float)) and math.isfinite(ttl_s)
    if not finite or not 0 < ttl_s <= MAX_GRANT_TTL_S:  # type: ignore[operator]  # checked numeric
        raise ValueError(f"ttl_s must be a positive, finite number of seconds up to {MAX_GRANT_TTL_S:g}")
    if max_calls is not None and (
        isinstance(max_calls, bool) or not isinstance(max_calls, int) or not 1 <= max_calls <= MAX_GRANT_CALLS
    ):
        raise ValueError(f"max_calls must be None or an int in 1..{MAX_GRANT_CALLS}")


@dataclass(slots=True)
class _Grant:
    expires_at: float
    remaining: int | None  # None: no count


class SessionGrants:
    """Thread-safe "always for this session" grants; they discharge *ask* only.

    Each grant has an end (``ttl_s``, default :data:`DEFAULT_GRANT_TTL_S`) and optionally
    a call count (``max_calls``); :meth:`consume` counts a use, :meth:`revoke` ends one.

    Args:
        clock: the time source (injected in tests).
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._grants: OrderedDict[tuple[_PrincipalKey, str], dict[str, _Grant]] = OrderedDict()
        self._clock = clock

    def grant(
        self,
        principal_key: tuple[str, str],
        session: str,
        tool: str,
        *,
        ttl_s: float = DEFAULT_GRANT_TTL_S,
        max_calls: int | None = None,
    ) -> None:
        """Record "always" for ``tool`` in ``session`` of ``principal_key``, for ``ttl_s``
        seconds and at most ``max_calls`` calls (``None``: no count); a new grant replaces
        the old one.

        Raises:
            TypeError: an empty or non-string part.
            ValueError: an unbounded ``ttl_s`` or a bad ``max_calls`` (:func:`check_grant_bounds`).
        """
        _check_key(principal_key, session, tool)
        check_grant_bounds(ttl_s, max_calls)
        key = (principal_key, session)
        with self._lock:
            tools = self._grants.get(key)
            if tools is None:
                tools = self._grants[key] = {}
                while len(self._grants) > MAX_GRANT_KEYS:
                    self._grants.popitem(last=False)
            else:
                self._grants.move_to_end(key)
            if tool not in tools and len(tools) >= MAX_TOOLS_PER_SESSION:
                del tools[next(iter(tools))]
            tools[tool] = _Grant(self._clock() + float(ttl_s), max_calls)

    def _live(self, principal_key: tuple[str, str], session: str, tool: str) -> _Grant | None:
        tools = self._grants.get((principal_key, session))
        grant = None if tools is None else tools.get(tool)
        if grant is None or not self._clock() < grant.expires_at:
            return None
        return grant if grant.remaining is None or grant.remaining > 0 else None

    def discharges(self, principal_key: tuple[str, str], session: str, tool: str) -> bool:
        """Whether a live grant (unexpired, calls left) exists for exactly this principal,
        session and tool.

        Raises:
            TypeError: an empty or non-string part.
        """
        _check_key(principal_key, session, tool)
        with self._lock:
            return self._live(principal_key, session, tool) is not None

    def consume(self, principal_key: tuple[str, str], session: str, tool: str) -> int | None:
        """Count one use of the grant, atomically.

        Returns:
            The calls left (``-1``: no live grant, nothing counted; ``None``: a live grant
            without a count).

        Raises:
            TypeError: an empty or non-string part.
        """
        _check_key(principal_key, session, tool)
        with self._lock:
            grant = self._live(principal_key, session, tool)
            if grant is None:
                return -1
            if grant.remaining is None:
                return None
            grant.remaining -= 1
            return grant.remaining

    def revoke(self, principal_key: tuple[str, str], session: str, tool: str) -> bool:
        """End one grant; whether there was one.

        Raises:
            TypeError: an empty or non-string part.
        """
        _check_key(principal_key, session, tool)
        with self._lock:
            tools = self._grants.get((principal_key, session))
            return tools is not None and tools.pop(tool, None) is not None

    def clear_grants(
        self, session: str | None = None, *, principal_key: tuple[str, str] | None = None
    ) -> int:
        """Forget grants: of one session, of one principal, of both, or all (logout).

        Args:
            session: only this session (of every principal); ``None`` for every session.
            principal_key: only this principal; ``None`` for every principal.

        Returns:
            How many (principal, session) entries were removed.
        """
        with self._lock:
            doomed = [
                key
                for key in self._grants
                if (session is None or key[1] == session)
                and (principal_key is None or key[0] == principal_key)
            ]
            for key in doomed:
                del self._grants[key]
            return len(doomed)


def final_decision(engine_verdict: Verdict, tool_mode: ToolMode, granted: bool) -> FinalVerdict:
    """Combine the engine's verdict, the tool policy's mode and a session grant.

    The strictest wins: a deny (engine) or disabled (tool policy) is ``"deny"`` whatever
    was granted; otherwise, if either asks for approval, a grant turns it into
    ``"allow"`` and no grant into ``"approval"``; otherwise ``"allow"``.

    Args:
        engine_verdict: the aggregated verdict of the PolicyEngine's decisions.
        tool_mode: the layered tool policy's mode.
        granted: whether a session grant exists (must be a real ``bool``).

    Raises:
        TypeError: an argument of the wrong type (never silently allowed).

    Returns:
        ``"allow"``, ``"approval"`` or ``"deny"``.
    """
    if not isinstance(engine_verdict, Verdict):
        raise TypeError(f"engine_verdict must be an Verdict, not {engine_verdict!r}")
    if not isinstance(tool_mode, ToolMode):
        raise TypeError(f"tool_mode must be a ToolMode, not {tool_mode!r}")
    if not isinstance(granted, bool):
        raise TypeError(f"granted must be a bool, not {granted!r}")
    if engine_verdict is Verdict.DENY or tool_mode is ToolMode.DISABLED:
        return "deny"
    if engine_verdict is Verdict.REQUIRE_APPROVAL or tool_mode is ToolMode.ASK:
        return "allow" if granted else "approval"
    return "allow"
