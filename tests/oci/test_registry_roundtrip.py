"""Push → pull → lock add → Host.open → call, against a real registry (plain HTTP and TLS)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest

from host import CallRequest, FilePolicyEngine, Host, HostConfig
from host.errors import BundleMissing
from sdk.bundle import generate_keypair, write_private_key
from sdk.oci.artifact import (
    ARTIFACT_TYPE,
    CONFIG_MEDIA_TYPE,
    MODULE_MEDIA_TYPE,
    SIGNATURE_MEDIA_TYPE,
)
from tests.oci.conftest import Cli, echo_bundle, store_entries
from tests.support.hosts import ALICE, write_policy
from tests.support.registry import RegistryServer


def _push(cli: Cli, bundle: Path, ref: str, *extra: str) -> str:
    proc = cli("push", str(bundle), ref, *extra)
    assert proc.returncode == 0, proc.stderr
    pinned = proc.stdout.strip().splitlines()[-1]
    assert pinned.startswith(ref.rsplit(":", 1)[0] + "@sha256:"), proc.stdout
    return pinned


def _open(root: Path, lock: Path, **config: object) -> Host:
    path = root / "policy.json"
    policy = FilePolicyEngine(path) if path.exists() else write_policy(path, allow=["tool.call:echo.say", "echo.use"])
    return Host.open(
        lock, config=HostConfig(state_dir=root / "state-host", **config), secrets=None,  # type: ignore[arg-type]
        policy=policy, audit=root / "audit.log",
    )


def _say(host: Host) -> object:
    result = host.call(CallRequest(principal=ALICE, session="s1", tool="echo.say", version="1.0.0",
                                   input={"message": "from the registry"}))
    assert result.ok, result.error
    return result.output


def test_push_pull_lock_open_call_round_trip(registry: RegistryServer, repo: str, cli: Cli, tmp_path: Path) -> None:
    insecure = ("--insecure-registry", registry.address)
    bundle = echo_bundle(tmp_path / "dist" / "echo")
    pinned = _push(cli, bundle.directory, f"{repo}:1.0.0", *insecure)

    pulled = cli("pull", pinned, *insecure, "--json")
    assert pulled.returncode == 0, pulled.stderr
    assert "WARNING: plain HTTP to registry" in pulled.stderr
    report = json.loads(pulled.stdout)
    digest = pinned.split("@", 1)[1]
    store = cli.cwd / "bundle-store" / "sha256" / digest.removeprefix("sha256:")
    assert Path(report["directory"]) == store
    assert (store / "module.wasm").read_bytes() == bundle.module_bytes
    assert (store / "manifest.json").read_bytes() == bundle.manifest_bytes

    added = cli("lock", "add", f"oci://{pinned}", *insecure)
    assert added.returncode == 0, added.stderr
    assert f"source    oci://{repo}@{digest}" in added.stdout
    entry = json.loads((cli.cwd / "stockade.lock").read_text())["packages"][0]
    assert entry["source"] == {"format": "stockade.source.oci/1", "repository": repo, "digest": digest, "tag": None}
    assert entry["bundle"] == f"bundle-store/sha256/{digest.removeprefix('sha256:')}"

    with _open(tmp_path, cli.cwd / "stockade.lock") as host:
        assert _say(host) == {"message": "from the registry"}

    inspected = cli("inspect", "stockade.lock", "--json", "--no-imports")
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["packages"][0]["source"] == f"oci://{repo}@{digest}"


def test_pushed_artifact_has_stockade_media_types_and_annotations(
    registry: RegistryServer, repo: str, cli: Cli, tmp_path: Path
) -> None:
    bundle = echo_bundle(tmp_path / "b", description="Echo, published.")
    key = tmp_path / "signing.pem"
    pem, _ = generate_keypair()
    write_private_key(key, pem)
    pinned = _push(cli, bundle.directory, f"{repo}:1.0.0", "--insecure-registry", registry.address, "--key", str(key))
    path, digest = pinned.split("/", 1)[1].split("@")
    raw = httpx2.get(f"http://{registry.address}/v2/{path}/manifests/{digest}",
                    headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}).content
    manifest = json.loads(raw)
    assert manifest["artifactType"] == ARTIFACT_TYPE
    assert manifest["config"]["mediaType"] == CONFIG_MEDIA_TYPE
    assert [layer["mediaType"] for layer in manifest["layers"]] == [MODULE_MEDIA_TYPE, SIGNATURE_MEDIA_TYPE]
    assert manifest["annotations"] == {
        "org.opencontainers.image.title": "echo",
        "org.opencontainers.image.version": "1.0.0",
        "org.opencontainers.image.description": "Echo, published.",
    }
    # Pushing the same bundle and signature again gives the same digest (canonical JSON).
    again = _push(cli, bundle.directory, f"{repo}:again", "--insecure-registry", registry.address, "--key", str(key))
    assert again.split("@")[1] == digest


def test_tls_registry_round_trip_with_test_ca(
    tls_registry: RegistryServer, cli: Cli, tmp_path: Path
) -> None:
    ca = ("--registry-ca", str(tls_registry.ca_file))
    ref = f"{tls_registry.address}/team/echo-tls:1.0.0"
    bundle = echo_bundle(tmp_path / "b")
    pinned = _push(cli, bundle.directory, ref, *ca)
    added = cli("lock", "add", f"oci://{pinned}", *ca)
    assert added.returncode == 0, added.stderr
    assert "WARNING" not in added.stderr  # HTTPS: nothing to warn about
    with _open(tmp_path, cli.cwd / "stockade.lock") as host:
        assert _say(host) == {"message": "from the registry"}


def test_registry_certificate_from_unknown_ca_refused(tls_registry: RegistryServer, cli: Cli) -> None:
    ref = f"{tls_registry.address}/team/echo-tls@sha256:{'0' * 64}"
    proc = cli("pull", ref)
    assert proc.returncode == 1
    assert "error: REGISTRY_UNAVAILABLE" in proc.stderr and "TLS" in proc.stderr
    assert store_entries(cli.cwd / "bundle-store") == []


def test_plain_http_registry_needs_insecure_registry_flag(
    registry: RegistryServer, repo: str, cli: Cli, tmp_path: Path
) -> None:
    bundle = echo_bundle(tmp_path / "b")
    proc = cli("push", str(bundle.directory), f"{repo}:1.0.0")
    assert proc.returncode == 1
    assert "error: REGISTRY_UNAVAILABLE" in proc.stderr
    assert "--insecure-registry" in proc.stderr


def test_host_open_refuses_lock_whose_registry_bundle_is_not_local(
    registry: RegistryServer, repo: str, cli: Cli, tmp_path: Path
) -> None:
    insecure = ("--insecure-registry", registry.address)
    pinned = _push(cli, echo_bundle(tmp_path / "b").directory, f"{repo}:1.0.0", *insecure)
    assert cli("lock", "add", f"oci://{pinned}", *insecure).returncode == 0
    # The lock travels without the store (a fresh checkout): the host must not fetch.
    lock = tmp_path / "checkout" / "stockade.lock"
    lock.parent.mkdir()
    lock.write_bytes((cli.cwd / "stockade.lock").read_bytes())
    with pytest.raises(BundleMissing, match="not in the local bundle store") as caught:
        _open(tmp_path, lock)
    assert caught.value.code == "BUNDLE_MISSING"
    assert "stockade lock fetch" in caught.value.hint

    fetched = Cli(lock.parent, cli.env)("lock", "fetch", *insecure)
    assert fetched.returncode == 0, fetched.stderr
    assert "fetched  echo@1.0.0" in fetched.stdout
    with _open(tmp_path, lock) as host:
        assert _say(host) == {"message": "from the registry"}


def test_pull_into_out_dir_never_replaces_an_existing_directory(
    registry: RegistryServer, repo: str, cli: Cli, tmp_path: Path
) -> None:
    insecure = ("--insecure-registry", registry.address)
    bundle = echo_bundle(tmp_path / "b")
    pinned = _push(cli, bundle.directory, f"{repo}:1.0.0", *insecure)
    out = cli.cwd / "vendor" / "echo"
    proc = cli("pull", pinned, "--out", str(out), *insecure)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "module.wasm", "oci-manifest.json"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["echo"]  # no staging directory left
    (out / "module.wasm").write_bytes(b"local edits")
    again = cli("pull", pinned, "--out", str(out), *insecure)
    assert again.returncode == 1 and "error: OUT_EXISTS:" in again.stderr
    assert (out / "module.wasm").read_bytes() == b"local edits"


def test_damaged_store_copy_is_replaced_whole_on_pull(
    registry: RegistryServer, repo: str, cli: Cli, tmp_path: Path
) -> None:
    insecure = ("--insecure-registry", registry.address)
    bundle = echo_bundle(tmp_path / "b")
    pinned = _push(cli, bundle.directory, f"{repo}:1.0.0", *insecure)
    assert cli("pull", pinned, *insecure).returncode == 0
    store = cli.cwd / "bundle-store" / "sha256" / pinned.split(":")[-1]
    (store / "module.wasm").write_bytes(b"tampered")
    proc = cli("pull", pinned, *insecure)
    assert proc.returncode == 0, proc.stderr
    assert "already present" not in proc.stdout
    assert (store / "module.wasm").read_bytes() == bundle.module_bytes
    assert sorted(p.name for p in store.parent.iterdir()) == [store.name]
