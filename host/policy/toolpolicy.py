"""Layered tri-state tool policy: managed cap, user selectors, class defaults (docs/design.md §6 step 4).

Every tool resolves to one :class:`ToolMode` — ``disabled``, ``ask`` or ``allow``
(strictness: disabled > ask > allow) — in three layers:

1. **Managed cap** (administrator): a ceiling. Its mode for a tool is the strictest mode
   of every cap rule whose selector matches; no match means no ceiling.
2. **User selectors** of the (account, workspace) partition, by precedence
   tool > service > class: the most specific selector that matches decides.
3. **Class defaults** when no user selector matches: ``read`` → allow; ``write``,
   ``execute``, ``external`` → ask.

The result is the strictest of (1) and (2 or 3). A user can only tighten what the
administrator allows, never loosen it.

**Selectors** are :class:`ClassSelector` (an effect class), :class:`ServiceSelector`
(a service: the package name of a tool, i.e. the part of the tool name before the first
``.``, see :func:`service_of`) and :class:`ToolSelector` (an exact tool name). They match
by structural equality only: no glob, regex or prefix matching. ``"*"`` is a literal
name that matches only a tool or service literally called ``*``.

**Managed cap directory** (``HostConfig.admin_policy_dir``): one file ``cap.json``::

    {"format": "stockade.toolcap/1",
     "rules": [{"selector": {"service": "shell"}, "max": "disabled"},
               {"selector": {"class": "external"}, "max": "ask"},
               {"selector": {"tool": "payments.refund"}, "max": "ask", "ask_always": true}]}

``ask_always`` marks the hard floor: the tool's mode is at most ``ask``, and no session
grant or scope ever discharges that ask (:attr:`Resolution.ask_always`); only a person's
approval of the exact action does.

No directory, or a directory without ``cap.json``, means no ceiling. A directory that is
present but cannot be read (not a directory, ``cap.json`` unreadable, not valid JSON,
unknown format, unknown field, duplicate selector) disables *every* tool and logs an
error: a broken administrator policy fails closed.

**User policy files** live in ``root`` as ``<sha256>.json`` where the hash is over the
canonical JSON of ``{"account": ..., "workspace": ...}`` (no names in file names)::

    {"format": "stockade.toolpolicy/2",
     "partition": {"account": "alice", "workspace": "p"},
     "rules": [{"selector": {"tool": "tracker.create-issue"}, "mode": "allow",
                "bound": {"tracker.create-issue": "<binding digest>"}},
               {"selector": {"service": "files"}, "mode": "allow",
                "bound": {"files.read": "<digest>", "files.list": "<digest>"}}]}

**Bound allows** (:mod:`host.policy.bindings`): an ``allow`` of a tool or service
selector records, in ``bound``, the binding digest of each tool it was reviewed for (a
service selector records the digests of the tools of that service it covered when it was
set; a tool of the service that was not among them is unbound). At resolve time the
caller passes the tool's current binding digest; a digest that differs or is missing
turns that record's ``allow`` into ``ask`` (a *rebind*, :attr:`Resolution.rebind`).
``disabled`` and ``ask`` records, and class selectors, carry no ``bound`` and are never
loosened or invalidated by a rebind. A ``stockade.toolpolicy/1`` file is still read: it
has no bindings, so every allow of a tool or service selector in it is unbound (→ ask)
until a reviewer re-binds it; the next write stores ``/2``.

A file that is corrupt, of an unknown format, holds a duplicate selector or any invalid
part, or names another partition (a file copied between partitions) is quarantined
whole: renamed to ``<name>.quarantined-<UTC timestamp>``, a warning is logged and the
defaults apply. Writes are atomic (temp file, fsync, rename) and serialized between
processes. Files are re-validated by ``stat`` on every :meth:`ToolPolicyStore.resolve`.

Example::

    store = ToolPolicyStore(state_dir / "tool-policy", admin_dir=config.admin_policy_dir)
    store.set("alice", "p", ServiceSelector("tracker"), ToolMode.ALLOW)
    store.resolve("alice", "p", tool="tracker.create-issue", service="tracker", effect="write")
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from host.canonical import canonical_json, sha256_hex
from host.errors import PolicyUnavailable
from host.formats.manifest import Effect
from host.policy._files import (
    CachedFile,
    FileTooLarge,
    atomic_write,
    interprocess_lock,
    read_bounded,
    sidecar_lock,
)

__all__ = [
    "CAP_FILE",
    "CAP_FORMAT",
    "CLASS_DEFAULTS",
    "EFFECT_CLASSES",
    "LEGACY_TOOL_POLICY_FORMAT",
    "TOOL_POLICY_FORMAT",
    "ClassSelector",
    "Resolution",
    "Selector",
    "ServiceSelector",
    "ToolMode",
    "ToolPolicyStore",
    "ToolSelector",
    "UserToolPolicy",
    "read_user_policy",
    "service_of",
    "strictest",
]

_log = logging.getLogger("stockade.policy")

TOOL_POLICY_FORMAT = "stockade.toolpolicy/2"
LEGACY_TOOL_POLICY_FORMAT = "stockade.toolpolicy/1"  # read only: its allows are unbound
CAP_FORMAT = "stockade.toolcap/1"
CAP_FILE = "cap.json"
MAX_POLICY_FILE_BYTES = 1024 * 1024  # bytes, a user policy or cap file
MAX_RULES = 4096  # rules in one user policy or cap file
MAX_PARTITIONS_CACHED = 1024  # partitions whose parsed files are kept in memory
MAX_NAME_CHARS = 256  # characters of an account, workspace, service or tool name

EFFECT_CLASSES = tuple(effect.value for effect in Effect)
"""The effect classes of docs/design.md §3 (a tool's ``effect``), as text."""


class ToolMode(str, Enum):
    """What the tool policy says about a tool; strictness disabled > ask > allow."""

    DISABLED = "disabled"
    ASK = "ask"
    ALLOW = "allow"


_RANK = {ToolMode.ALLOW: 0, ToolMode.ASK: 1, ToolMode.DISABLED: 2}

CLASS_DEFAULTS: Mapping[Effect, ToolMode] = MappingProxyType({
    Effect.READ: ToolMode.ALLOW,
    Effect.WRITE: ToolMode.ASK,
    Effect.EXECUTE: ToolMode.ASK,
    Effect.EXTERNAL: ToolMode.ASK,
})
"""Modes that apply when no user selector matches."""


def strictest(*modes: ToolMode) -> ToolMode:
    """The strictest of ``modes`` (disabled > ask > allow).

    Args:
        modes: one or more modes.

    Raises:
        ValueError: no modes given.

    Returns:
        The strictest mode given.
    """
    if not modes:
        raise ValueError("strictest() needs at least one mode")
    return max(modes, key=lambda m: _RANK[m if type(m) is ToolMode else ToolMode(m)])


def service_of(tool: str) -> str:
    """The service of a tool: its package name, the part before the first ``.``.

    Args:
        tool: a tool name such as ``tracker.list-issues``.

    Returns:
        ``tracker`` for ``tracker.list-issues``; the whole name if it has no ``.``.
    """
    return tool.split(".", 1)[0]


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_name(kind: str, value: object) -> None:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise ValueError(f"{kind} must be a non-empty string of at most {MAX_NAME_CHARS} characters")
    if _CONTROL.search(value):
        raise ValueError(f"{kind} must not contain control characters")


@dataclass(frozen=True, slots=True)
class ClassSelector:
    """Selects every tool of one effect class (``read``, ``write``, ``execute``, ``external``).

    Args:
        effect_class: the class; its text (``"write"``) is accepted and stored as the enum,
            so selectors built either way are equal and hash alike.

    Raises:
        ValueError: an unknown effect class.
    """

    effect_class: Effect

    def __post_init__(self) -> None:
        object.__setattr__(self, "effect_class", _effect_of(self.effect_class))


@dataclass(frozen=True, slots=True)
class ServiceSelector:
    """Selects every tool of one service (package), by exact name."""

    service: str

    def __post_init__(self) -> None:
        _check_name("service", self.service)


@dataclass(frozen=True, slots=True)
class ToolSelector:
    """Selects one tool, by exact name (``*`` is a literal name)."""

    tool: str

    def __post_init__(self) -> None:
        _check_name("tool", self.tool)


Selector: TypeAlias = ClassSelector | ServiceSelector | ToolSelector
"""Any of the three selector kinds (a runtime union: usable with ``isinstance``)."""


_NO_RULES: Mapping[Selector, ToolMode] = MappingProxyType({})
_NO_BOUND: Mapping[Selector, Mapping[str, str]] = MappingProxyType({})
_HEX64 = re.compile(r"[0-9a-f]{64}")
MAX_BOUND = 128  # tools whose binding one allow record holds (a registry's size)


def check_bound(selector: Selector, mode: ToolMode, bound: Mapping[str, str] | None) -> None:
    """Check a record's ``bound`` (tool name → binding digest) fits its selector and mode.

    Raises:
        ValueError: ``bound`` on a class selector or a non-allow record, a tool selector's
            ``bound`` naming another tool, a service selector's naming a tool of another
            service, a digest that is not 64 lower-case hex digits, or too many entries.
    """
    if bound is None:
        return
    if mode is not ToolMode.ALLOW or isinstance(selector, ClassSelector):
        raise ValueError("only an allow of a tool or service selector records binding digests")
    if len(bound) > MAX_BOUND:
        raise ValueError(f"an allow records at most {MAX_BOUND} binding digests")
    for tool, digest in bound.items():
        _check_name("tool", tool)
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            raise ValueError(f"binding digest of {tool!r} must be 64 lower-case hex digits")
        if isinstance(selector, ToolSelector) and tool != selector.tool:
            raise ValueError(f"a tool selector's binding names {tool!r}, not {selector.tool!r}")
        if isinstance(selector, ServiceSelector) and service_of(tool) != selector.service:
            raise ValueError(f"tool {tool!r} is not of service {selector.service!r}")


@dataclass(frozen=True, slots=True)
class Resolution:
    """How :meth:`ToolPolicyStore.resolve_detail` decided one tool.

    Attributes:
        mode: the resolved mode (what :meth:`ToolPolicyStore.resolve` returns).
        cap: the managed cap's ceiling.
        user: the user layer's mode after the binding guard (a rule or class default).
        selector: the user selector that matched, ``None`` for a class default.
        recorded: the binding digest the matching allow recorded for this tool (``None``:
            none recorded, or not an allow of a tool or service selector).
        current: the tool's current binding digest, as passed in.
        rebind: the matching allow was turned into ask because ``recorded`` differs from
            ``current`` or either is missing.
        ask_always: a managed-cap rule matching the tool marks it ``ask_always``: no
            session grant or scope ever discharges its ask (the hard floor).
    """

    mode: ToolMode
    cap: ToolMode
    user: ToolMode
    selector: Selector | None
    recorded: str | None
    current: str | None
    rebind: bool
    ask_always: bool = False

    @property
    def bound_allow(self) -> bool:
        """Whether a user allow was honoured with its binding (the digests matched)."""
        return (
            self.selector is not None
            and not isinstance(self.selector, ClassSelector)
            and self.user is ToolMode.ALLOW
            and not self.rebind
        )


@functools.lru_cache(maxsize=4096)
def _candidates(tool: str, service: str, effect: Effect) -> tuple[Selector, Selector, Selector]:
    """The selectors that match a tool, most specific first (tool > service > class)."""
    return (ToolSelector(tool), ServiceSelector(service), ClassSelector(effect))


@dataclass(frozen=True, slots=True)
class UserToolPolicy:
    """The user selectors of one (account, workspace) partition.

    Args:
        account: the account (the principal's subject).
        workspace: the workspace (the principal's project).
        rules: selector → mode; read-only.
    """

    account: str
    workspace: str
    rules: Mapping[Selector, ToolMode]
    bound: Mapping[Selector, Mapping[str, str]] = field(default_factory=lambda: _NO_BOUND)

    def lookup(self, *, tool: str, service: str, effect: Effect) -> ToolMode | None:
        """The mode of the most specific matching selector, or ``None`` if none matches.

        Returns:
            The tool selector's mode, else the service's, else the class's, else None.
        """
        for selector in _candidates(tool, service, _effect_of(effect)):
            mode = self.rules.get(selector)
            if mode is not None:
                return mode
        return None

    def recorded(self, selector: Selector, tool: str) -> str | None:
        """The binding digest ``selector``'s allow recorded for ``tool`` (``None``: none)."""
        return self.bound.get(selector, {}).get(tool)


# ---------------------------------------------------------------------------- file formats

_Name = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS, pattern=r"^[^\x00-\x1f\x7f]+$")
]
# defer_build: validators are built on first use, not at import (CLI start-up time):
# tool-policy files are read only where they exist.
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)


class _ClassSel(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, defer_build=True, populate_by_name=False
    )

    effect_class: Literal["read", "write", "execute", "external"] = Field(alias="class")


class _ServiceSel(BaseModel):
    model_config = _STRICT

    service: _Name


class _ToolSel(BaseModel):
    model_config = _STRICT

    tool: _Name


_SelJSON: TypeAlias = _ClassSel | _ServiceSel | _ToolSel


_Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class _Rule(BaseModel):
    model_config = _STRICT

    selector: _ClassSel | _ServiceSel | _ToolSel
    mode: ToolMode
    bound: Annotated[dict[_Name, _Digest], Field(max_length=MAX_BOUND)] | None = None


class _CapRule(BaseModel):
    model_config = _STRICT

    selector: _ClassSel | _ServiceSel | _ToolSel
    max: ToolMode
    ask_always: bool = False


class _Partition(BaseModel):
    model_config = _STRICT

    account: _Name
    workspace: _Name


class _UserDocument(BaseModel):
    model_config = _STRICT

    format: Literal["stockade.toolpolicy/1", "stockade.toolpolicy/2"]
    partition: _Partition
    rules: Annotated[tuple[_Rule, ...], Field(max_length=MAX_RULES)]


class _CapDocument(BaseModel):
    model_config = _STRICT

    format: Literal["stockade.toolcap/1"]
    rules: Annotated[tuple[_CapRule, ...], Field(max_length=MAX_RULES)]


def _from_json(sel: _SelJSON) -> Selector:
    if isinstance(sel, _ClassSel):
        return ClassSelector(Effect(sel.effect_class))
    if isinstance(sel, _ServiceSel):
        return ServiceSelector(sel.service)
    return ToolSelector(sel.tool)


def _to_json(sel: Selector) -> dict[str, str]:
    if isinstance(sel, ClassSelector):
        return {"class": sel.effect_class.value}
    if isinstance(sel, ServiceSelector):
        return {"service": sel.service}
    return {"tool": sel.tool}


def _sort_key(sel: Selector) -> tuple[int, str]:
    if isinstance(sel, ClassSelector):
        return (0, sel.effect_class.value)
    if isinstance(sel, ServiceSelector):
        return (1, sel.service)
    return (2, sel.tool)


class _Corrupt(Exception):
    """A policy file's content is unusable; carries the reason for the log."""


def _collect(pairs: list[tuple[Selector, ToolMode]]) -> dict[Selector, ToolMode]:
    rules: dict[Selector, ToolMode] = {}
    for selector, mode in pairs:
        if selector in rules:
            raise _Corrupt(f"duplicate selector {_to_json(selector)}")
        rules[selector] = mode
    return rules


@dataclass(frozen=True, slots=True)
class _UserRules:
    """One parsed user policy file: modes, and the binding digests of bound allows."""

    rules: Mapping[Selector, ToolMode]
    bound: Mapping[Selector, Mapping[str, str]]
    legacy: bool  # a stockade.toolpolicy/1 file: every allow is unbound


_EMPTY = _UserRules(_NO_RULES, _NO_BOUND, False)


def _parse_user(data: bytes, account: str, workspace: str) -> _UserRules:
    try:
        doc = _UserDocument.model_validate_json(data)
    except ValidationError as exc:
        raise _Corrupt(f"invalid ({exc.error_count()} problems)") from None
    if (doc.partition.account, doc.partition.workspace) != (account, workspace):
        raise _Corrupt("the file belongs to another partition")
    legacy = doc.format == LEGACY_TOOL_POLICY_FORMAT
    rules = _collect([(_from_json(r.selector), r.mode) for r in doc.rules])
    bound: dict[Selector, Mapping[str, str]] = {}
    for r in doc.rules:
        if r.bound is None:
            continue
        if legacy:
            raise _Corrupt("a stockade.toolpolicy/1 file has no 'bound'")
        selector = _from_json(r.selector)
        try:
            check_bound(selector, r.mode, r.bound)
        except ValueError as exc:
            raise _Corrupt(str(exc)) from None
        bound[selector] = MappingProxyType(dict(r.bound))
    return _UserRules(MappingProxyType(rules), MappingProxyType(bound), legacy)


class _CapTable(dict[Selector, ToolMode]):
    """The cap's ceilings, and the selectors it marks ``ask_always`` (the hard floor)."""

    ask_always: frozenset[Selector] = frozenset()


def _parse_cap(data: bytes) -> dict[Selector, ToolMode]:
    try:
        doc = _CapDocument.model_validate_json(data)
    except ValidationError as exc:
        raise _Corrupt(f"invalid ({exc.error_count()} problems)") from None
    # ask_always caps the mode at ask (a rule may not say allow and always ask).
    table = _CapTable(_collect([
        (_from_json(r.selector), strictest(r.max, ToolMode.ASK) if r.ask_always else r.max) for r in doc.rules
    ]))
    table.ask_always = frozenset(_from_json(r.selector) for r in doc.rules if r.ask_always)
    return table


@functools.lru_cache(maxsize=64)
def _effect_of(effect: Effect | str) -> Effect:
    """``effect`` as the enum (its text accepted too).

    Raises:
        ValueError: an unknown effect class.
    """
    if isinstance(effect, Effect):
        return effect
    if effect not in EFFECT_CLASSES:
        raise ValueError(f"unknown effect class {effect!r}; expected one of {EFFECT_CLASSES}")
    return Effect(effect)


class _CapUnreadable:
    """Marker: the admin directory is present but unusable; everything is disabled."""


_CAP_UNREADABLE = _CapUnreadable()


class ToolPolicyStore:
    """Per (account, workspace) user tool policy under an optional managed cap.

    Args:
        root: directory of the user policy files (created, mode 0700, on first write).
        admin_dir: the administrator's cap directory (see the module docstring);
            ``None`` means no managed cap.

    Thread-safe; several processes may share ``root``.
    """

    def __init__(self, root: Path, *, admin_dir: Path | None) -> None:
        self.root = Path(root)
        self.admin_dir = None if admin_dir is None else Path(admin_dir)
        self._lock = threading.RLock()
        self._files: OrderedDict[str, CachedFile[_UserRules]] = OrderedDict()
        self._cap: CachedFile[dict[Selector, ToolMode]] | None = None
        self._paths: dict[tuple[str, str], Path] = {}
        if self.admin_dir is not None:
            self._cap = CachedFile(self.admin_dir / CAP_FILE, _parse_cap, max_bytes=MAX_POLICY_FILE_BYTES)

    # ------------------------------------------------------------------ resolution

    def resolve(
        self,
        account: str,
        workspace: str,
        *,
        tool: str,
        service: str,
        effect: Effect,
        binding: str | None = None,
    ) -> ToolMode:
        """The mode of one tool for one partition (layers in the module docstring).

        Args:
            account: the account (the principal's subject).
            workspace: the workspace (the principal's project).
            tool: the exact tool name.
            service: the tool's service (package name; see :func:`service_of`).
            effect: the tool's effect class (its text is accepted too).
            binding: the tool's current binding digest (:mod:`host.policy.bindings`);
                ``None`` (unknown) turns every tool or service allow into ask.

        Raises:
            ValueError: an empty or invalid name, or an unknown effect class.
            PolicyUnavailable: the user policy file exists but cannot be read
                (an I/O error, not a content error: content errors quarantine it).

        Returns:
            The strictest of the managed cap and the user selector (or class default).
        """
        return self.resolve_detail(
            account, workspace, tool=tool, service=service, effect=effect, binding=binding
        ).mode

    def resolve_detail(
        self,
        account: str,
        workspace: str,
        *,
        tool: str,
        service: str,
        effect: Effect,
        binding: str | None = None,
    ) -> Resolution:
        """:meth:`resolve` with its reasons: each layer, and whether a rebind turned the
        matching allow into ask (for the audit record, previews and ``policy explain``).

        Raises:
            ValueError, PolicyUnavailable: as :meth:`resolve`.
        """
        effect_class = _effect_of(effect)
        candidates = _candidates(tool, service, effect_class)
        cap = self._cap_mode(candidates)
        if cap is ToolMode.DISABLED:  # the ceiling decides: the user file is not read
            return Resolution(ToolMode.DISABLED, cap, cap, None, None, binding, False)
        ask_always = self._ask_always(candidates)
        parsed = self._rules(account, workspace, lock_held=False)
        rules = parsed.rules
        selector = next((s for s in candidates if s in rules), None)
        user = CLASS_DEFAULTS[effect_class] if selector is None else rules[selector]
        recorded: str | None = None
        rebind = False
        if user is ToolMode.ALLOW and selector is not None and not isinstance(selector, ClassSelector):
            recorded = parsed.bound.get(selector, {}).get(tool)
            if recorded is None or binding is None or recorded != binding:
                user, rebind = ToolMode.ASK, True
        mode = strictest(cap, user)
        return Resolution(mode, cap, user, selector, recorded, binding, rebind, ask_always)

    def _ask_always(self, candidates: tuple[Selector, ...]) -> bool:
        rules = self._cap_rules()
        marked: frozenset[Selector] = getattr(rules, "ask_always", frozenset())
        return any(s in marked for s in candidates)

    def cap_mode(self, *, tool: str, service: str, effect: Effect) -> ToolMode:
        """The managed cap's ceiling for one tool alone (``allow`` when no cap rule matches;
        ``disabled`` when the cap directory is present but unreadable). For explanations
        (``stockade policy explain``); decisions use :meth:`resolve`.

        Raises:
            ValueError: an unknown effect class.
        """
        return self._cap_mode(_candidates(tool, service, _effect_of(effect)))

    def _cap_mode(self, candidates: tuple[Selector, ...]) -> ToolMode:
        rules = self._cap_rules()
        if isinstance(rules, _CapUnreadable):
            return ToolMode.DISABLED
        matching = [rules[s] for s in candidates if s in rules]
        return strictest(*matching) if matching else ToolMode.ALLOW

    def _cap_rules(self) -> Mapping[Selector, ToolMode] | _CapUnreadable:
        if self.admin_dir is None or self._cap is None:
            return {}
        try:
            st = os.stat(self.admin_dir)
        except FileNotFoundError:
            if os.path.lexists(self.admin_dir):  # a dangling symlink is present, not absent
                return self._cap_failed("it is a dangling symbolic link")
            return {}
        except OSError as exc:
            return self._cap_failed(f"cannot stat the directory: {exc.strerror or exc}")
        if not stat.S_ISDIR(st.st_mode):
            return self._cap_failed("it is not a directory")
        try:
            rules = self._cap.get()
        except FileTooLarge:
            return self._cap_failed(f"{CAP_FILE} is too large")
        except OSError as exc:
            return self._cap_failed(f"cannot read {CAP_FILE}: {exc.strerror or exc}")
        except _Corrupt as exc:
            return self._cap_failed(f"{CAP_FILE} is {exc}")
        if rules is None and os.path.lexists(self._cap.path):
            return self._cap_failed(f"{CAP_FILE} is a dangling symbolic link")
        return {} if rules is None else rules

    def _cap_failed(self, why: str) -> _CapUnreadable:
        _log.error("managed tool policy %s is unusable (%s): every tool is disabled", self.admin_dir, why)
        return _CAP_UNREADABLE

    # ------------------------------------------------------------------ user policy

    def path_for(self, account: str, workspace: str) -> Path:
        """The file of one partition: ``root / (sha256(canonical partition) + ".json")``.

        Raises:
            ValueError: an empty or invalid account or workspace.
        """
        key = (account, workspace)
        path = self._paths.get(key)
        if path is None:
            _check_name("account", account)
            _check_name("workspace", workspace)
            digest = sha256_hex(canonical_json({"account": account, "workspace": workspace}))
            path = self.root / f"{digest}.json"
            with self._lock:
                if len(self._paths) >= MAX_PARTITIONS_CACHED:
                    self._paths.clear()
                self._paths[key] = path
        return path

    def _cached(self, path: Path, account: str, workspace: str) -> CachedFile[_UserRules]:
        with self._lock:
            cached = self._files.get(path.name)
            if cached is None:
                cached = CachedFile(
                    path, lambda data: _parse_user(data, account, workspace), max_bytes=MAX_POLICY_FILE_BYTES
                )
                self._files[path.name] = cached
                while len(self._files) > MAX_PARTITIONS_CACHED:
                    self._files.popitem(last=False)
            else:
                self._files.move_to_end(path.name)
            return cached

    def load(self, account: str, workspace: str) -> UserToolPolicy:
        """The user selectors of one partition; a bad file is quarantined and yields none.

        Args:
            account: the account.
            workspace: the workspace.

        Raises:
            ValueError: an empty or invalid account or workspace.
            PolicyUnavailable: the file exists but cannot be read (I/O error).

        Returns:
            The partition's rules (empty if there is no file or it was quarantined).
        """
        return self._load(account, workspace, lock_held=False)

    def _load(self, account: str, workspace: str, *, lock_held: bool) -> UserToolPolicy:
        parsed = self._rules(account, workspace, lock_held=lock_held)
        return UserToolPolicy(
            account, workspace, MappingProxyType(dict(parsed.rules)), MappingProxyType(dict(parsed.bound))
        )

    def is_legacy(self, account: str, workspace: str) -> bool:
        """Whether the partition's file is a ``stockade.toolpolicy/1`` file (allows unbound).

        Raises:
            ValueError, PolicyUnavailable: as :meth:`load`.
        """
        return self._rules(account, workspace, lock_held=False).legacy

    def _rules(self, account: str, workspace: str, *, lock_held: bool) -> _UserRules:
        """The partition's current rules (the cached parse itself: never modify it)."""
        path = self.path_for(account, workspace)
        cached = self._cached(path, account, workspace)
        try:
            rules = cached.get()
        except FileTooLarge:
            self._quarantine(path, account, workspace, "too large", lock_held=lock_held)
            cached.invalidate()
            rules = None
        except OSError as exc:
            raise PolicyUnavailable(f"cannot read the tool policy file: {exc.strerror or exc}") from None
        except _Corrupt as exc:
            self._quarantine(path, account, workspace, str(exc), lock_held=lock_held)
            cached.invalidate()
            rules = None
        return _EMPTY if rules is None else rules

    def set(
        self,
        account: str,
        workspace: str,
        selector: Selector,
        mode: ToolMode,
        *,
        bound: Mapping[str, str] | None = None,
    ) -> None:
        """Set the mode of one selector in one partition (atomic, persisted).

        Args:
            account: the account.
            workspace: the workspace.
            selector: a ClassSelector, ServiceSelector or ToolSelector.
            mode: the mode for it.
            bound: for an ``allow`` of a tool or service selector, the binding digest of
                every tool it was reviewed for (tool name → digest; a tool selector names
                exactly its tool). Required there: an allow is bound to what was reviewed.

        Raises:
            TypeError: ``selector`` or ``mode`` has the wrong type.
            ValueError: an invalid account or workspace; ``bound`` missing on an allow of
                a tool or service selector, or given where it does not belong
                (:func:`check_bound`).
            PolicyUnavailable: the file cannot be read or written.
        """
        if not isinstance(selector, Selector):
            raise TypeError(f"not a selector: {selector!r}")
        if not isinstance(mode, ToolMode):
            raise TypeError(f"not a ToolMode: {mode!r}")
        if mode is ToolMode.ALLOW and not isinstance(selector, ClassSelector) and not bound:
            raise ValueError(
                "an allow of a tool or service selector must record the binding digests it was "
                "reviewed for (bound=)"
            )
        check_bound(selector, mode, bound)
        with self._editing(account, workspace) as (rules, bindings):
            rules[selector] = mode
            if bound is None:
                bindings.pop(selector, None)
            else:
                bindings[selector] = dict(bound)

    def remove(self, account: str, workspace: str, selector: Selector) -> bool:
        """Remove one selector from one partition.

        Raises:
            ValueError: an invalid account or workspace.
            PolicyUnavailable: the file cannot be read or written.

        Returns:
            Whether the selector was present.
        """
        with self._editing(account, workspace) as (rules, bindings):
            bindings.pop(selector, None)
            return rules.pop(selector, None) is not None

    @contextlib.contextmanager
    def _editing(
        self, account: str, workspace: str
    ) -> Iterator[tuple[dict[Selector, ToolMode], dict[Selector, Mapping[str, str]]]]:
        path = self.path_for(account, workspace)
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            lock = interprocess_lock(sidecar_lock(path))
            lock.__enter__()
        except OSError as exc:
            raise PolicyUnavailable(f"cannot open the tool policy directory: {exc.strerror or exc}") from None
        try:
            with self._lock:
                parsed = self._rules(account, workspace, lock_held=True)
                rules = dict(parsed.rules)
                bindings: dict[Selector, Mapping[str, str]] = {s: dict(b) for s, b in parsed.bound.items()}
                before = (dict(rules), {s: dict(b) for s, b in bindings.items()})
                yield rules, bindings
                if (rules, bindings) != before or parsed.legacy:
                    self._write(path, account, workspace, rules, bindings)
        finally:
            lock.__exit__(None, None, None)

    def _write(
        self,
        path: Path,
        account: str,
        workspace: str,
        rules: Mapping[Selector, ToolMode],
        bindings: Mapping[Selector, Mapping[str, str]],
    ) -> None:
        doc = {
            "format": TOOL_POLICY_FORMAT,
            "partition": {"account": account, "workspace": workspace},
            "rules": [_rule_json(sel, rules[sel], bindings.get(sel)) for sel in sorted(rules, key=_sort_key)],
        }
        data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()
        try:
            atomic_write(path, data)
        except OSError as exc:
            raise PolicyUnavailable(f"cannot write the tool policy file: {exc.strerror or exc}") from None
        self._cached(path, account, workspace).invalidate()

    def _quarantine(self, path: Path, account: str, workspace: str, why: str, *, lock_held: bool) -> None:
        try:
            with contextlib.ExitStack() as stack:
                if not lock_held:
                    stack.enter_context(interprocess_lock(sidecar_lock(path)))
                target = _quarantine_name(path)
                # Only move the bytes judged bad: another writer may have replaced them.
                try:
                    _parse_user(read_bounded(path, MAX_POLICY_FILE_BYTES)[0], account, workspace)
                except (_Corrupt, FileTooLarge):
                    os.replace(path, target)
                else:
                    return
        except FileNotFoundError:
            return
        except OSError as exc:
            _log.warning("cannot quarantine tool policy file %s (%s): %s", path.name, why, exc)
            return
        _log.warning(
            "tool policy file %s is %s: moved aside to %s; defaults apply", path.name, why, target.name
        )


def read_user_policy(data: bytes) -> UserToolPolicy:
    """Parse one user policy file's bytes, read only (no quarantine, no partition check):
    for tools that list the allows of every partition, such as ``stockade diff``.

    Raises:
        ValueError: the content is not a valid user tool policy file.
    """
    try:
        doc = _UserDocument.model_validate_json(data)
    except ValidationError as exc:
        raise ValueError(f"invalid tool policy file ({exc.error_count()} problems)") from None
    try:
        parsed = _parse_user(data, doc.partition.account, doc.partition.workspace)
    except _Corrupt as exc:
        raise ValueError(str(exc)) from None
    return UserToolPolicy(doc.partition.account, doc.partition.workspace, parsed.rules, parsed.bound)


def _rule_json(selector: Selector, mode: ToolMode, bound: Mapping[str, str] | None) -> dict[str, object]:
    rule: dict[str, object] = {"selector": _to_json(selector), "mode": mode.value}
    if bound is not None:
        rule["bound"] = dict(sorted(bound.items()))
    return rule


def _quarantine_name(path: Path) -> Path:
    """``<name>.quarantined-<UTC timestamp>``, with a counter if that name is taken."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    target = path.with_name(f"{path.name}.quarantined-{stamp}")
    counter = 0
    while os.path.lexists(target):
        counter += 1
        target = path.with_name(f"{path.name}.quarantined-{stamp}-{counter}")
    return target
