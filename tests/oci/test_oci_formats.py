"""Formats of distribution, without a registry: references, the lock entry's ``source``,
the artifact manifest, Docker config credentials, and how ``diff`` shows a source change."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from host.errors import ArtifactInvalid, LockInvalid, SecretsUnavailable
from host.secrets.store import SecretValue
from host.trust.bundlestore import OciSource, store_bundle_path
from host.trust.lock import PackageLock
from sdk.oci.artifact import ArtifactManifest, build_artifact
from sdk.oci.client import RegistryClient, RegistryCredential, parse_reference
from sdk.oci.creds import (
    REGISTRY_SECRET_PRINCIPAL,
    REGISTRY_SECRET_SCOPE,
    find_credential,
    registry_for_secret_name,
    secret_name_for,
)
from sdk.review.report import diff_locks
from tests.oci.conftest import Cli, echo_bundle
from tests.support.bundles import lock_digest, lock_entry, write_lock
from tests.support.secrets import make_store

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "repository", "tag", "digest"),
    [
        ("oci://registry.example:5000/team/tracker:1.2.0", "registry.example:5000/team/tracker", "1.2.0", None),
        (f"ghcr.io/acme/tools/echo@{DIGEST}", "ghcr.io/acme/tools/echo", None, DIGEST),
        (f"127.0.0.1:5000/team/echo:1.0.0@{DIGEST}", "127.0.0.1:5000/team/echo", "1.0.0", DIGEST),
        ("localhost/a/b__c-d.e:v1", "localhost/a/b__c-d.e", "v1", None),
    ],
    ids=["tag", "digest", "tag-and-digest", "localhost"],
)
def test_references_parse(text: str, repository: str, tag: str | None, digest: str | None) -> None:
    ref = parse_reference(text)
    assert (ref.repository, ref.tag, ref.digest) == (repository, tag, digest)


@pytest.mark.parametrize(
    "text",
    [
        "team/tracker:1.0.0",  # no registry: other tools would silently mean Docker Hub
        "registry.example/Team/tracker:1",  # upper case
        "registry.example/team/tracker",  # neither tag nor digest
        "registry.example/team/tracker@sha512:" + "a" * 128,  # another algorithm
        "registry.example/team/tracker@sha256:" + "A" * 64,  # not canonical hex
        "registry.example:99999/team/tracker:1",  # port out of range
        "registry.example/team/../tracker:1",
        "https://registry.example/team/tracker:1",
        "registry.example/team/tracker:-bad",
    ],
    ids=["no-registry", "upper", "no-tag-or-digest", "sha512", "upper-hex", "port", "dotdot", "scheme", "tag"],
)
def test_bad_references_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_reference(text)


def _entry(root: Path, *, repository: str | None = None, digest: str = DIGEST) -> dict[str, Any]:
    bundle = echo_bundle(root / store_bundle_path(digest))
    entry = lock_entry(root, bundle.directory)
    if repository is not None:
        entry["source"] = {"format": "stockade.source.oci/1", "repository": repository, "digest": digest,
                           "tag": None}
    return entry


def test_lock_without_source_keeps_its_digest(tmp_path: Path) -> None:
    lock = write_lock(tmp_path / "stockade.lock", [_entry(tmp_path)])
    parsed = PackageLock.from_json(lock.read_bytes())
    assert "source" not in parsed.model_dump(mode="json")["packages"][0]
    assert parsed.digest() == lock_digest(lock)  # what locks written before `source` chain to


def test_lock_source_round_trips_into_the_digest(tmp_path: Path) -> None:
    lock = write_lock(tmp_path / "stockade.lock", [_entry(tmp_path, repository="ghcr.io/acme/echo")])
    parsed = PackageLock.from_json(lock.read_bytes())
    assert parsed.packages[0].source == OciSource(
        format="stockade.source.oci/1", repository="ghcr.io/acme/echo", digest=DIGEST
    )
    assert parsed.digest() == lock_digest(lock)


def test_source_entry_whose_bundle_is_not_its_store_directory_refused(tmp_path: Path) -> None:
    entry = _entry(tmp_path, repository="ghcr.io/acme/echo")
    entry["bundle"] = "bundles/echo"  # claims a registry origin for a hand-placed directory
    with pytest.raises(LockInvalid, match="store directory of its digest"):
        PackageLock.from_json(json.dumps({"format": "stockade.lock/1", "generation": 1, "previous": None,
                                          "packages": [entry]}).encode())


@pytest.mark.parametrize(
    "source",
    [
        {"format": "stockade.source.oci/2", "repository": "ghcr.io/a/b", "digest": DIGEST, "tag": None},
        {"format": "stockade.source.oci/1", "repository": "ghcr.io/a/b", "digest": DIGEST, "url": "x"},
        {"format": "stockade.source.oci/1", "repository": "a/b", "digest": DIGEST, "tag": None},
    ],
    ids=["future-format", "unknown-field", "no-registry"],
)
def test_unknown_source_forms_refused(tmp_path: Path, source: dict[str, Any]) -> None:
    entry = _entry(tmp_path, repository="ghcr.io/a/b")
    entry["source"] = source
    with pytest.raises(LockInvalid):
        PackageLock.from_json(json.dumps({"format": "stockade.lock/1", "generation": 1, "previous": None,
                                          "packages": [entry]}).encode())


def _artifact(tmp_path: Path) -> dict[str, Any]:
    manifest, _ = build_artifact(echo_bundle(tmp_path / "b"), ("A" * 86 + "==", "0123456789abcdef"))
    return json.loads(manifest)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda m: m["layers"][0].update(urls=["https://elsewhere.example/blob"]),  # foreign-layer fetch
        lambda m: m.update(subject={"mediaType": "x", "digest": DIGEST, "size": 1}),
        lambda m: m["layers"].reverse(),
        lambda m: m["layers"].append(m["layers"][0]),
        lambda m: m["config"].update(mediaType="application/vnd.oci.image.config.v1+json"),
        lambda m: m["layers"][0].update(size=2**40),
        lambda m: m.update(artifactType="application/vnd.wasm.config.v0+json"),
    ],
    ids=["urls", "subject", "order", "extra-layer", "config-type", "huge-layer", "artifact-type"],
)
def test_artifact_layout_is_exact(tmp_path: Path, mutate: Any) -> None:
    document = _artifact(tmp_path)
    ArtifactManifest.from_json(json.dumps(document).encode())  # the genuine one parses
    mutate(document)
    with pytest.raises(ArtifactInvalid):
        ArtifactManifest.from_json(json.dumps(document).encode())


def test_docker_config_credentials_and_masking(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    auth = base64.b64encode(b"bot:s3cret-value").decode()
    config.write_text(json.dumps({"auths": {"https://ghcr.io": {"auth": auth}}}))
    credential, origin = find_credential("ghcr.io", secrets=None, docker_config=config)
    assert credential is not None and credential.username == "bot"
    assert credential.password == SecretValue("s3cret-value")
    assert "s3cret" not in repr(credential) and origin == f"docker config {config}"
    assert find_credential("other.example", secrets=None, docker_config=config) == (None, "none")


def test_malformed_docker_config_fails_closed(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {"ghcr.io": {"auth": "bm90LWEtcGFpcg=="}}}))  # "not-a-pair"
    with pytest.raises(SecretsUnavailable, match="USERNAME:PASSWORD"):
        find_credential("ghcr.io", secrets=None, docker_config=config)
    config.write_text("{not json")
    with pytest.raises(SecretsUnavailable):
        find_credential("ghcr.io", secrets=None, docker_config=config)


def test_secret_names_for_registries() -> None:
    assert secret_name_for("127.0.0.1:5000") == "registry_127_0_0_1__5000"
    assert secret_name_for("ghcr.io") == "registry_ghcr_io"
    assert secret_name_for("my-registry.example:443") == "registry_my___registry_example__443"
    assert registry_for_secret_name("registry_127_0_0_1__5000") == "127.0.0.1:5000"
    credential = RegistryCredential("u", SecretValue("p" * 12), registry="ghcr.io")
    assert repr(credential).count("p" * 12) == 0


_LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?", fullmatch=True)
_AUTHORITY = st.builds(
    lambda labels, port: ".".join(labels) + (f":{port}" if port else ""),
    st.lists(_LABEL, min_size=1, max_size=4),
    st.one_of(st.none(), st.integers(1, 65535)),
).filter(lambda authority: "." in authority or ":" in authority)  # a bare label names no registry


@settings(max_examples=400, deadline=None)
@given(a=_AUTHORITY, b=_AUTHORITY)
def test_registry_secret_names_are_injective(a: str, b: str) -> None:
    """Two authorities never share a secrets-store name, and a name reads back exactly."""
    names = []
    for registry in (a, b):
        try:
            names.append(secret_name_for(registry))
        except ValueError as exc:
            assert "over the 64 allowed" in str(exc)  # only names past the store's limit are refused
            return
        assert registry_for_secret_name(names[-1]) == registry
    assert (names[0] == names[1]) == (a == b)


@pytest.mark.parametrize(
    ("stored_for", "asked_for"),
    [
        ("registry.example.com:5000", "registry-example.com:5000"),
        ("registry.example.com:5000", "registry.example.com.5000"),
        ("registry-example.com", "registry.example.com"),
        ("a.example:5000", "a.example:50000"),
        ("ghcr.io", "ghcr.io:443"),
        ("r" * 50 + ".example", "r" * 50 + "-example"),
    ],
    ids=["dot-as-hyphen", "port-as-label", "hyphen-as-dot", "longer-port", "default-port", "long-name"],
)
def test_registry_credential_not_found_for_look_alike_registry(
    tmp_path: Path, stored_for: str, asked_for: str
) -> None:
    """The old lossy name sent registry.example.com's password to registry-example.com."""
    store = make_store(tmp_path)
    config = tmp_path / "config.json"
    auth = base64.b64encode(b"bot:s3cret-value").decode()
    config.write_text(json.dumps({"auths": {stored_for: {"auth": auth}}}))
    try:
        store.set(REGISTRY_SECRET_SCOPE, REGISTRY_SECRET_PRINCIPAL, secret_name_for(stored_for), "bot:s3cret-value")
    except ValueError:
        pass  # too long for the store: only the Docker config holds it
    assert find_credential(asked_for, secrets=store, docker_config=config) == (None, "none")
    found, _ = find_credential(stored_for, secrets=store, docker_config=config)
    assert found is not None and found.registry == stored_for


@pytest.mark.parametrize(
    "name",
    ["registry_a____b", "registry_a__", "registry__a", "registry_a_", "registry_a__b", "registry_a__99999", "other"],
    ids=["four-underscores", "empty-port", "leading", "trailing", "port-not-digits", "port-range", "prefix"],
)
def test_names_no_registry_spells_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        registry_for_secret_name(name)


def test_registry_name_too_long_for_the_store_refused() -> None:
    with pytest.raises(ValueError, match="over the 64 allowed; keep its credential in the Docker config"):
        secret_name_for("r" * 50 + ".example")


def test_client_refuses_a_credential_of_another_registry() -> None:
    credential = RegistryCredential("bot", SecretValue("s3cret-value"), registry="registry.example.com:5000")
    with pytest.raises(RuntimeError, match="handed to the client"):
        RegistryClient("registry-example.com:5000", insecure=True, credential=credential)


def _two_locks(tmp_path: Path, old_repo: str | None, new_repo: str | None) -> tuple[Path, Path]:
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old = write_lock(old_dir / "stockade.lock", [_entry(old_dir, repository=old_repo)])
    new = write_lock(new_dir / "stockade.lock", [_entry(new_dir, repository=new_repo)],
                     generation=2, previous=lock_digest(old))
    return old, new


@pytest.mark.parametrize(
    ("old_repo", "new_repo", "kind"),
    [
        ("ghcr.io/acme/echo", "ghcr.io/mallory/echo", "source.changed"),
        (None, "ghcr.io/acme/echo", "source.added"),
        ("ghcr.io/acme/echo", None, "source.removed"),
    ],
    ids=["other-repository", "now-from-registry", "no-longer-from-registry"],
)
def test_diff_flags_a_changed_source(
    tmp_path: Path, cli: Cli, old_repo: str | None, new_repo: str | None, kind: str
) -> None:
    old, new = _two_locks(tmp_path, old_repo, new_repo)
    diff = diff_locks(old, new)
    assert [c.kind for c in diff.escalations] == [kind]
    proc = cli("diff", str(old), str(new))
    assert proc.returncode == 3, proc.stderr
    assert kind in proc.stdout and "ESCALATES" in proc.stdout


def test_inspect_shows_the_source(tmp_path: Path, cli: Cli) -> None:
    lock = write_lock(tmp_path / "stockade.lock", [_entry(tmp_path, repository="ghcr.io/acme/echo")])
    proc = cli("inspect", str(lock), "--no-imports")
    assert proc.returncode == 0, proc.stderr
    assert ["source", f"oci://ghcr.io/acme/echo@{DIGEST}"] in [line.split() for line in proc.stdout.splitlines()]


def test_store_path_is_content_addressed() -> None:
    assert store_bundle_path(DIGEST) == "bundle-store/sha256/" + "ab" * 32
    with pytest.raises(ValueError):
        store_bundle_path("sha256:../../etc")


@pytest.mark.parametrize("command", [("push",), ("pull",), ("lock", "add"), ("lock", "fetch")], ids=" ".join)
def test_distribution_commands_have_help(cli: Cli, command: tuple[str, ...]) -> None:
    proc = cli(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "usage: stockade " + " ".join(command) in proc.stdout
    assert "--insecure-registry" in proc.stdout


def test_push_refuses_a_digest_reference(cli: Cli, tmp_path: Path) -> None:
    bundle = echo_bundle(tmp_path / "b")
    proc = cli("push", str(bundle.directory), f"registry.example/team/echo@{DIGEST}")
    assert proc.returncode == 2
    assert "error: REFERENCE_INVALID:" in proc.stderr
