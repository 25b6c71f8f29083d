"""Setting up the demo's workspace: builds, bundles, a signed lock, secrets and policy.

Everything is written under one workspace directory (a temporary one by default)::

    <workspace>/bundles/<name>-<version>/   manifest.json + module.wasm, as built
    <workspace>/stockade.lock               generation 1 (generation 2 for the diff step)
    <workspace>/trusted-keys.json           the demo signing key's public half
    <workspace>/state/                      host state: policy, secrets, master key, audit log

Slow work is cached across runs in :func:`cache_root` (``demo/`` under the per-user cache
root, :func:`sdk._cachedir.cache_root`: ``$STOCKADE_CACHE_DIR``, else
``$XDG_CACHE_HOME/stockade``, else ``~/.cache/stockade``): componentize builds
in ``builds/`` (the build's own cache) and compiled wasmtime artifacts in ``artifacts/``
with their HMAC key ``artifact.key``. The host's ``state/artifacts`` is a symbolic link to
that directory and its key file a copy, so a second run deserializes instead of compiling;
the host still verifies each artifact's HMAC before loading it.
"""

from __future__ import annotations

import contextlib
import copy
import json
import secrets as _random
import shutil
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from host.canonical import canonical_json, digest_json, sha256_hex
from host.files import create_exclusive
from host.formats.manifest import PackageManifest
from host.policy.engine import FilePolicyEngine
from host.secrets.store import MasterKey, SecretsStore, generate_key_file
from host.trust.lock import LOCK_FORMAT
from sdk._cachedir import cache_root as user_cache_root
from sdk.author.build import BuildResult, build_project
from sdk.bundle import generate_keypair, read_bundle, sign_package, write_keys_file

__all__ = [
    "DEMO_DIR",
    "REPO_ROOT",
    "Workspace",
    "cache_root",
    "escalated_manifest",
    "write_lock",
]

DEMO_DIR: Final = Path(__file__).resolve().parent
REPO_ROOT: Final = DEMO_DIR.parents[1]
_ARTIFACT_KEY_BYTES: Final = 32


def cache_root() -> Path:
    """The persistent demo cache: ``demo/`` under the per-user cache root, which
    ``$STOCKADE_CACHE_DIR`` moves with every other per-user cache."""
    return user_cache_root() / "demo"


@dataclass(frozen=True)
class Workspace:
    """The paths of one demo run."""

    root: Path
    cache: Path

    @property
    def bundles(self) -> Path:
        """Where the built bundles are written."""
        return self.root / "bundles"

    @property
    def lock(self) -> Path:
        """The generation-1 lock."""
        return self.root / "stockade.lock"

    @property
    def lock_v2(self) -> Path:
        """The generation-2 lock of the diff step."""
        return self.root / "stockade.lock.next"

    @property
    def keys(self) -> Path:
        """The trusted keys file."""
        return self.root / "trusted-keys.json"

    @property
    def state(self) -> Path:
        """The host state directory."""
        return self.root / "state"

    @property
    def audit(self) -> Path:
        """The audit log."""
        return self.state / "audit.log"

    @property
    def policy(self) -> Path:
        """The policy file."""
        return self.state / "policy.json"

    @property
    def secrets(self) -> Path:
        """The encrypted secrets store."""
        return self.state / "secrets.json"

    @property
    def master_key(self) -> Path:
        """The master key file (mode 0600)."""
        return self.state / "master.key"

    @property
    def tls(self) -> Path:
        """The demo CA and server certificate."""
        return self.root / "tls"

    @property
    def project(self) -> Path:
        """The project directory granted to the agent as its workspace (``fs.*`` tools)."""
        return self.root / "project"

    def create(self) -> None:
        """Make the directories and link the persistent artifact cache into the state dir."""
        self.bundles.mkdir(parents=True, exist_ok=True)
        self.project.mkdir(parents=True, exist_ok=True)
        service = '[service]\nname = "tracker-sync"\ndebug = true\nworkers = 4\n'
        (self.project / "service.toml").write_text(service)
        self.state.mkdir(parents=True, exist_ok=True, mode=0o700)
        artifacts = self.cache / "artifacts"
        artifacts.mkdir(parents=True, exist_ok=True, mode=0o700)
        link = self.state / "artifacts"
        if not link.exists():
            link.symlink_to(artifacts, target_is_directory=True)
        shutil.copyfile(_artifact_key(self.cache), self.state / "artifact.key")
        (self.state / "artifact.key").chmod(0o600)

    # -- building ------------------------------------------------------------------------------

    def build(
        self, projects: Sequence[Path], progress: Callable[[int, str, float], None]
    ) -> list[BuildResult | BaseException]:
        """Build every project (in parallel) into :attr:`bundles`.

        Args:
            projects: plugin project directories.
            progress: ``progress(index, stage, fraction)``.

        Returns:
            Per project, its BuildResult or the exception that stopped it.
        """

        def one(index: int) -> BuildResult:
            return build_project(
                projects[index],
                out_dir=self.bundles,
                cache_dir=self.cache / "builds",
                progress=lambda stage, fraction: progress(index, stage, fraction),
            )

        with ThreadPoolExecutor(max_workers=max(1, len(projects))) as pool:
            futures = [pool.submit(one, i) for i in range(len(projects))]
            results: list[BuildResult | BaseException] = []
            for future in futures:
                error = future.exception()
                results.append(error if error is not None else future.result())
        return results

    # -- trust: signing key, lock, secrets, policy --------------------------------------------------

    def sign_and_lock(self, bundles: Iterable[Path]) -> bytes:
        """Sign every bundle with a fresh demo key and write generation 1 of the lock.

        Returns:
            The demo signing key (PEM), to sign generation 2 with.
        """
        private_pem, public_raw = generate_keypair()
        write_keys_file(self.keys, [public_raw])
        write_lock(self.lock, list(bundles), private_pem, generation=1, previous=None)
        return private_pem

    def store_secret(self, project: str, subject: str, name: str, value: str) -> None:
        """Create the master key file (0600) and store one secret encrypted under it."""
        key = generate_key_file(self.master_key)
        SecretsStore(self.secrets, key).set(project, subject, name, value)

    def open_secrets(self) -> SecretsStore:
        """The secrets store, with the master key loaded from its file."""
        return SecretsStore(self.secrets, MasterKey.load(env={}, key_file=self.master_key))

    def write_policy(self, project: str, subject: str, permissions: Iterable[str]) -> FilePolicyEngine:
        """One role, ``agent``, allowing exactly ``permissions``; bound to the subject."""
        engine = FilePolicyEngine.initialize(self.policy)
        engine.set_role("agent", allow=sorted(set(permissions)))
        engine.grant_role(project, subject, "agent")
        return engine


def _artifact_key(cache: Path) -> Path:
    """The persistent artifact HMAC key (32 random bytes, mode 0600), created once."""
    path = cache / "artifact.key"
    with contextlib.suppress(FileExistsError):
        create_exclusive(path, _random.token_bytes(_ARTIFACT_KEY_BYTES))
    return path


def write_lock(
    path: Path, bundles: Sequence[Path], private_pem: bytes, *, generation: int, previous: str | None
) -> str:
    """Write a signed lock naming ``bundles`` (paths relative to the lock's directory).

    Raises:
        LockInvalid, ManifestInvalid, DigestMismatch: a bundle is unreadable or invalid.

    Returns:
        The lock's digest (what the next generation's ``previous`` names).
    """
    entries = []
    for directory in bundles:
        bundle = read_bundle(directory)
        package = bundle.manifest.package
        signature, key_id = sign_package(
            private_pem, package.name, package.version, bundle.manifest_sha256, bundle.module_sha256
        )
        entries.append(
            {
                "name": package.name,
                "version": package.version,
                "bundle": directory.relative_to(path.parent).as_posix(),
                "manifest_sha256": bundle.manifest_sha256,
                "module_sha256": bundle.module_sha256,
                "signature": signature,
                "key_id": key_id,
            }
        )
    document = {"format": LOCK_FORMAT, "generation": generation, "previous": previous,
                "packages": entries}
    path.write_text(json.dumps(document, indent=2) + "\n", "utf-8")
    return digest_json(document)


def _next_minor(version: str) -> str:
    core = version.split("-", 1)[0].split("+", 1)[0]
    major, minor, _patch = (int(part) for part in core.split("."))
    return f"{major}.{minor + 1}.0"


def escalated_manifest(bundle: Path, destination: Path) -> tuple[Path, list[str]]:
    """Copy ``bundle`` as a next minor version whose manifest quietly asks for more.

    The module is unchanged; the manifest adds a wildcard host with DELETE, doubles the
    fuel limit and raises the request budget: the kind of upgrade a reviewer must see.

    Returns:
        The new bundle directory and a description of each change.

    Raises:
        ManifestInvalid: the changed manifest is invalid (a bug in this function).
    """
    original = read_bundle(bundle).manifest
    manifest: dict[str, Any] = copy.deepcopy(json.loads(original.to_json()))
    old_version = manifest["package"]["version"]
    new_version = _next_minor(old_version)
    manifest["package"]["version"] = new_version
    for tool in manifest["tools"]:
        if tool["version"] == old_version:
            tool["version"] = new_version
    allow = manifest["http"]["allow"] if manifest.get("http") else []
    host = allow[0]["host"] if allow else None
    suffix = host.split(".", 1)[1] if host and host.count(".") >= 2 else "tracker.example"
    manifest["http"]["allow"].append(
        {"scheme": "https", "host": f"*.{suffix}", "port": None, "path_prefix": "/",
         "methods": ["DELETE", "GET", "POST"]}
    )
    limits = manifest["limits"]
    limits["fuel"] = min(limits["fuel"] * 2, 20_000_000_000)
    limits["max_http_requests"] = min(limits["max_http_requests"] * 2, 64)
    final = PackageManifest.from_json(canonical_json(manifest))
    target = destination / f"{final.package.name}-{new_version}"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(bundle / "module.wasm", target / "module.wasm")
    (target / "manifest.json").write_bytes(final.to_json())
    module_digest = sha256_hex((bundle / "module.wasm").read_bytes())
    changes = [
        f"version {old_version} -> {new_version} (same module.wasm, sha256 {module_digest[:12]}…)",
        f"new allow entry https://*.{suffix}/ with DELETE",
        f"limits.fuel x2, limits.max_http_requests -> {limits['max_http_requests']}",
    ]
    return target, changes
