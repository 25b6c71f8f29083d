"""The package lock, its signatures and the accepted-generation state (docs/design.md §4, §12).

``stockade.lock`` (JSON, format ``stockade.lock/1``) lists the packages a host trusts::

    {"format": "stockade.lock/1", "generation": 2, "previous": "<sha256 of generation 1>",
     "packages": [{"name": "tracker", "version": "1.2.0", "bundle": "bundles/tracker",
                   "manifest_sha256": "<hex>", "module_sha256": "<hex>",
                   "signature": "<base64 Ed25519>", "key_id": "<16 hex>"}],
     "signature": {"key_id": "<16 hex>", "signature": "<base64 Ed25519>"}}

An entry pulled from an OCI registry also has an optional ``source`` (format
``stockade.source.oci/1``, see :mod:`host.trust.bundlestore`); its ``bundle`` must then be the
content-addressed store directory of the source digest. An entry without a source is
serialized without the key, so locks written before sources existed keep their digest.

Definitions (stable; reviewers and tools rely on them):

- **Lock body**: the lock without its top-level ``signature`` member.
- **Lock digest**: ``sha256(canonical_json(body))`` (RFC 8785), so whitespace, key
  order and the lock signature never change it (signing a lock does not make it another
  lock). ``previous`` is the digest of the previous generation; it is ``null`` exactly
  when ``generation`` is 1.
- **Lock signature** (optional, top-level ``signature``): an operator key's Ed25519
  signature over :func:`host.signing.lock_statement` of the body (domain tag
  ``stockade/lock@1``), so ``generation``, ``previous`` and every entry are signed.
  Required when the host trusts operator keys (``HostConfig.trusted_operator_keys_file``);
  not checked otherwise (such a host accepts unsigned locks, so a signature adds nothing
  it could act on).
- **Bundle location**: a relative POSIX path from the lock file's directory to the bundle
  directory; absolute paths, ``..``, ``.``, empty segments and backslashes are refused,
  and the resolved directory must stay inside the lock's directory.
- **Signatures, key ids, trusted keys file**: see :mod:`host.signing` (re-exported here:
  :func:`statement_for`, :func:`key_id_for`, :class:`TrustedKeys`).

Verification order in :func:`load_lock` (each step fails closed):

0. read the lock (at most 1 MiB), parse it strictly, compute its digest; when operator
   keys are trusted, verify the lock signature (SIGNATURE_INVALID) before reading any
   bundle;
1. for each package: read ``manifest.json`` and ``module.wasm`` once, as regular files
   under size caps, and compare their sha256 with the lock *before* anything parses the
   manifest or compiles the module (DIGEST_MISMATCH);
2. verify the signature when present, and require it when
   ``HostConfig.require_signatures`` or when trusted package keys are configured, unless
   ``HostConfig.unsafe_allow_unsigned`` (SIGNATURE_INVALID, ``reason="unsigned"``; see
   :meth:`HostConfig.signatures_required`). A signature is never ignored:
   one made by a key that is not trusted is refused even if signatures are optional;
   (an entry with a ``source`` whose store directory is absent is BUNDLE_MISSING: the
   host never uses the network; ``stockade lock fetch`` fills the store);
3. parse the manifest (MANIFEST_INVALID) and check it names the locked package, version
   and module digest.

:class:`host.trust.lockstate.LockState` (re-exported here) then moves the accepted state
forward only: see :mod:`host.trust.lockstate`.

Example::

    loaded = load_lock(Path("stockade.lock"), config=config, trusted_keys=None)
    LockState(config.state_dir).accept(loaded)
    registry = loaded.registry()
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Final, Literal, final

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from host._files import read_regular
from host.canonical import digest_json, parse_json, sha256_hex
from host.config import HostConfig
from host.errors import (
    BundleMissing,
    DigestMismatch,
    InputInvalid,
    LockInvalid,
    ManifestInvalid,
    SignatureInvalid,
)
from host.formats.manifest import MAX_MANIFEST_BYTES, PackageManifest
from host.formats.mcppin import McpLockEntry, namespaces_conflict
from host.signing import (
    KEYS_FORMAT,
    TrustedKeys,
    check_key_id,
    check_signature_b64,
    key_id_for,
    lock_statement,
    statement_for,
)
from host.trust.bundlestore import OciSource, store_bundle_path
from host.trust.lockstate import (
    MAX_GENERATION_STEP,
    AcceptedState,
    LockState,
    _check_name,
    _check_version,
    semver_precedence,
)
from host.trust.registry import Binding, FrozenRegistry

__all__ = [
    "KEYS_FORMAT",
    "LOCK_FORMAT",
    "MAX_GENERATION_STEP",
    "MAX_MODULE_BYTES",
    "AcceptedState",
    "LoadedLock",
    "LockEntry",
    "LockSignature",
    "LockState",
    "LockedPackage",
    "PackageLock",
    "TrustedKeys",
    "key_id_for",
    "load_lock",
    "lock_statement",
    "semver_precedence",
    "statement_for",
]

LOCK_FORMAT: Final = "stockade.lock/1"
MAX_LOCK_BYTES: Final = 1024 * 1024  # bytes; 128 entries need about 64 KiB
MAX_MODULE_BYTES: Final = 256 * 1024 * 1024  # bytes; a componentize-py plugin is about 18 MB
MAX_PACKAGES: Final = 128  # a registry holds at most 128 tools, so at most 128 packages


# --- formats -------------------------------------------------------------------------


def _check_sha256(value: str) -> str:
    if len(value) != 64 or any(ch not in "0123456789abcdef" for ch in value):
        raise ValueError("must be 64 lowercase hexadecimal characters (sha256)")
    return value


def _check_bundle_path(value: str) -> str:
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value) or "\\" in value:
        raise ValueError("bundle path may not hold control characters or backslashes")
    if value.startswith("/") or (len(value) > 1 and value[1] == ":"):
        raise ValueError("bundle path must be relative to the lock file's directory")
    if any(part in ("", ".", "..") for part in value.split("/")):
        raise ValueError("bundle path may not hold '..', '.' or empty segments")
    return value


Sha256Hex = Annotated[str, AfterValidator(_check_sha256)]
KeyId = Annotated[str, AfterValidator(check_key_id)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class LockEntry(_Model):
    """One package of a lock."""

    name: Annotated[str, AfterValidator(_check_name)]
    version: Annotated[str, AfterValidator(_check_version)]
    bundle: Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(_check_bundle_path)]
    manifest_sha256: Sha256Hex
    module_sha256: Sha256Hex
    signature: Annotated[str, AfterValidator(check_signature_b64)] | None = None
    key_id: KeyId | None = None
    source: OciSource | None = None  # stockade.source.oci/1: where a registry bundle came from

    @model_validator(mode="after")
    def _signature_and_key_together(self) -> LockEntry:
        if (self.signature is None) != (self.key_id is None):
            raise ValueError("signature and key_id must both be set or both be null")
        if self.source is not None and self.bundle != store_bundle_path(self.source.digest):
            raise ValueError("an entry with a source must name the store directory of its digest as bundle")
        return self

    @model_serializer(mode="wrap")
    def _omit_absent_source(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        # Locks written before `source` existed must keep their digest (and chain).
        data: dict[str, object] = handler(self)
        if self.source is None:
            data.pop("source", None)
        return data


class LockSignature(_Model):
    """An operator's signature over the lock body (tag ``stockade/lock@1``)."""

    key_id: KeyId
    signature: Annotated[str, AfterValidator(check_signature_b64)]


class PackageLock(_Model):
    """The lock file, format ``stockade.lock/1``. Build with :meth:`from_json`."""

    format: Literal["stockade.lock/1"]
    generation: Annotated[int, Field(ge=1, le=2**53 - 1)]
    previous: Sha256Hex | None
    packages: Annotated[tuple[LockEntry, ...], Field(max_length=MAX_PACKAGES)]
    signature: LockSignature | None = None
    # External MCP sources (host.formats.mcppin); omitted when empty so older locks keep their digest.
    mcp: Annotated[tuple[McpLockEntry, ...], Field(max_length=MAX_PACKAGES)] = ()

    @model_validator(mode="after")
    def _check_chain_and_names(self) -> PackageLock:
        if (self.generation == 1) != (self.previous is None):
            raise ValueError("'previous' must be null for generation 1 and set for every later one")
        names = [entry.name for entry in self.packages]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"package listed twice: {', '.join(duplicates)}")
        _check_source_namespaces(names, [entry.name for entry in self.mcp])
        return self

    @model_serializer(mode="wrap")
    def _omit_absent_mcp(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        data: dict[str, object] = handler(self)
        if not self.mcp:
            data.pop("mcp", None)
        return data

    @classmethod
    def from_json(cls, data: bytes) -> PackageLock:
        """Parse and validate lock bytes.

        Args:
            data: the lock file's bytes (strict JSON, at most 1 MiB).

        Raises:
            LockInvalid: not strict JSON, unknown or missing fields, bad values;
                ``details["problems"]`` lists them.

        Returns:
            The lock.
        """
        if not isinstance(data, bytes):
            raise TypeError("PackageLock.from_json takes bytes")
        try:
            parse_json(data, max_bytes=MAX_LOCK_BYTES)
        except InputInvalid as exc:
            raise LockInvalid(f"lock is not strict JSON: {exc.message}") from None
        try:
            return cls.model_validate_json(data, strict=True)
        except ValidationError as exc:
            problems = _problems(exc)
            first = problems[0] if problems else {"loc": "", "msg": "invalid"}
            raise LockInvalid(
                f"lock is invalid: {first['loc'] or '(document)'}: {first['msg']}", problems=problems
            ) from None

    def body(self) -> dict[str, Any]:
        """The lock without its ``signature``: what the digest and a lock signature cover."""
        return self.model_dump(mode="json", exclude={"signature"})

    def digest(self) -> str:
        """``sha256(canonical_json(body))``: the value the next generation's ``previous`` names."""
        return digest_json(self.body())

    def statement(self) -> bytes:
        """The bytes a lock signature covers (:func:`host.signing.lock_statement` of the body)."""
        return lock_statement(self.body())


def _check_source_namespaces(packages: list[str], sources: list[str]) -> None:
    """An MCP source may not share a tool namespace with a package or another source
    (``tracker`` and ``tracker.x`` overlap), so no source can shadow another's tools."""
    for index, source in enumerate(sources):
        for other in (*packages, *sources[:index]):
            if namespaces_conflict(source, other):
                raise ValueError(f"MCP source {source!r} would shadow the tools of {other!r}")


def _problems(exc: ValidationError) -> list[dict[str, str]]:
    problems = []
    for error in exc.errors(include_url=False, include_input=False)[:100]:
        msg = str(error["msg"]).removeprefix("Value error, ")
        problems.append({"loc": ".".join(str(part) for part in error["loc"]), "msg": msg})
    return problems


# --- loading -------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class LockedPackage:
    """One verified package: its manifest, module bytes and binding."""

    manifest: PackageManifest = field(repr=False)
    module_bytes: bytes = field(repr=False)  # verified against module_sha256
    binding: Binding
    bundle_dir: Path


@final
@dataclass(frozen=True, slots=True)
class LoadedLock:
    """A lock whose every digest and signature has been verified."""

    path: Path
    lock: PackageLock = field(repr=False)
    digest: str
    packages: tuple[LockedPackage, ...] = field(repr=False)

    @property
    def generation(self) -> int:
        """The lock's generation."""
        return self.lock.generation

    @property
    def previous(self) -> str | None:
        """The digest of the previous generation, ``None`` for generation 1."""
        return self.lock.previous

    @property
    def lock_key_id(self) -> str | None:
        """The key id of the lock signature, ``None`` when the lock is unsigned."""
        return self.lock.signature.key_id if self.lock.signature is not None else None

    def registry(self) -> FrozenRegistry:
        """Build the frozen registry of every tool of every package.

        Raises:
            LockInvalid: duplicate tools or more than 128 tools in total.
        """
        return FrozenRegistry.from_packages((p.manifest, p.binding) for p in self.packages)


def _read(path: Path, limit: int, what: str) -> bytes:
    return read_regular(path, limit, what=what, error=LockInvalid)


def _bundle_dir(lock_dir: Path, entry: LockEntry) -> Path:
    base = lock_dir.resolve()
    target = (base / PurePosixPath(entry.bundle)).resolve()
    if target != base and base not in target.parents:
        raise LockInvalid(
            f"bundle of {entry.name} resolves outside the lock's directory", package=entry.name
        )
    return target


def _digest_check(entry: LockEntry, what: str, data: bytes, expected: str) -> None:
    actual = sha256_hex(data)
    if not hmac.compare_digest(actual, expected):
        raise DigestMismatch(
            f"{what} of {entry.name}@{entry.version} has sha256 {actual}, the lock pins {expected}",
            package=entry.name,
            file=what,
            expected=expected,
            actual=actual,
        )


def _verify_signature(entry: LockEntry, *, require: bool, keys: TrustedKeys | None) -> None:
    """Verify when required by policy or when present: a signature is never ignored."""
    if not require and entry.signature is None:
        return
    if keys is not None and entry.signature is None:
        raise SignatureInvalid(
            f"package {entry.name}@{entry.version} is not signed, and this host requires signatures "
            "(trusted keys are configured)",
            hint=(
                "Sign the bundle with a key the trusted keys file lists (`stockade sign --key KEY.pem "
                "BUNDLE`, then `stockade lock add` again). For development only, accept unsigned "
                "packages with HostConfig(unsafe_allow_unsigned=True) / `--unsafe-allow-unsigned` "
                "(logged and audited)."
            ),
            package=entry.name,
            reason="unsigned",
        )
    if keys is None:
        signer = f"signed by key {entry.key_id}, which is not trusted here" if entry.key_id else "not signed"
        raise SignatureInvalid(
            f"package {entry.name}@{entry.version} is {signer}: no trusted keys are configured",
            hint=(
                "Trust the signer: pass `--trusted-keys FILE` (the stockade.keys/1 file listing the "
                "signer's key, as written by `stockade keygen --keys-file FILE`), or record it once "
                "with `trusted_keys = \"FILE\"` in stockade.host.toml (`stockade init --trusted-keys FILE`)."
            ),
            package=entry.name,
            key_id=entry.key_id,
        )
    keys.verify(
        entry.name, entry.version, entry.manifest_sha256, entry.module_sha256,
        signature=entry.signature, key_id=entry.key_id,
    )


def _load_packages(
    entries: Sequence[LockEntry],
    lock_dir: Path,
    generation: int,
    config: HostConfig,
    keys: TrustedKeys | None,
) -> tuple[LockedPackage, ...]:
    """Every package verified, the first failure in lock order raised.

    Packages are verified in parallel threads: reading and hashing a module (tens of MB
    for a Python plugin) release the GIL, so a lock of several plugins uses every core
   .
    """
    if len(entries) < 2:
        return tuple(_load_package(e, lock_dir, generation, config, keys) for e in entries)
    workers = min(len(entries), os.cpu_count() or 1, _MAX_VERIFY_THREADS)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stockade-verify") as pool:
        futures = [pool.submit(_load_package, e, lock_dir, generation, config, keys) for e in entries]
    return tuple(future.result() for future in futures)


_MAX_VERIFY_THREADS = 8


def _load_package(
    entry: LockEntry,
    lock_dir: Path,
    generation: int,
    config: HostConfig,
    keys: TrustedKeys | None,
) -> LockedPackage:
    bundle_dir = _bundle_dir(lock_dir, entry)
    if entry.source is not None and not bundle_dir.is_dir():
        raise BundleMissing(
            f"package {entry.name}@{entry.version} comes from {entry.source.reference()}, which is "
            f"not in the local bundle store ({entry.bundle}); the host never uses the network",
            package=entry.name,
            source=entry.source.reference(),
            hint=f"run `stockade lock fetch` or `stockade pull {entry.source.reference()}` next to the lock",
        )
    manifest_bytes = _read(bundle_dir / "manifest.json", MAX_MANIFEST_BYTES, "manifest.json")
    module_bytes = _read(bundle_dir / "module.wasm", MAX_MODULE_BYTES, "module.wasm")
    # (1) digests before anything parses or compiles these bytes.
    _digest_check(entry, "manifest.json", manifest_bytes, entry.manifest_sha256)
    _digest_check(entry, "module.wasm", module_bytes, entry.module_sha256)
    # (2) signatures, over the digests just checked.
    _verify_signature(entry, require=config.signatures_required(keys_trusted=keys is not None), keys=keys)
    # (3) the manifest, now that its bytes are the locked ones.
    try:
        manifest = PackageManifest.from_json(manifest_bytes, ceilings=config.ceilings)
    except ManifestInvalid as exc:
        raise ManifestInvalid(
            f"package {entry.name}@{entry.version}: {exc.message}",
            problems=exc.details.get("problems", []),
            package=entry.name,
        ) from None
    if (manifest.package.name, manifest.package.version) != (entry.name, entry.version):
        raise LockInvalid(
            f"lock entry {entry.name}@{entry.version} points at a bundle of "
            f"{manifest.package.name}@{manifest.package.version}",
            package=entry.name,
        )
    if manifest.module.sha256 != entry.module_sha256:
        raise DigestMismatch(
            f"manifest of {entry.name} pins module sha256 {manifest.module.sha256}, "
            f"the lock pins {entry.module_sha256}",
            package=entry.name,
            file="module.wasm",
        )
    binding = Binding(entry.name, entry.version, generation, entry.manifest_sha256, entry.module_sha256)
    return LockedPackage(manifest=manifest, module_bytes=module_bytes, binding=binding, bundle_dir=bundle_dir)


def _verify_lock_signature(lock: PackageLock, operator_keys: TrustedKeys | None) -> None:
    """Step 0: with operator keys trusted, the whole lock body must carry their signature."""
    if operator_keys is None:
        return
    signature = lock.signature
    operator_keys.verify_lock(
        lock.body(),
        signature=signature.signature if signature is not None else None,
        key_id=signature.key_id if signature is not None else None,
    )


def load_lock(
    path: Path,
    *,
    config: HostConfig,
    trusted_keys: TrustedKeys | None,
    operator_keys: TrustedKeys | None = None,
) -> LoadedLock:
    """Read a lock and verify every package it names (see the module docstring for order).

    Args:
        path: the lock file.
        config: host configuration (ceilings, ``require_signatures``,
            ``unsafe_allow_unsigned``, ``trusted_keys_file``, ``trusted_operator_keys_file``).
        trusted_keys: the trusted package keys; ``None`` loads ``config.trusted_keys_file``
            when set, otherwise no key is trusted (every signed package is then refused).
            When keys are trusted, every package must be signed by one of them unless
            ``config.unsafe_allow_unsigned``.
        operator_keys: the trusted operator keys; ``None`` loads
            ``config.trusted_operator_keys_file`` when set. When either is given, the lock
            must carry a valid lock signature by one of them.

    Raises:
        LockInvalid: unreadable or malformed lock or bundle, or a lock entry naming
            another package than its manifest.
        DigestMismatch: a bundle file does not match its pinned sha256.
        SignatureInvalid: a package or lock signature is missing where required, by an
            untrusted key, or bad.
        ManifestInvalid: a (digest-verified) manifest is invalid.
        BundleMissing: an entry with a registry ``source`` whose store directory is absent.

    Returns:
        The verified lock. Nothing is persisted: call :meth:`LockState.accept` next.
    """
    path = Path(path)
    lock = PackageLock.from_json(_read(path, MAX_LOCK_BYTES, "lock file"))
    operators = operator_keys
    if operators is None and config.trusted_operator_keys_file is not None:
        operators = TrustedKeys.load(config.trusted_operator_keys_file)
    _verify_lock_signature(lock, operators)
    keys = trusted_keys
    if keys is None and config.trusted_keys_file is not None:
        keys = TrustedKeys.load(config.trusted_keys_file)
    lock_dir = path.parent
    packages = _load_packages(lock.packages, lock_dir, lock.generation, config, keys)
    return LoadedLock(path=path, lock=lock, digest=lock.digest(), packages=packages)
