"""Session grants ("always, for this session") and the final policy verdict (docs/design.md §6 step 4).

A person answering an approval prompt with "always" grants that tool for the rest of the
session. A grant is keyed by (principal, session, tool) — principal being
``(project, subject)`` — so it never crosses sessions or principals, and it only
*discharges ask*: it is not an input to the deny/disabled decision at all.
:func:`final_decision` is the one place the gateway combines the engine's verdict, the
tool policy's mode and the grant, and a deny or disabled always wins there, whatever
was granted before (tightening a tool to ``disabled`` after "always" takes effect on the
next call).

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

import threading
from collections import OrderedDict
from typing import Literal

from host.policy.engine import Verdict
from host.policy.toolpolicy import ToolMode

__all__ = ["MAX_GRANT_KEYS", "MAX_TOOLS_PER_SESSION", "FinalVerdict", "SessionGrants", "final_decision"]

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


class SessionGrants:
    """Thread-safe "always for this session" grants; they discharge *ask* only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._grants: OrderedDict[tuple[_PrincipalKey, str], set[str]] = OrderedDict()

    def grant(self, principal_key: tuple[str, str], session: str, tool: str) -> None:
        """Record "always" for ``tool`` in ``session`` of ``principal_key``.

        Args:
            principal_key: ``(project, subject)`` of the principal.
            session: the session id.
            tool: the exact tool name.

        Raises:
            TypeError: an empty or non-string part.
        """
        _check_key(principal_key, session, tool)
        key = (principal_key, session)
        with self._lock:
            tools = self._grants.get(key)
            if tools is None:
                tools = self._grants[key] = set()
                while len(self._grants) > MAX_GRANT_KEYS:
                    self._grants.popitem(last=False)
            else:
                self._grants.move_to_end(key)
            if tool not in tools and len(tools) >= MAX_TOOLS_PER_SESSION:
                tools.pop()
            tools.add(tool)

    def discharges(self, principal_key: tuple[str, str], session: str, tool: str) -> bool:
        """Whether a grant exists for exactly this principal, session and tool.

        Raises:
            TypeError: an empty or non-string part.

        Returns:
            True only for the same (project, subject), session and tool.
        """
        _check_key(principal_key, session, tool)
        with self._lock:
            tools = self._grants.get((principal_key, session))
            return tools is not None and tool in tools

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
