"""Registry credentials: from the secrets store or the Docker config file, never from argv.

Lookup order for a registry ``host[:port]``:

1. the Stockade secrets store (when a master key exists), scope ``stockade``, subject
   ``registry``, name :func:`secret_name_for` (``registry_`` + the host and port with every
   character outside ``[a-z0-9]`` replaced by ``_``, e.g. ``registry_ghcr_io`` or
   ``registry_127_0_0_1_5000``), value ``USERNAME:PASSWORD``::

       printf '%s' "bot:$TOKEN" | stockade secrets set registry_ghcr_io --project stockade --subject registry

2. the Docker config file (``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``):
   ``auths[<registry>]`` (also spelled ``https://<registry>`` with an optional ``/v1/`` or
   ``/v2/``) holding ``auth`` (base64 of ``user:password``) or ``username`` and ``password``.
   Credential helpers (``credsStore``, ``credHelpers``) are not run.

Values are wrapped in :class:`~host.secrets.SecretValue` and never printed; an unreadable
or malformed store or Docker config is ``SECRETS_UNAVAILABLE`` (fail closed, never "no
credentials").
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from pathlib import Path
from typing import Any, Final

from host.errors import SecretsUnavailable
from host.files import read_regular
from host.secrets import SecretsStore, SecretValue
from sdk.oci import RegistryCredential

__all__ = [
    "REGISTRY_SECRET_PRINCIPAL",
    "REGISTRY_SECRET_SCOPE",
    "docker_config_path",
    "find_credential",
    "secret_name_for",
]

REGISTRY_SECRET_SCOPE: Final = "stockade"  # noqa: S105 - a scope name, not a secret
REGISTRY_SECRET_PRINCIPAL: Final = "registry"  # noqa: S105 - a subject name
MAX_DOCKER_CONFIG_BYTES: Final = 1024 * 1024  # bytes


def secret_name_for(registry: str) -> str:
    """The secrets-store name holding ``USERNAME:PASSWORD`` for ``registry``."""
    return ("registry_" + re.sub(r"[^a-z0-9]", "_", registry.lower()))[:64]


def docker_config_path(environ: os._Environ[str] | dict[str, str] | None = None) -> Path:
    """``$DOCKER_CONFIG/config.json`` when set, else ``~/.docker/config.json``."""
    env = os.environ if environ is None else environ
    directory = env.get("DOCKER_CONFIG")
    return Path(directory) / "config.json" if directory else Path("~/.docker/config.json").expanduser()


def _split(value: str, where: str) -> RegistryCredential:
    username, sep, password = value.partition(":")
    if not sep or not username or not password:
        raise SecretsUnavailable(
            f"the registry credential in {where} is not USERNAME:PASSWORD",
            hint="store the value as USERNAME:PASSWORD",
        )
    return RegistryCredential(username, SecretValue(password))


def _from_store(registry: str, store: SecretsStore) -> RegistryCredential | None:
    name = secret_name_for(registry)
    value = store.get(REGISTRY_SECRET_SCOPE, REGISTRY_SECRET_PRINCIPAL, name)
    return None if value is None else _split(value.reveal(), f"secret {name}")


def _auth_entry(auths: dict[str, Any], registry: str) -> Any:
    for key in (
        registry,
        f"https://{registry}",
        f"https://{registry}/v1/",
        f"https://{registry}/v2/",
        f"http://{registry}",
    ):
        if key in auths:
            return auths[key]
    return None


def _from_docker(registry: str, path: Path) -> RegistryCredential | None:
    if not os.path.lexists(path):
        return None
    data = read_regular(path, MAX_DOCKER_CONFIG_BYTES, what="docker config", error=SecretsUnavailable)
    where = f"docker config {path}"
    try:
        document = json.loads(data)
        entry = _auth_entry(document.get("auths") or {}, registry)
    except (ValueError, AttributeError):
        raise SecretsUnavailable(f"{where} is not valid JSON with an 'auths' object") from None
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise SecretsUnavailable(f"{where}: the entry for {registry} is not an object")
    if isinstance(entry.get("auth"), str) and entry["auth"]:
        try:
            decoded = base64.b64decode(entry["auth"], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise SecretsUnavailable(
                f"{where}: the 'auth' of {registry} is not base64 of user:password"
            ) from None
        return _split(decoded, where)
    username, password = entry.get("username"), entry.get("password")
    if isinstance(username, str) and isinstance(password, str) and username and password:
        return RegistryCredential(username, SecretValue(password))
    return None


def find_credential(
    registry: str, *, secrets: SecretsStore | None, docker_config: Path | None
) -> tuple[RegistryCredential | None, str]:
    """The credential for ``registry`` and where it came from (for messages; never the value).

    Args:
        registry: ``host[:port]``.
        secrets: the secrets store, or ``None`` when no master key exists.
        docker_config: the Docker config file to read, or ``None`` to skip it.

    Raises:
        SecretsUnavailable: the store or the Docker config cannot be read or is malformed.

    Returns:
        ``(credential or None, "secrets store" | "docker config <path>" | "none")``.
    """
    if secrets is not None:
        found = _from_store(registry, secrets)
        if found is not None:
            return found, f"secrets store ({secret_name_for(registry)})"
    if docker_config is not None:
        found = _from_docker(registry, docker_config)
        if found is not None:
            return found, f"docker config {docker_config}"
    return None, "none"
