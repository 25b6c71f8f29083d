"""Attacks on distribution, against a real registry (and a fault proxy in front of it).

Each refusal has a stable code, and after each one nothing is in the bundle store (not
even a hidden staging directory) and no lock was written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk.bundle import Bundle, generate_keypair, public_key_of, sign_package, write_keys_file
from sdk.oci.artifact import build_artifact, push_bundle
from sdk.oci.client import OCI_MANIFEST_MEDIA_TYPE, RegistryClient, parse_reference
from tests.oci.conftest import Cli, custom_section, echo_bundle, store_entries
from tests.support.registry import FaultProxy, RegistryServer
from tests.support.wat import echo_component


@pytest.fixture
def proxy(registry: RegistryServer) -> Iterator[FaultProxy]:
    with FaultProxy(registry.address) as p:
        yield p


def _push(client: RegistryClient, repo: str, bundle: Bundle, tag: str = "1.0.0",
          signature: tuple[str, str] | None = None) -> str:
    return push_bundle(client, parse_reference(f"{repo}:{tag}"), bundle, signature=signature)


def _via(proxy: FaultProxy, repo: str) -> str:
    """The same repository, addressed through the proxy."""
    return f"{proxy.address}/{repo.split('/', 1)[1]}"


def _refused(proc: object, code: str, cli: Cli) -> None:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)  # type: ignore[attr-defined]
    assert f"error: {code}:" in proc.stderr, proc.stderr  # type: ignore[attr-defined]
    assert store_entries(cli.cwd / "bundle-store") in ([], ["sha256"]), store_entries(cli.cwd / "bundle-store")
    assert not (cli.cwd / "stockade.lock").exists()


def test_pull_by_tag_without_resolve_tag_refused(proxy: FaultProxy, repo: str, cli: Cli) -> None:
    proc = cli("pull", f"{_via(proxy, repo)}:1.0.0", "--insecure-registry", proxy.address)
    _refused(proc, "TAG_NOT_PINNED", cli)
    assert "--resolve-tag" in proc.stderr
    assert proxy.hits == []  # refused before any request


def test_lock_add_by_tag_refused(proxy: FaultProxy, repo: str, cli: Cli) -> None:
    proc = cli("lock", "add", f"oci://{_via(proxy, repo)}:1.0.0", "--insecure-registry", proxy.address)
    _refused(proc, "TAG_NOT_PINNED", cli)
    assert proxy.hits == []


def test_tag_moved_between_resolve_and_pull_pinned_digest_wins(
    proxy: FaultProxy, client: RegistryClient, repo: str, cli: Cli, tmp_path: Path
) -> None:
    original = echo_bundle(tmp_path / "a")
    first = _push(client, repo, original)
    other = echo_bundle(tmp_path / "b", module=custom_section(echo_component(), b"moved-tag"))
    moved: list[str] = []
    # The registry answers the tag with the original; before the client reads that
    # answer, the tag is moved to another artifact.
    proxy.after("/manifests/1.0.0", lambda: moved.append(_push(client, repo, other)))

    proc = cli("pull", f"{_via(proxy, repo)}:1.0.0", "--resolve-tag",
               "--insecure-registry", proxy.address, "--json")
    assert proc.returncode == 0, proc.stderr
    pulled = json.loads(proc.stdout)
    assert moved and moved[0] != first
    assert client.get_manifest(repo.split("/", 1)[1], "1.0.0")[1] == moved[0]  # the tag did move
    assert pulled["digest"] == first and pulled["module_sha256"] == original.module_sha256
    assert f"resolved tag 1.0.0 of {_via(proxy, repo)} to {first}" in proc.stderr.replace("\n", " ")
    manifest_hits = [h for h in proxy.hits if "/manifests/" in h]
    assert manifest_hits == [f"GET /v2/{repo.split('/', 1)[1]}/manifests/1.0.0",
                             f"GET /v2/{repo.split('/', 1)[1]}/manifests/{first}"]


def test_registry_substituting_manifest_for_pinned_digest_refused(
    proxy: FaultProxy, client: RegistryClient, repo: str, cli: Cli, tmp_path: Path
) -> None:
    pinned = _push(client, repo, echo_bundle(tmp_path / "a"))
    evil, _ = build_artifact(echo_bundle(tmp_path / "b", module=custom_section(echo_component(), b"swap")), None)
    proxy.serve(f"/manifests/{pinned}", evil)
    proc = cli("pull", f"{_via(proxy, repo)}@{pinned}", "--insecure-registry", proxy.address)
    _refused(proc, "DIGEST_MISMATCH", cli)


def test_corrupt_layer_bytes_refused_and_nothing_written(
    registry: RegistryServer, client: RegistryClient, repo: str, cli: Cli, tmp_path: Path
) -> None:
    module = custom_section(echo_component(), b"corrupt-me")  # a blob no other test shares
    bundle = echo_bundle(tmp_path / "a", module=module)
    pinned = _push(client, repo, bundle)
    blob = registry.blob_file("sha256:" + bundle.module_sha256)
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF  # same length, other bytes: the registry serves them as they are
    blob.write_bytes(bytes(data))
    proc = cli("pull", f"{repo}@{pinned}", "--insecure-registry", registry.address)
    _refused(proc, "DIGEST_MISMATCH", cli)
    assert "module.wasm" in proc.stderr
    proc = cli("lock", "add", f"oci://{repo}@{pinned}", "--insecure-registry", registry.address)
    _refused(proc, "DIGEST_MISMATCH", cli)


def test_signed_artifact_repushed_with_other_module_fails_verification(
    registry: RegistryServer, client: RegistryClient, repo: str, cli: Cli, tmp_path: Path
) -> None:
    pem, _ = generate_keypair()
    keys = tmp_path / "trusted-keys.json"
    write_keys_file(keys, [public_key_of(pem)])
    genuine = echo_bundle(tmp_path / "a")
    name, version = genuine.manifest.package.name, genuine.manifest.package.version
    signature = sign_package(pem, name, version, genuine.manifest_sha256, genuine.module_sha256)
    good = _push(client, repo, genuine, signature=signature)
    # The attacker keeps the genuine signature layer and swaps the module (its manifest
    # updated to match, so every digest inside the artifact is consistent) under the tag.
    swapped = echo_bundle(tmp_path / "b", module=custom_section(echo_component(), b"attacker"))
    evil = _push(client, repo, swapped, signature=signature)
    assert evil != good

    verify = ("--trusted-keys", str(keys), "--insecure-registry", registry.address)
    proc = cli("pull", f"{repo}@{evil}", *verify)
    _refused(proc, "SIGNATURE_INVALID", cli)
    proc = cli("lock", "add", f"oci://{repo}@{evil}", *verify)
    _refused(proc, "SIGNATURE_INVALID", cli)

    ok = cli("pull", f"{repo}@{good}", *verify)
    assert ok.returncode == 0, ok.stderr
    assert f"signature  verified, key {signature[1]}" in ok.stdout


def test_unsigned_artifact_refused_when_signatures_required(
    registry: RegistryServer, client: RegistryClient, repo: str, cli: Cli, tmp_path: Path
) -> None:
    pinned = _push(client, repo, echo_bundle(tmp_path / "a"))
    keys = tmp_path / "keys.json"
    write_keys_file(keys, [generate_keypair()[1]])
    proc = cli("pull", f"{repo}@{pinned}", "--require-signatures", "--trusted-keys", str(keys),
               "--insecure-registry", registry.address)
    _refused(proc, "SIGNATURE_INVALID", cli)


@pytest.mark.parametrize("target", ["manifest", "module-blob"])
@pytest.mark.parametrize("fault", ["500", "hang"])
def test_registry_failing_mid_pull_gives_stable_code_and_no_partial_bundle(
    fault: str, target: str, proxy: FaultProxy, client: RegistryClient, repo: str, cli: Cli, tmp_path: Path
) -> None:
    bundle = echo_bundle(tmp_path / "a")
    pinned = _push(client, repo, bundle)
    where = f"/manifests/{pinned}" if target == "manifest" else f"/blobs/sha256:{bundle.module_sha256}"
    if fault == "500":
        proxy.fail(where, status=500)
    else:
        proxy.hang(where)
    proc = cli("pull", f"{_via(proxy, repo)}@{pinned}", "--insecure-registry", proxy.address,
               "--registry-timeout", "1")
    _refused(proc, "REGISTRY_UNAVAILABLE", cli)
    assert ("answered 500" if fault == "500" else "did not answer in time") in proc.stderr


def test_foreign_artifact_refused(registry: RegistryServer, client: RegistryClient, repo: str, cli: Cli) -> None:
    path = repo.split("/", 1)[1]
    layer = client.upload_blob(path, b"not a wasm component, a tarball")
    config = client.upload_blob(path, b"{}")
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "artifactType": "application/vnd.stockade.bundle.v1",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 2},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": 31}],
        "annotations": {},
    }).encode()
    pinned = client.put_manifest(path, "foreign", manifest, OCI_MANIFEST_MEDIA_TYPE)
    proc = cli("pull", f"{repo}@{pinned}", "--insecure-registry", registry.address)
    _refused(proc, "ARTIFACT_INVALID", cli)


def test_annotations_naming_another_package_refused(
    registry: RegistryServer, client: RegistryClient, repo: str, cli: Cli, tmp_path: Path
) -> None:
    bundle = echo_bundle(tmp_path / "a")
    manifest, blobs = build_artifact(bundle, None)
    path = repo.split("/", 1)[1]
    for data in blobs.values():
        client.upload_blob(path, data)
    document = json.loads(manifest)
    document["annotations"]["org.opencontainers.image.title"] = "tracker"  # passes off as another package
    pinned = client.put_manifest(path, "lying", json.dumps(document).encode(), OCI_MANIFEST_MEDIA_TYPE)
    proc = cli("pull", f"{repo}@{pinned}", "--insecure-registry", registry.address)
    _refused(proc, "ARTIFACT_INVALID", cli)


def test_lock_source_swapped_to_other_artifact_refused_by_fetch(
    registry: RegistryServer, client: RegistryClient, repo: str, cli: Cli, tmp_path: Path
) -> None:
    insecure = ("--insecure-registry", registry.address)
    genuine = _push(client, repo, echo_bundle(tmp_path / "a"))
    assert cli("lock", "add", f"oci://{repo}@{genuine}", *insecure).returncode == 0
    other = _push(client, repo, echo_bundle(tmp_path / "b", module=custom_section(echo_component(), b"swapped")),
                  tag="other")
    # An edit of the lock points the source (and its store path) at another artifact but
    # keeps the reviewed file digests: fetch must refuse it before writing anything.
    lock = cli.cwd / "stockade.lock"
    document = json.loads(lock.read_text())
    entry = document["packages"][0]
    entry["source"]["digest"] = other
    entry["bundle"] = "bundle-store/sha256/" + other.removeprefix("sha256:")
    lock.write_text(json.dumps(document))
    proc = cli("lock", "fetch", *insecure)
    assert proc.returncode == 1
    assert "error: DIGEST_MISMATCH:" in proc.stderr and "the lock pins" in proc.stderr
    assert not (cli.cwd / entry["bundle"]).exists()
