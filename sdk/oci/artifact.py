"""Stockade bundles as OCI artifacts: the format, push, and pull-by-digest (docs/design.md §12).

Artifact format (an OCI image manifest, schemaVersion 2, serialized as RFC 8785 canonical
JSON so the same bundle and signature always push to the same digest)::

    mediaType     application/vnd.oci.image.manifest.v1+json
    artifactType  application/vnd.stockade.bundle.v1
    config        application/vnd.stockade.manifest.v1+json    the exact manifest.json bytes
    layers[0]     application/vnd.stockade.module.v1+wasm      the exact module.wasm bytes
    layers[1]     application/vnd.stockade.signature.v1+json   optional: {"format":
                  "stockade.signature/1", "key_id": "<16 hex>", "signature": "<base64>"}
    annotations   org.opencontainers.image.title / .version / .description =
                  the package's name, version and description

Pull (:func:`pull_bundle`) takes a digest-pinned reference and verifies, in order, before
anything is written: (1) the OCI manifest's sha256 is the pinned digest; (2) it is exactly
this format (unknown fields, media types or extra layers refused, sizes bounded); (3)
every blob's size and sha256 match its descriptor; (4) the Stockade manifest rules
(``PackageManifest.from_json`` with the host's ceilings) and ``module.sha256`` equal the
module's sha256; (5) the annotations name the manifest's package and version; (6) the
signature, when present, verifies against the trusted keys when they are given, and
``require_signatures`` refuses an unsigned artifact. Only then are the files written into
a temporary directory beside the destination, fsynced, and renamed into place in one
``rename``: a failed or interrupted pull leaves nothing half-written under the name.

Example::

    with RegistryClient("127.0.0.1:5000", insecure=True, credential=None) as client:
        digest = push_bundle(client, parse_reference("127.0.0.1:5000/team/echo:1.0.0"), bundle)
        pulled = pull_bundle(client, parse_reference(f"127.0.0.1:5000/team/echo@{digest}"),
                             store_root=lock_dir / "bundle-store", trusted_keys=keys)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, Literal, final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from host.canonical import canonical_json, sha256_hex
from host.config import DEFAULT_CEILINGS, Ceilings
from host.errors import ArtifactInvalid, DigestMismatch, ManifestInvalid, SignatureInvalid
from host.files import fsync_dir, replace_dir
from host.formats.manifest import MAX_MANIFEST_BYTES, PackageManifest
from host.signing import check_key_id, check_signature_b64
from host.trust.bundlestore import check_digest
from host.trust.lock import MAX_MODULE_BYTES, TrustedKeys
from sdk.bundle import Bundle
from sdk.oci.client import OCI_MANIFEST_MEDIA_TYPE, OciReference, RegistryClient

__all__ = [
    "ARTIFACT_TYPE",
    "CONFIG_MEDIA_TYPE",
    "MODULE_MEDIA_TYPE",
    "SIGNATURE_FORMAT",
    "SIGNATURE_MEDIA_TYPE",
    "ArtifactManifest",
    "PulledBundle",
    "build_artifact",
    "pull_bundle",
    "push_bundle",
]

ARTIFACT_TYPE: Final = "application/vnd.stockade.bundle.v1"
CONFIG_MEDIA_TYPE: Final = "application/vnd.stockade.manifest.v1+json"
MODULE_MEDIA_TYPE: Final = "application/vnd.stockade.module.v1+wasm"
SIGNATURE_MEDIA_TYPE: Final = "application/vnd.stockade.signature.v1+json"
SIGNATURE_FORMAT: Final = "stockade.signature/1"
MAX_SIGNATURE_BYTES: Final = 4096  # bytes; a signature document is about 150
MAX_ANNOTATIONS: Final = 32
ANNOTATION_TITLE: Final = "org.opencontainers.image.title"
ANNOTATION_VERSION: Final = "org.opencontainers.image.version"
ANNOTATION_DESCRIPTION: Final = "org.opencontainers.image.description"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


_Digest = Annotated[str, AfterValidator(check_digest)]
_Annotations = Annotated[dict[str, Annotated[str, Field(max_length=4096)]], Field(max_length=MAX_ANNOTATIONS)]


class Descriptor(_Model):
    """An OCI content descriptor, as Stockade writes them (no urls, platform or data)."""

    mediaType: str
    digest: _Digest
    size: Annotated[int, Field(ge=0, le=MAX_MODULE_BYTES)]
    annotations: _Annotations | None = None


class ArtifactManifest(_Model):
    """The OCI manifest of a Stockade bundle artifact; anything else is ARTIFACT_INVALID."""

    schemaVersion: Literal[2]
    mediaType: Literal["application/vnd.oci.image.manifest.v1+json"]
    artifactType: Literal["application/vnd.stockade.bundle.v1"]
    config: Descriptor
    layers: Annotated[tuple[Descriptor, ...], Field(min_length=1, max_length=2)]
    annotations: _Annotations

    @classmethod
    def from_json(cls, data: bytes) -> ArtifactManifest:
        """Parse and check the layout (media types, layer order, sizes).

        Raises:
            ArtifactInvalid: not this format; ``details["problems"]`` lists why.
        """
        try:
            manifest = cls.model_validate_json(data, strict=True)
        except ValidationError as exc:
            problems = [
                f"{'.'.join(str(p) for p in e['loc']) or '(document)'}: {e['msg']}"
                for e in exc.errors(include_url=False, include_input=False)[:20]
            ]
            raise ArtifactInvalid(
                f"not a Stockade bundle artifact: {problems[0] if problems else 'invalid'}", problems=problems
            ) from None
        manifest._check_layout()
        return manifest

    def _check_layout(self) -> None:
        if self.config.mediaType != CONFIG_MEDIA_TYPE:
            raise ArtifactInvalid(
                f"config media type {self.config.mediaType[:80]!r} is not {CONFIG_MEDIA_TYPE}"
            )
        if self.config.size > MAX_MANIFEST_BYTES:
            raise ArtifactInvalid(f"the manifest blob is {self.config.size} bytes, over {MAX_MANIFEST_BYTES}")
        expected = (MODULE_MEDIA_TYPE, SIGNATURE_MEDIA_TYPE)[: len(self.layers)]
        found = tuple(layer.mediaType for layer in self.layers)
        if found != expected:
            raise ArtifactInvalid(f"layers {list(found)!r} are not {list(expected)!r}")
        if self.signature is not None and self.signature.size > MAX_SIGNATURE_BYTES:
            raise ArtifactInvalid(
                f"the signature blob is {self.signature.size} bytes, over {MAX_SIGNATURE_BYTES}"
            )

    @property
    def module(self) -> Descriptor:
        """The module layer."""
        return self.layers[0]

    @property
    def signature(self) -> Descriptor | None:
        """The signature layer, if any."""
        return self.layers[1] if len(self.layers) > 1 else None


class SignatureDocument(_Model):
    """The signature layer (``stockade.signature/1``): what a lock entry's signature fields hold."""

    format: Literal["stockade.signature/1"]
    key_id: Annotated[str, AfterValidator(check_key_id)]
    signature: Annotated[str, AfterValidator(check_signature_b64)]


# --- push ---------------------------------------------------------------------------------


def _descriptor(media_type: str, data: bytes, title: str | None = None) -> dict[str, object]:
    descriptor: dict[str, object] = {
        "mediaType": media_type,
        "digest": "sha256:" + sha256_hex(data),
        "size": len(data),
    }
    if title is not None:
        descriptor["annotations"] = {ANNOTATION_TITLE: title}
    return descriptor


def build_artifact(bundle: Bundle, signature: tuple[str, str] | None) -> tuple[bytes, dict[str, bytes]]:
    """The OCI manifest bytes and the blobs (by digest) of a bundle artifact.

    Args:
        bundle: a checked bundle (:func:`sdk.bundle.read_bundle`).
        signature: ``(signature_b64, key_id)`` to carry as the signature layer, or ``None``.

    Returns:
        ``(manifest_bytes, {digest: blob})``.
    """
    blobs = [bundle.manifest_bytes, bundle.module_bytes]
    layers = [_descriptor(MODULE_MEDIA_TYPE, bundle.module_bytes, "module.wasm")]
    if signature is not None:
        document = canonical_json(
            {"format": SIGNATURE_FORMAT, "key_id": signature[1], "signature": signature[0]}
        )
        blobs.append(document)
        layers.append(_descriptor(SIGNATURE_MEDIA_TYPE, document, "signature.json"))
    package = bundle.manifest.package
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": _descriptor(CONFIG_MEDIA_TYPE, bundle.manifest_bytes),
        "layers": layers,
        "annotations": {
            ANNOTATION_TITLE: package.name,
            ANNOTATION_VERSION: package.version,
            ANNOTATION_DESCRIPTION: package.description[:4096],
        },
    }
    return canonical_json(manifest), {"sha256:" + sha256_hex(blob): blob for blob in blobs}


def push_bundle(
    client: RegistryClient,
    reference: OciReference,
    bundle: Bundle,
    *,
    signature: tuple[str, str] | None = None,
) -> str:
    """Upload a bundle artifact and tag it; return the manifest digest (``sha256:…``).

    Blobs first, the manifest last, so a reader never sees a manifest whose blobs are
    missing. The manifest is put under ``reference.tag`` (or its own digest when the
    reference has none).

    Raises:
        RegistryUnavailable, RegistryRefused, DigestMismatch.
    """
    manifest, blobs = build_artifact(bundle, signature)
    for data in blobs.values():
        client.upload_blob(reference.path, data)
    target = reference.tag or "sha256:" + sha256_hex(manifest)
    return client.put_manifest(reference.path, target, manifest, OCI_MANIFEST_MEDIA_TYPE)


# --- pull ---------------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class PulledBundle:
    """A verified bundle written to ``directory``.

    Attributes:
        directory: where the bundle now is.
        reference: the digest-pinned reference it was pulled from.
        digest: the OCI manifest digest (``sha256:…``).
        manifest: the verified Stockade manifest.
        manifest_sha256, module_sha256: the bundle's file digests (hex).
        signature: ``(signature_b64, key_id)`` from the signature layer, or ``None``.
        signature_verified: whether that signature was verified against trusted keys.
        reused: the store already held exactly these bytes (nothing was rewritten).
    """

    directory: Path
    reference: OciReference
    digest: str
    manifest: PackageManifest
    manifest_sha256: str
    module_sha256: str
    signature: tuple[str, str] | None
    signature_verified: bool
    reused: bool


@dataclass(frozen=True, slots=True)
class _Fetched:
    """Every verified byte of an artifact, nothing written yet. ``sums`` holds the sha256
    hex of ``manifest.json`` and ``module.wasm`` (checked once, while fetching)."""

    files: dict[str, bytes]
    manifest: PackageManifest
    sig_doc: SignatureDocument | None
    sums: dict[str, str]


def _fetch_verified(client: RegistryClient, reference: OciReference, ceilings: Ceilings) -> _Fetched:
    """Steps (1)-(5) of the module docstring; returns every verified byte, writes nothing."""
    if reference.digest is None:
        raise ValueError("pull_bundle needs a digest-pinned reference")
    oci_bytes, _ = client.get_manifest(reference.path, reference.digest)  # (1)
    artifact = ArtifactManifest.from_json(oci_bytes)  # (2)
    config = client.get_blob(
        reference.path, artifact.config.digest, artifact.config.size, "manifest.json"
    )  # (3)
    module = client.get_blob(reference.path, artifact.module.digest, artifact.module.size, "module.wasm")
    sig_doc: SignatureDocument | None = None
    files = {"oci-manifest.json": oci_bytes, "manifest.json": config, "module.wasm": module}
    if artifact.signature is not None:
        raw = client.get_blob(
            reference.path, artifact.signature.digest, artifact.signature.size, "signature.json"
        )
        try:
            sig_doc = SignatureDocument.model_validate_json(raw, strict=True)
        except ValidationError:
            raise ArtifactInvalid("the signature layer is not a stockade.signature/1 document") from None
        files["signature.json"] = raw
    try:
        manifest = PackageManifest.from_json(config, ceilings=ceilings)  # (4)
    except ManifestInvalid as exc:
        raise ManifestInvalid(
            f"the artifact's manifest.json is invalid: {exc.message}",
            problems=exc.details.get("problems", []),
        ) from None
    sums = {  # get_blob checked these digests against the bytes
        "manifest.json": artifact.config.digest.removeprefix("sha256:"),
        "module.wasm": artifact.module.digest.removeprefix("sha256:"),
    }
    module_sha256 = sums["module.wasm"]
    if manifest.module.sha256 != module_sha256:
        raise DigestMismatch(
            f"manifest.json pins module sha256 {manifest.module.sha256}, the module layer {module_sha256}",
            file="module.wasm",
        )
    title, version = artifact.annotations.get(ANNOTATION_TITLE), artifact.annotations.get(ANNOTATION_VERSION)
    if (title, version) != (manifest.package.name, manifest.package.version):  # (5)
        raise ArtifactInvalid(
            f"the artifact's annotations name {str(title)[:64]}@{str(version)[:64]}, its manifest "
            f"{manifest.package.name}@{manifest.package.version}"
        )
    return _Fetched(files, manifest, sig_doc, sums)


def _check_signature(
    manifest: PackageManifest,
    sums: Mapping[str, str],
    sig_doc: SignatureDocument | None,
    *,
    trusted_keys: TrustedKeys | None,
    require_signatures: bool,
) -> bool:
    """Step (6); returns whether a signature was verified."""
    name, version = manifest.package.name, manifest.package.version
    if sig_doc is None:
        if require_signatures:
            raise SignatureInvalid(f"the artifact of {name}@{version} is not signed", package=name)
        return False
    if trusted_keys is None:
        if require_signatures:
            raise SignatureInvalid(
                f"{name}@{version} must be verified but no trusted keys are configured", package=name
            )
        return False
    trusted_keys.verify(
        name,
        version,
        sums["manifest.json"],
        sums["module.wasm"],
        signature=sig_doc.signature,
        key_id=sig_doc.key_id,
    )
    return True


def pull_bundle(
    client: RegistryClient,
    reference: OciReference,
    *,
    store_root: Path | None = None,
    out_dir: Path | None = None,
    trusted_keys: TrustedKeys | None,
    require_signatures: bool,
    ceilings: Ceilings = DEFAULT_CEILINGS,
    expected_sha256: tuple[str, str] | None = None,
) -> PulledBundle:
    """Pull a digest-pinned bundle artifact, verify all of it, then write it atomically.

    Args:
        client: the registry client of ``reference.registry``.
        reference: must carry a digest (tags are resolved by the caller, once).
        store_root: the content-addressed store; the bundle goes to
            ``store_root/sha256/<hex>``. Exactly one of ``store_root`` and ``out_dir``.
        out_dir: a directory that must not exist yet; the bundle is written there.
        trusted_keys: keys to verify a signature layer with (``None``: not verified).
        require_signatures: refuse an artifact without a verified signature.
        ceilings: the host ceilings the manifest must respect.
        expected_sha256: ``(manifest_sha256, module_sha256)`` a lock pins, checked before
            writing (``stockade lock fetch``).

    Raises:
        ValueError: no digest, or not exactly one destination.
        FileExistsError: ``out_dir`` exists.
        RegistryUnavailable, RegistryRefused, DigestMismatch, ArtifactInvalid,
        ManifestInvalid, SignatureInvalid: nothing was written.

    Returns:
        What was pulled and where it is.
    """
    if (store_root is None) == (out_dir is None):
        raise ValueError("pass exactly one of store_root and out_dir")
    fetched = _fetch_verified(client, reference, ceilings)
    files, manifest, sig_doc = fetched.files, fetched.manifest, fetched.sig_doc
    verified = _check_signature(
        manifest, fetched.sums, sig_doc, trusted_keys=trusted_keys, require_signatures=require_signatures
    )
    if expected_sha256 is not None:
        _check_expected(fetched.sums, expected_sha256, manifest.package.name)
    digest = str(reference.digest)
    if out_dir is not None:
        destination, reused = Path(out_dir), False
        if os.path.lexists(destination):
            raise FileExistsError(f"{destination} already exists")
        _install(destination, files)
    else:
        destination = Path(str(store_root)) / "sha256" / digest.removeprefix("sha256:")
        reused = _holds(destination, files)
        if not reused:
            _install(destination, files)
    return PulledBundle(
        directory=destination,
        reference=reference,
        digest=digest,
        manifest=manifest,
        manifest_sha256=fetched.sums["manifest.json"],
        module_sha256=fetched.sums["module.wasm"],
        signature=(sig_doc.signature, sig_doc.key_id) if sig_doc else None,
        signature_verified=verified,
        reused=reused,
    )


def _check_expected(sums: Mapping[str, str], expected: tuple[str, str], name: str) -> None:
    for file, pinned in zip(("manifest.json", "module.wasm"), expected, strict=True):
        if sums[file] != pinned:
            raise DigestMismatch(
                f"{file} of {name} from the registry has sha256 {sums[file]}, the lock pins {pinned}",
                package=name,
                file=file,
                expected=pinned,
                actual=sums[file],
            )


# --- writing ------------------------------------------------------------------------------


def _holds(directory: Path, files: Mapping[str, bytes]) -> bool:
    """Whether ``directory`` holds exactly ``files`` (a previous pull of the same digest)."""
    if not directory.is_dir() or directory.is_symlink():
        return False
    try:
        present = {p.name for p in directory.iterdir()}
        return present == set(files) and all((directory / n).read_bytes() == b for n, b in files.items())
    except OSError:
        return False


def _install(destination: Path, files: Mapping[str, bytes]) -> None:
    """Write ``files`` into a temp directory beside ``destination``, fsync, rename into place.

    An existing ``destination`` (a damaged earlier copy) is moved aside first and removed
    after the new one is in place.
    """
    parent = destination.parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=parent, prefix=f".{destination.name[:16]}.", suffix=".partial"))
    try:
        for name, data in files.items():
            with open(staging / name, "xb") as handle:
                os.fchmod(handle.fileno(), 0o644)
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(staging, 0o755)  # noqa: S103 - a bundle is public content, like the lock beside it
        fsync_dir(staging)
        replace_dir(staging, destination)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
        raise
