"""Editing ``stockade.lock`` for authors and operators (docs/design.md §4). The host only reads locks.

Every edit reads the current lock strictly, builds the next generation
(``generation + 1``, ``previous`` = the current lock's digest, see :mod:`host.trust.lock`),
validates it with :meth:`host.trust.lock.PackageLock.from_json` and replaces the file
atomically. A missing lock file is created at generation 1. A bundle is checked
(manifest valid, module digest as pinned, and the component judged by the host's own
load-time checks, so a bundle ``Host.open`` would refuse is refused here with
COMPONENT_REFUSED) before it is added, and its location is stored relative to the
lock's directory (a bundle outside that directory is refused).

An edit signs the new lock body with ``operator_key`` when given (a lock signature, tag
``stockade/lock@1``, see :mod:`host.trust.lock`); otherwise the new generation is unsigned.
:func:`sign_lock` signs the current lock in place: the signature is not part of the
body, so the generation and digest stay the same.

Example::

    update = add_package(Path("stockade.lock"), Path("dist/tracker-1.2.0"), private_key=pem,
                         operator_key=pem)
    update.generation, update.digest, update.lock_key_id
    remove_package(Path("stockade.lock"), "tracker")
    sign_lock(Path("stockade.lock"), operator_pem)
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError

from host.canonical import sha256_hex
from host.config import DEFAULT_CEILINGS, Ceilings
from host.errors import ComponentRefused, LockInvalid
from host.files import atomic_write, read_regular
from host.formats.mcppin import McpLockEntry, McpPin, source_statement
from host.trust.bundlestore import OciSource
from host.trust.lock import LOCK_FORMAT, LockEntry, PackageLock, key_id_for, lock_statement
from sdk.bundle import Bundle, load_private_key, read_bundle, sign_package
from sdk.review.report import component_report

__all__ = [
    "LockUpdate",
    "McpUpdate",
    "add_mcp",
    "add_package",
    "check_bundle_component",
    "read_lock",
    "remove_package",
    "sign_lock",
]

_Key = bytes | Ed25519PrivateKey

_MAX_LOCK_BYTES = 1024 * 1024  # bytes, as host.trust.lock


@dataclass(frozen=True, slots=True)
class LockUpdate:
    """The result of an edit.

    Args:
        path: the lock file written.
        generation: its new generation.
        digest: its new digest (what the next generation's ``previous`` will name).
        previous: the digest of the lock it replaced (``None`` when it was created).
        entry: the entry added or replaced (``None`` for a removal).
        replaced: the entry that was there before under the same name, if any.
        lock_key_id: the key id of the new lock signature (``None``: unsigned).
        was_signed: whether the lock it replaced carried a lock signature.
    """

    path: Path
    generation: int
    digest: str
    previous: str | None
    entry: LockEntry | None
    replaced: LockEntry | None
    lock_key_id: str | None = None
    was_signed: bool = False


def read_lock(path: Path) -> PackageLock | None:
    """Read and validate a lock file; ``None`` when it does not exist.

    Raises:
        LockInvalid: unreadable or invalid.
    """
    if not os.path.lexists(path):
        return None
    return PackageLock.from_json(read_regular(Path(path), _MAX_LOCK_BYTES, what="lock", error=LockInvalid))


def _relative_bundle(lock_path: Path, bundle_dir: Path) -> str:
    base = lock_path.resolve().parent
    target = bundle_dir.resolve()
    try:
        relative = target.relative_to(base)
    except ValueError:
        raise LockInvalid(
            f"bundle {bundle_dir} is outside the lock's directory {base}",
            hint="copy the bundle under the lock's directory (locks store relative paths)",
        ) from None
    return relative.as_posix()


def _signature_for(body: dict[str, Any], operator_key: _Key) -> dict[str, str]:
    """The lock signature object over ``body`` (tag ``stockade/lock@1``)."""
    key = load_private_key(operator_key)
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    signature = base64.b64encode(key.sign(lock_statement(body))).decode("ascii")
    return {"key_id": key_id_for(public), "signature": signature}


def _write(path: Path, body: dict[str, Any], operator_key: _Key | None) -> PackageLock:
    document = dict(body)
    if operator_key is not None:
        # Sign the body exactly as a host will rebuild it from the parsed lock.
        unsigned = PackageLock.from_json(json.dumps(body).encode("utf-8"))
        document["signature"] = _signature_for(unsigned.body(), operator_key)
    data = (json.dumps(document, indent=2) + "\n").encode("utf-8")
    lock = PackageLock.from_json(data)  # the file written is exactly what a host will read
    atomic_write(path, data, mode=0o644)
    return lock


def _write_next(
    path: Path,
    current: PackageLock | None,
    packages: list[LockEntry],
    operator_key: _Key | None,
    mcp: list[McpLockEntry] | None = None,
) -> tuple[PackageLock, str | None]:
    previous = current.digest() if current is not None else None
    body: dict[str, Any] = {
        "format": LOCK_FORMAT,
        "generation": current.generation + 1 if current is not None else 1,
        "previous": previous,
        "packages": [entry.model_dump(mode="json") for entry in packages],
    }
    sources = mcp if mcp is not None else list(current.mcp) if current is not None else []
    if sources:  # MCP sources survive every package edit
        body["mcp"] = [entry.model_dump(mode="json") for entry in sources]
    return _write(path, body, operator_key), previous


def _update(
    path: Path,
    current: PackageLock | None,
    lock: PackageLock,
    previous: str | None,
    *,
    entry: LockEntry | None = None,
    replaced: LockEntry | None = None,
) -> LockUpdate:
    key_id = lock.signature.key_id if lock.signature is not None else None
    was_signed = current is not None and current.signature is not None
    return LockUpdate(path, lock.generation, lock.digest(), previous, entry, replaced, key_id, was_signed)


def check_bundle_component(bundle: Bundle) -> None:
    """Judge a bundle's component with the host's load-time checks (no copy of them).

    Runs :func:`sdk.review.report.component_report`, which compiles the module (types only,
    nothing is instantiated) and applies :func:`host.runtime.checks.check_component`.

    Raises:
        ComponentRefused: the host would refuse the component when the lock is opened.
    """
    refusal = component_report(bundle.module_bytes)["refusal"]
    if refusal is not None:
        name = bundle.manifest.package.name
        raise ComponentRefused(
            f"bundle {name}@{bundle.manifest.package.version}: {refusal['message']}",
            package=name,
            hint="Build the plugin for the stockade:plugin world (`stockade build`); "
            "`stockade inspect BUNDLE_DIR` lists its imports and exports.",
        )


def _entry_for(
    lock_path: Path,
    bundle_dir: Path,
    private_key: _Key | None,
    ceilings: Ceilings,
    *,
    source: OciSource | None = None,
    signed: tuple[str, str] | None = None,
) -> LockEntry:
    """Check a bundle (cheap checks first, then its component) and make its lock entry."""
    bundle = read_bundle(bundle_dir, ceilings=ceilings)
    relative = _relative_bundle(lock_path, bundle_dir)
    name, version = bundle.manifest.package.name, bundle.manifest.package.version
    signature, key_id = signed if signed is not None else (None, None)
    try:
        entry = LockEntry(
            name=name,
            version=version,
            bundle=relative,
            manifest_sha256=bundle.manifest_sha256,
            module_sha256=bundle.module_sha256,
            signature=signature,
            key_id=key_id,
            source=source,
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        raise LockInvalid(f"cannot lock bundle {bundle_dir}: {message}") from None
    check_bundle_component(bundle)
    if private_key is None:
        return entry
    signature, key_id = sign_package(private_key, name, version, bundle.manifest_sha256, bundle.module_sha256)
    return entry.model_copy(update={"signature": signature, "key_id": key_id})


def add_package(
    lock_path: Path,
    bundle_dir: Path,
    *,
    private_key: _Key | None = None,
    operator_key: _Key | None = None,
    ceilings: Ceilings = DEFAULT_CEILINGS,
    source: OciSource | None = None,
    signature: tuple[str, str] | None = None,
) -> LockUpdate:
    """Add a bundle to a lock, or replace the package of the same name, as a new generation.

    Args:
        lock_path: the lock file (created at generation 1 if missing).
        bundle_dir: the bundle directory, inside the lock's directory.
        private_key: an Ed25519 private key (object, PEM or raw) to sign the entry; ``None``
            leaves it unsigned.
        operator_key: an Ed25519 private key to sign the new lock body; ``None`` leaves
            the new generation without a lock signature.
        ceilings: the ceilings the manifest must respect.
        source: where a registry bundle came from (``stockade.source.oci/1``); the bundle
            must then be the store directory of ``source.digest``.
        signature: ``(signature_b64, key_id)`` carried by the bundle (a registry
            artifact's signature layer); ``private_key`` signs instead when given.

    Raises:
        LockInvalid: the lock is invalid, the bundle is unreadable or outside the lock's
            directory, or the lock would hold too many packages.
        ManifestInvalid, DigestMismatch: the bundle fails its checks.
        ComponentRefused: the host would refuse the bundle's component.
        ValueError: a key is not an Ed25519 private key.

    Returns:
        What was written.
    """
    lock_path = Path(lock_path)
    current = read_lock(lock_path)
    entry = _entry_for(lock_path, Path(bundle_dir), private_key, ceilings, source=source, signed=signature)
    name = entry.name
    packages = list(current.packages) if current is not None else []
    replaced = next((p for p in packages if p.name == name), None)
    packages = [entry if p.name == name else p for p in packages] if replaced else [*packages, entry]
    lock, previous = _write_next(lock_path, current, packages, operator_key)
    return _update(lock_path, current, lock, previous, entry=entry, replaced=replaced)


def _require(lock_path: Path) -> PackageLock:
    current = read_lock(lock_path)
    if current is None:
        raise LockInvalid(
            f"no lock file at {lock_path}", hint="create one with `stockade lock add BUNDLE_DIR`"
        )
    return current


def remove_package(lock_path: Path, name: str, *, operator_key: _Key | None = None) -> LockUpdate:
    """Remove a package from a lock as a new generation.

    Args:
        lock_path: the lock file.
        name: the package to remove.
        operator_key: an Ed25519 private key to sign the new lock body, or ``None``.

    Raises:
        LockInvalid: the lock is missing or invalid.
        KeyError: no package of that name is in the lock.
        ValueError: ``operator_key`` is not an Ed25519 private key.

    Returns:
        What was written.
    """
    lock_path = Path(lock_path)
    current = _require(lock_path)
    removed = next((p for p in current.packages if p.name == name), None)
    if removed is None:
        raise KeyError(name)
    remaining = [p for p in current.packages if p.name != name]
    lock, previous = _write_next(lock_path, current, remaining, operator_key)
    return _update(lock_path, current, lock, previous, replaced=removed)


def sign_lock(lock_path: Path, operator_key: _Key) -> LockUpdate:
    """Sign the current lock body with an operator key, in place (same generation).

    The lock signature (tag ``stockade/lock@1``) covers ``format``, ``generation``,
    ``previous`` and every entry; it is not part of the digest, so signing neither makes
    a new generation nor changes ``previous`` of the next one. An earlier lock signature
    is replaced.

    Raises:
        LockInvalid: the lock is missing or invalid.
        ValueError: ``operator_key`` is not an Ed25519 private key.

    Returns:
        What was written (``entry`` and ``replaced`` are ``None``).
    """
    lock_path = Path(lock_path)
    current = _require(lock_path)
    lock = _write(lock_path, current.body(), operator_key)
    return _update(lock_path, current, lock, current.previous)


@dataclass(frozen=True, slots=True)
class McpUpdate:
    """The result of pinning an MCP source: the lock written, its entry and the one replaced."""

    path: Path
    generation: int
    digest: str
    previous: str | None
    entry: McpLockEntry
    replaced: McpLockEntry | None


def add_mcp(
    lock_path: Path, pin: McpPin, *, private_key: bytes | Ed25519PrivateKey | None = None
) -> McpUpdate:
    """Write ``pin`` next to the lock (``mcp/<name>-<sha256>.json``) and add or replace its entry.

    Pin files are content-addressed: a re-pin writes a new file beside the old one, never
    over it, so a saved copy of the previous lock still verifies (``stockade diff
    OLD.lock NEW.lock``).

    The entry pins the file's sha256 and, with ``private_key``, is signed over
    :func:`host.formats.mcppin.source_statement` (tag ``stockade/mcp-source@1``).

    Raises:
        LockInvalid: the lock is invalid, or the source's name overlaps a package's or
            another source's namespace.
        ValueError: ``private_key`` is not an Ed25519 private key.
    """
    lock_path = Path(lock_path)
    current = read_lock(lock_path)
    name, version = pin.source.name, pin.source.version
    data = pin.to_json()
    digest = sha256_hex(data)
    relative = f"mcp/{name}-{digest}.json"
    signature = key_id = None
    if private_key is not None:
        key = load_private_key(private_key)
        public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        signature = base64.b64encode(key.sign(source_statement(name, version, digest))).decode("ascii")
        key_id = key_id_for(public)
    entry = McpLockEntry(
        name=name, version=version, pin=relative, pin_sha256=digest, signature=signature, key_id=key_id
    )
    sources = list(current.mcp) if current is not None else []
    replaced = next((m for m in sources if m.name == name), None)
    sources = [entry if m.name == name else m for m in sources] if replaced else [*sources, entry]
    packages = list(current.packages) if current is not None else []
    target = lock_path.resolve().parent / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    # Validate the next lock before writing the pin, so a refused name leaves no file behind.
    try:
        PackageLock(
            format=LOCK_FORMAT, generation=1, previous=None, packages=tuple(packages), mcp=tuple(sources)
        )
    except ValidationError as exc:
        message = str(exc.errors(include_url=False, include_input=False)[0]["msg"])
        raise LockInvalid(f"cannot pin MCP source {name}: {message.removeprefix('Value error, ')}") from None
    atomic_write(target, data, mode=0o644)
    lock, previous = _write_next(lock_path, current, packages, None, sources)
    return McpUpdate(lock_path, lock.generation, lock.digest(), previous, entry, replaced)
