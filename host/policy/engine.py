"""The PolicyEngine port, fence checks and the file-backed engine (docs/design.md §6 step 3).

The gateway asks the engine about ``tool.call:{name}`` and every permission a tool
requires *before* it parses the input. Every answer is a :class:`Decision` carrying the
:class:`Fence` (policy version, role-binding version) it was decided under. A call is
authorized only if no decision denies and every non-deny decision carries the same
well-formed fence (:func:`check_fences`): a tool with several permissions can never be
authorized by stitching together answers from before and after a revoke.

:class:`FilePolicyEngine` is the embedded default. Its file (``stockade.policy/1``)::

    {"format": "stockade.policy/1", "policy_version": 3, "role_binding_version": 7,
     "roles": {"agent": {"allow": ["issues.read"], "ask": ["tool.call:tracker.list-issues"]}},
     "bindings": {"p": {"alice": ["agent"]}}}

Rules (exact, fail closed):

- permissions are exact strings, never patterns: ``*`` is just a character;
- a subject's decision for a permission is ``allow`` if any of its roles in that
  project allows it, else ``require_approval`` if any of its roles asks for it, else
  ``deny``; a principal asking about another project than its own is denied;
- a binding that names an unknown role, an unknown field, a bad version or any read
  error makes the whole file unusable: :class:`~host.errors.PolicyUnavailable`;
- each edit helper bumps a version (roles → ``policy_version``, bindings →
  ``role_binding_version``) and persists atomically; the file is re-validated by
  ``stat`` on every :meth:`FilePolicyEngine.authorize` (a few µs), so a revoke written
  by any process is seen by the next decision.

Example::

    engine = FilePolicyEngine.initialize(state_dir / "policy.json")
    engine.set_role("agent", allow=["issues.read"], ask=["tool.call:tracker.list-issues"])
    engine.grant_role("p", "alice", "agent")
    decision = engine.authorize(principal, "p", "issues.read")   # Verdict.ALLOW
"""

from __future__ import annotations

import contextlib
import json
import shlex
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from host._files import UnsafePermissions
from host.errors import PolicyUnavailable
from host.policy._files import CachedFile, atomic_write, interprocess_lock, read_bounded, sidecar_lock
from host.types import Fence  # re-exported: an engine of one's own builds its decisions' fences

__all__ = [
    "POLICY_FORMAT",
    "Decision",
    "Fence",
    "FilePolicyEngine",
    "PolicyEngine",
    "PrincipalRef",
    "Verdict",
    "aggregate",
    "check_fences",
]

POLICY_FORMAT = "stockade.policy/1"
MAX_POLICY_BYTES = 4 * 1024 * 1024  # bytes; a larger policy file is refused (POLICY_UNAVAILABLE)


class Verdict(str, Enum):
    """What the policy engine says about one permission."""

    ALLOW = "allow"
    DENY = "deny"
    REQUIRE_APPROVAL = "require_approval"


@dataclass(frozen=True, slots=True)
class Decision:
    """One answer of the engine.

    Args:
        verdict: allow, deny or require_approval.
        fence: the versions the answer was decided under; required for non-deny answers.
        reason: a short explanation for people and the audit log.
    """

    verdict: Verdict
    fence: Fence | None
    reason: str = ""


class PrincipalRef(Protocol):
    """Anything naming a principal: its project and stable subject."""

    @property
    def project(self) -> str:
        """The project the principal belongs to."""

    @property
    def subject(self) -> str:
        """The principal's stable subject within the project."""


class PolicyEngine(Protocol):
    """The port the gateway authorizes every permission through."""

    def authorize(self, principal: PrincipalRef, project: str, permission: str) -> Decision:
        """Decide one permission for one principal in one project.

        Raises:
            PolicyUnavailable: the policy cannot be read; the caller fails closed.
        """


def _well_formed(fence: object) -> bool:
    if type(fence) is not Fence:
        return False
    return all(type(v) is int and v >= 0 for v in (fence.policy_version, fence.role_binding_version))


def _checked(decision: object, index: int) -> Decision:
    if type(decision) is not Decision or not isinstance(decision.verdict, Verdict):
        raise PolicyUnavailable(f"decision {index} from the policy engine is malformed", index=index)
    return decision


def check_fences(decisions: Sequence[Decision]) -> Fence:
    """The one fence every non-deny decision carries; anything else fails closed.

    Deny decisions are skipped: the caller stops on a deny before asking for the fence.

    Args:
        decisions: the engine's answers for ``tool.call:{name}`` and each permission.

    Raises:
        PolicyUnavailable: no decisions, a malformed decision, a missing or malformed
            fence (not a ``Fence``, a bool, a negative or non-int version), fences that
            differ, or no non-deny decision at all.

    Returns:
        The common fence.
    """
    if not decisions:
        raise PolicyUnavailable("no policy decisions to check")
    common: Fence | None = None
    for index, raw in enumerate(decisions):
        decision = _checked(raw, index)
        if decision.verdict is Verdict.DENY:
            continue
        if not _well_formed(decision.fence):
            raise PolicyUnavailable(f"decision {index} has a missing or malformed fence", index=index)
        if common is None:
            common = decision.fence
        elif decision.fence != common:
            raise PolicyUnavailable(
                "policy decisions carry different fences (policy changed mid-decision)", index=index
            )
    if common is None:
        raise PolicyUnavailable("no non-deny decision carries a fence")
    return common


def aggregate(decisions: Sequence[Decision]) -> Decision:
    """Combine the answers for one call: the first deny wins, else one fence, strictest verdict.

    Args:
        decisions: the engine's answers for ``tool.call:{name}`` and each permission.

    Raises:
        PolicyUnavailable: as :func:`check_fences` (malformed decisions are refused
            even when a deny is present).

    Returns:
        The first deny decision as is; otherwise ``REQUIRE_APPROVAL`` if any decision
        asks for approval, else ``ALLOW``, with the common fence.
    """
    if not decisions:
        raise PolicyUnavailable("no policy decisions to check")
    checked = [_checked(d, i) for i, d in enumerate(decisions)]
    for decision in checked:
        if decision.verdict is Verdict.DENY:
            return decision
    fence = check_fences(checked)
    asks = [d for d in checked if d.verdict is Verdict.REQUIRE_APPROVAL]
    if asks:
        return Decision(Verdict.REQUIRE_APPROVAL, fence, asks[0].reason)
    return Decision(Verdict.ALLOW, fence, "allowed")


# ---------------------------------------------------------------------------- file format

_Name = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")]


class _Role(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    allow: tuple[_Name, ...] = ()
    ask: tuple[_Name, ...] = ()


class _PolicyDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    format: Literal["stockade.policy/1"]
    policy_version: Annotated[int, Field(ge=0)]
    role_binding_version: Annotated[int, Field(ge=0)]
    roles: dict[_Name, _Role]
    bindings: dict[_Name, dict[_Name, tuple[_Name, ...]]]

    @model_validator(mode="after")
    def _bindings_name_known_roles(self) -> _PolicyDocument:
        for project, subjects in self.bindings.items():
            for subject, roles in subjects.items():
                unknown = sorted(set(roles) - set(self.roles))
                if unknown:
                    raise ValueError(f"binding {project}/{subject} names unknown roles {unknown}")
        return self


@dataclass(frozen=True, slots=True)
class _Compiled:
    document: _PolicyDocument
    fence: Fence
    # (project, subject) -> (allowed permissions, asked permissions)
    index: Mapping[tuple[str, str], tuple[frozenset[str], frozenset[str]]]
    # Decisions already made under this snapshot (immutable values; bounded, see _decide).
    decided: dict[tuple[str, str, str, str], Decision] = field(default_factory=dict, compare=False)


def _parse_document(data: bytes) -> _PolicyDocument:
    try:
        return _PolicyDocument.model_validate_json(data)
    except ValidationError as exc:
        problems = [{"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"]} for e in exc.errors()]
        raise PolicyUnavailable("the policy file is invalid", problems=problems[:20]) from None


def _compile(data: bytes) -> _Compiled:
    doc = _parse_document(data)
    index: dict[tuple[str, str], tuple[frozenset[str], frozenset[str]]] = {}
    for project, subjects in doc.bindings.items():
        for subject, role_names in subjects.items():
            allow: set[str] = set()
            ask: set[str] = set()
            for name in role_names:
                allow.update(doc.roles[name].allow)
                ask.update(doc.roles[name].ask)
            index[(project, subject)] = (frozenset(allow), frozenset(ask))
    return _Compiled(doc, Fence(doc.policy_version, doc.role_binding_version), index)


def _dump(doc: _PolicyDocument) -> bytes:
    return (json.dumps(doc.model_dump(mode="json"), indent=2, sort_keys=True) + "\n").encode()


class FilePolicyEngine:
    """The embedded default engine: roles and per-project role bindings in one JSON file.

    Args:
        path: the policy file (``stockade.policy/1``). It is not read until the first
            decision; a missing or invalid file makes every decision fail closed.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._cache: CachedFile[_Compiled] = CachedFile(
            self.path, _compile, max_bytes=MAX_POLICY_BYTES, trusted=True
        )
        self._edit_lock = threading.Lock()

    @classmethod
    def initialize(cls, path: Path) -> FilePolicyEngine:
        """Create an empty policy file (no roles, no bindings, both versions 1).

        Args:
            path: where to create it; its directory must exist.

        Raises:
            FileExistsError: a file is already there (it is never overwritten).
            PolicyUnavailable: the file cannot be written.

        Returns:
            An engine over the new file.
        """
        path = Path(path)
        if path.exists():
            raise FileExistsError(f"{path} already exists")
        doc = _PolicyDocument(
            format="stockade.policy/1", policy_version=1, role_binding_version=1, roles={}, bindings={}
        )
        engine = cls(path)
        engine._write(doc)
        return engine

    # ------------------------------------------------------------------ decisions

    def _current(self) -> _Compiled:
        try:
            compiled = self._cache.get()
        except UnsafePermissions as exc:
            raise PolicyUnavailable(exc.message, hint=exc.hint, file=str(self.path)) from None
        except OSError as exc:
            raise PolicyUnavailable(f"cannot read the policy file: {exc.strerror or exc}") from None
        if compiled is None:
            where = shlex.quote(str(self.path.parent.absolute()))
            raise PolicyUnavailable(
                f"the policy file {self.path} does not exist",
                hint=f"Create it with `stockade policy init --state-dir {where}`"
                if self.path.name == "policy.json"
                else f"Create {self.path} (format {POLICY_FORMAT}).",
                file=str(self.path),
            )
        return compiled

    def fence(self) -> Fence:
        """The current fence of the file.

        Raises:
            PolicyUnavailable: the file cannot be read or is invalid.

        Returns:
            (policy_version, role_binding_version) as stored now.
        """
        return self._current().fence

    def authorize(self, principal: PrincipalRef, project: str, permission: str) -> Decision:
        """Decide ``permission`` for ``principal`` in ``project`` (rules in the module docstring).

        Args:
            principal: anything with ``.project`` and ``.subject``.
            project: the project the call acts in.
            permission: the exact permission string, e.g. ``tool.call:tracker.list-issues``.

        Raises:
            PolicyUnavailable: the policy file is missing, unreadable or invalid.

        Returns:
            A decision carrying the file's current fence.
        """
        return _decide(self._current(), principal, project, permission)

    def authorize_many(
        self, principal: PrincipalRef, project: str, permissions: Sequence[str]
    ) -> list[Decision]:
        """:meth:`authorize` for several permissions from one snapshot of the file.

        The file is checked once, so every decision carries the same fence and a call
        costs one ``stat`` however many permissions its tool requires.

        Raises:
            PolicyUnavailable: the policy file is missing, unreadable or invalid.
        """
        compiled = self._current()
        return [_decide(compiled, principal, project, permission) for permission in permissions]

    # ------------------------------------------------------------------ edits

    def set_role(self, role: str, *, allow: Iterable[str], ask: Iterable[str] = ()) -> Fence:
        """Create or replace a role's permissions; bumps ``policy_version``.

        Args:
            role: the role name.
            allow: permissions the role allows outright.
            ask: permissions the role allows only with a person's approval.

        Raises:
            PolicyUnavailable: the file cannot be read, is invalid, or cannot be written;
                the names are invalid.

        Returns:
            The fence after the change.
        """
        new_role = {"allow": sorted(set(allow)), "ask": sorted(set(ask))}

        def change(raw: dict[str, Any]) -> bool:
            if raw["roles"].get(role) == new_role:
                return False
            raw["roles"][role] = new_role
            raw["policy_version"] += 1
            return True

        return self._edit(change)

    def grant_role(self, project: str, subject: str, role: str) -> Fence:
        """Bind ``role`` to ``subject`` in ``project``; bumps ``role_binding_version``.

        Args:
            project: the project.
            subject: the principal's stable subject.
            role: an existing role.

        Raises:
            PolicyUnavailable: unknown role, or the file cannot be read or written.

        Returns:
            The fence after the change (unchanged if the binding already existed).
        """

        def change(raw: dict[str, Any]) -> bool:
            if role not in raw["roles"]:
                raise PolicyUnavailable(f"cannot bind unknown role {role!r}", role=role)
            subjects = raw["bindings"].setdefault(project, {})
            roles = subjects.setdefault(subject, [])
            if role in roles:
                return False
            subjects[subject] = sorted([*roles, role])
            raw["role_binding_version"] += 1
            return True

        return self._edit(change)

    def revoke_role(self, project: str, subject: str, role: str) -> Fence:
        """Remove ``role`` from ``subject`` in ``project``; bumps ``role_binding_version``.

        Args:
            project: the project.
            subject: the principal's stable subject.
            role: the role to take away.

        Raises:
            PolicyUnavailable: the file cannot be read or written.

        Returns:
            The fence after the change (unchanged if the binding did not exist).
        """

        def change(raw: dict[str, Any]) -> bool:
            subjects = raw["bindings"].get(project, {})
            roles = subjects.get(subject, [])
            if role not in roles:
                return False
            roles.remove(role)
            if not roles:
                del subjects[subject]
            if not subjects:
                del raw["bindings"][project]
            raw["role_binding_version"] += 1
            return True

        return self._edit(change)

    def _edit(self, change: Callable[[dict[str, Any]], bool]) -> Fence:
        with self._edit_lock, contextlib.ExitStack() as stack:
            try:
                stack.enter_context(interprocess_lock(sidecar_lock(self.path)))
                data, _ = read_bounded(self.path, MAX_POLICY_BYTES)
            except OSError as exc:
                raise PolicyUnavailable(f"cannot read the policy file: {exc.strerror or exc}") from None
            doc = _parse_document(data)
            raw = doc.model_dump(mode="json")
            if not change(raw):
                return Fence(doc.policy_version, doc.role_binding_version)
            new_doc = _parse_document(json.dumps(raw).encode())
            self._write(new_doc)
            return Fence(new_doc.policy_version, new_doc.role_binding_version)

    def _write(self, doc: _PolicyDocument) -> None:
        try:
            atomic_write(self.path, _dump(doc))
        except OSError as exc:
            raise PolicyUnavailable(f"cannot write the policy file: {exc.strerror or exc}") from None
        self._cache.invalidate()


_MAX_DECIDED = 4096  # decisions remembered per policy snapshot


def _decide(compiled: _Compiled, principal: PrincipalRef, project: str, permission: str) -> Decision:
    """The decision under one snapshot; a snapshot never changes, so it is remembered."""
    key = (principal.project, principal.subject, project, permission)
    known = compiled.decided.get(key)
    if known is None:
        known = _decide_anew(compiled, principal, project, permission)
        if len(compiled.decided) >= _MAX_DECIDED:
            compiled.decided.clear()
        compiled.decided[key] = known
    return known


def _decide_anew(compiled: _Compiled, principal: PrincipalRef, project: str, permission: str) -> Decision:
    fence = compiled.fence
    if principal.project != project:
        return Decision(Verdict.DENY, fence, "principal belongs to another project")
    allow, ask = compiled.index.get((project, principal.subject), (frozenset(), frozenset()))
    if permission in allow:
        return Decision(Verdict.ALLOW, fence, f"a role allows {permission}")
    if permission in ask:
        return Decision(Verdict.REQUIRE_APPROVAL, fence, f"a role requires approval for {permission}")
    return Decision(Verdict.DENY, fence, f"no role grants {permission}")
