"""The frozen registry of tool definitions (docs/design.md §4, §5).

A :class:`FrozenRegistry` is built once, from 0–128 :class:`ToolDefinition` objects, and
never changes afterwards: there is no register, add or remove, attribute assignment
raises, and the lookup table is a read-only ``MappingProxyType``. Lookups are exact on
``(name, version)``: there is no "latest", no prefix match and no fallback.

Every definition carries its :class:`Binding` (package, version, lock generation,
manifest and module digests). The binding is part of the action digest (docs/design.md §7), so
an approval given under one generation never authorizes a call under another.

Duplicate ``(name, version)`` pairs and more than 128 definitions raise
:class:`~host.errors.LockInvalid`: the definitions come from the packages a lock names,
so a collision means the lock combines packages that cannot be loaded together.

Example::

    registry = FrozenRegistry.from_packages([(manifest, binding)])
    tool = registry.get("tracker.list-issues", "1.2.0")     # ToolNotFound otherwise
    tool.binding.generation
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, NoReturn, final

from host.errors import LockInvalid, ToolNotFound
from host.formats.manifest import Effect, PackageManifest, RateLimit, Risk, ToolSpec

__all__ = ["MAX_DEFINITIONS", "Binding", "FrozenRegistry", "ToolDefinition"]

MAX_DEFINITIONS: Final = 128  # docs/design.md §5: a registry holds 0–128 tool definitions


@final
@dataclass(frozen=True, slots=True)
class Binding:
    """What a tool definition is bound to: one package version under one lock generation.

    Attributes:
        package: package name.
        version: exact package version.
        generation: the lock generation the package was loaded under.
        manifest_sha256: sha256 of the bundle's ``manifest.json`` bytes.
        module_sha256: sha256 of the bundle's ``module.wasm`` bytes.
    """

    package: str
    version: str
    generation: int
    manifest_sha256: str
    module_sha256: str

    def to_dict(self) -> dict[str, Any]:
        """The binding as JSON data (for the action digest, previews and audit records)."""
        return {
            "package": self.package,
            "version": self.version,
            "generation": self.generation,
            "manifest_sha256": self.manifest_sha256,
            "module_sha256": self.module_sha256,
        }


@final
@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """One callable tool: its manifest spec, its package and its binding.

    Build with :meth:`from_spec`. The schemas are private deep copies, so changing a
    manifest object afterwards cannot change a registered tool; they stay plain dicts
    (for ``check_schema``/``canonicalize`` and JSON export), so treat them as read-only.
    """

    name: str
    version: str
    description: str
    input_schema: Mapping[str, Any] = field(repr=False)
    output_schema: Mapping[str, Any] | None = field(repr=False)
    schema_profile: str | None  # None: the bounded subset; else host.formats.schemaprofile.PROFILE_EXTERNAL
    effect: Effect
    risk: Risk
    permissions: tuple[str, ...]
    timeout_s: int
    sensitive_params: tuple[str, ...]
    rate_limit: RateLimit | None
    binding: Binding
    package: PackageManifest = field(repr=False, compare=False)

    @classmethod
    def from_spec(cls, spec: ToolSpec, package: PackageManifest, binding: Binding) -> ToolDefinition:
        """Make a definition from one ``tools`` entry of a manifest.

        Args:
            spec: the tool entry; must be one of ``package.tools``.
            package: the manifest it comes from.
            binding: the lock binding of that package.

        Raises:
            LockInvalid: the binding names another package or version than the manifest.
            ValueError: ``spec`` is not a tool of ``package`` (caller misuse).

        Returns:
            The definition.
        """
        if (binding.package, binding.version) != (package.package.name, package.package.version):
            raise LockInvalid(
                f"binding {binding.package}@{binding.version} does not match manifest "
                f"{package.package.name}@{package.package.version}"
            )
        if not any(spec is tool for tool in package.tools):
            raise ValueError(f"tool {spec.name!r} is not part of package {package.package.name!r}")
        return cls(
            name=spec.name,
            version=spec.version,
            description=spec.description,
            input_schema=copy.deepcopy(spec.input_schema),
            output_schema=None if spec.output_schema is None else copy.deepcopy(spec.output_schema),
            schema_profile=spec.schema_profile,
            effect=spec.effect,
            risk=spec.risk,
            permissions=spec.permissions,
            timeout_s=spec.timeout_s,
            sensitive_params=spec.sensitive_params,
            rate_limit=spec.rate_limit,
            binding=binding,
            package=package,
        )

    @property
    def key(self) -> tuple[str, str]:
        """``(name, version)``, the registry key."""
        return (self.name, self.version)


@final
class FrozenRegistry:
    """An immutable, exact-match table of tool definitions.

    Args:
        definitions: 0–128 definitions with distinct ``(name, version)``.

    Raises:
        LockInvalid: more than 128 definitions, or a duplicate ``(name, version)``.
        TypeError: an item is not a :class:`ToolDefinition` (caller misuse).
    """

    __slots__ = ("_by_key", "_ordered")

    _by_key: Mapping[tuple[str, str], ToolDefinition]
    _ordered: tuple[ToolDefinition, ...]

    def __init__(self, definitions: Iterable[ToolDefinition]) -> None:
        table: dict[tuple[str, str], ToolDefinition] = {}
        for definition in definitions:
            if not isinstance(definition, ToolDefinition):
                raise TypeError(f"FrozenRegistry holds ToolDefinition, not {type(definition).__name__}")
            if len(table) >= MAX_DEFINITIONS:
                raise LockInvalid(f"more than {MAX_DEFINITIONS} tool definitions in one registry")
            if definition.key in table:
                other = table[definition.key].binding
                raise LockInvalid(
                    f"tool {definition.name!r} version {definition.version!r} is defined twice "
                    f"(packages {other.package}@{other.version} and "
                    f"{definition.binding.package}@{definition.binding.version})",
                    tool=definition.name,
                    version=definition.version,
                )
            table[definition.key] = definition
        ordered = tuple(table[key] for key in sorted(table))
        object.__setattr__(self, "_by_key", MappingProxyType({d.key: d for d in ordered}))
        object.__setattr__(self, "_ordered", ordered)

    @classmethod
    def from_packages(cls, packages: Iterable[tuple[PackageManifest, Binding]]) -> FrozenRegistry:
        """Build a registry from every tool of every (manifest, binding) pair.

        Args:
            packages: the packages of one verified lock with their bindings.

        Raises:
            LockInvalid: a binding does not match its manifest, a duplicate
                ``(name, version)``, or more than 128 tools in total.

        Returns:
            The registry.
        """
        return cls(
            ToolDefinition.from_spec(spec, manifest, binding)
            for manifest, binding in packages
            for spec in manifest.tools
        )

    def get(self, name: str, version: str) -> ToolDefinition:
        """Look a tool up by its exact name and exact version.

        Args:
            name: the tool name, exactly as in the manifest.
            version: the exact SemVer version; there is no "latest" and no range.

        Raises:
            ToolNotFound: no tool with exactly that name and version.

        Returns:
            The definition.
        """
        found = None
        if isinstance(name, str) and isinstance(version, str):
            found = self._by_key.get((name, version))
        if found is None:
            shown_name = name[:80] if isinstance(name, str) else type(name).__name__
            shown_version = version[:80] if isinstance(version, str) else type(version).__name__
            raise ToolNotFound(
                f"no tool {shown_name!r} with exact version {shown_version!r}",
                tool=shown_name,
                version=shown_version,
            )
        return found

    def __contains__(self, key: object) -> bool:
        return (
            isinstance(key, tuple)
            and len(key) == 2
            and all(isinstance(part, str) for part in key)
            and key in self._by_key
        )

    def __iter__(self) -> Iterator[ToolDefinition]:
        return iter(self._ordered)

    def __len__(self) -> int:
        return len(self._ordered)

    def __repr__(self) -> str:
        return f"FrozenRegistry({len(self._ordered)} tools)"

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("FrozenRegistry is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("FrozenRegistry is immutable")

    def __init_subclass__(cls, **kwargs: object) -> NoReturn:
        raise TypeError("FrozenRegistry is final")

    def __reduce__(self) -> NoReturn:
        raise TypeError("FrozenRegistry is not serializable; rebuild it from the lock")
