"""Registry credentials: from the secrets store or the Docker config file, never from argv.

Every credential belongs to exactly one registry *authority* (``host[:port]`` as written
in the reference, lower case) and is handed only to the client of that authority: the
lookup compares authorities exactly, never a lossy rendering of them.

Lookup order for a registry ``host[:port]``:

1. the Stockade secrets store (when a master key exists), scope ``stockade``, subject
   ``registry``, name :func:`secret_name_for`, value ``USERNAME:PASSWORD``. The name is an
   injective spelling of the authority (:func:`registry_for_secret_name` reads it back):
   ``registry_`` + the authority with ``.`` written ``_``, ``:`` (before the port)
   written ``__`` and each ``-`` written ``___`` (``registry_ghcr_io``,
   ``registry_127_0_0_1__5000``, ``registry_my___registry_example__443``). The registry
   grammar never puts two separators side by side except runs of ``-``, so every run of
   underscores reads back one way. An authority whose name would pass the store's 64
   characters cannot be kept in the secrets store (:func:`secret_name_for` refuses it;
   use the Docker config for it)::

       printf '%s' "bot:$TOKEN" | stockade secrets set registry_ghcr_io --project stockade --subject registry

2. the Docker config file (``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``):
   ``auths[<registry>]`` (also spelled ``https://<registry>`` with an optional ``/v1/`` or
   ``/v2/``, or ``http://<registry>``) holding ``auth`` (base64 of ``user:password``) or
   ``username`` and ``password``. Keys are compared exactly to those spellings of the
   authority. Credential helpers (``credsStore``, ``credHelpers``) are not run.

Values are wrapped in :class:`~host.secrets.store.SecretValue` and never printed; an unreadable
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
from host.secrets.store import SecretsStore, SecretValue
from host.trust.bundlestore import check_repository
from sdk.oci.client import RegistryCredential

__all__ = [
    "REGISTRY_SECRET_PRINCIPAL",
    "REGISTRY_SECRET_SCOPE",
    "docker_config_path",
    "find_credential",
    "registry_for_secret_name",
    "secret_name_for",
]

REGISTRY_SECRET_SCOPE: Final = "stockade"  # noqa: S105 - a scope name, not a secret
REGISTRY_SECRET_PRINCIPAL: Final = "registry"  # noqa: S105 - a subject name
MAX_DOCKER_CONFIG_BYTES: Final = 1024 * 1024  # bytes
MAX_SECRET_NAME_CHARS: Final = 64  # the secrets store's limit on a name

_NAME_PREFIX: Final = "registry_"
_SEPARATORS: Final = {".": "_", ":": "__", "-": "___"}
_AUTHORITY_RE: Final = re.compile(r"[a-z0-9.:-]+")
_RUN_RE: Final = re.compile(r"_+")


def _check_authority(registry: str) -> str:
    """``registry`` itself when it is a registry authority ``host[:port]``; else ValueError."""
    if _AUTHORITY_RE.fullmatch(registry) is None:
        raise ValueError(f"{registry[:80]!r} is not a registry host[:port] (lower case)")
    check_repository(f"{registry}/x")
    return registry


def secret_name_for(registry: str) -> str:
    """The secrets-store name holding ``USERNAME:PASSWORD`` for exactly ``registry``.

    Args:
        registry: the authority ``host[:port]``, lower case, as the reference writes it.

    Raises:
        ValueError: ``registry`` is not an authority, or its name would be longer than the
            secrets store allows (64 characters): no name can stand for it, so no other
            authority's credential is ever found under a shortened one.

    Returns:
        ``registry_`` + the injective spelling described in the module docstring.
    """
    name = _NAME_PREFIX + re.sub(r"[.:-]", lambda m: _SEPARATORS[m.group()], _check_authority(registry))
    if len(name) > MAX_SECRET_NAME_CHARS:
        raise ValueError(
            f"the secrets-store name for registry {registry[:80]!r} would be {len(name)} characters, "
            f"over the {MAX_SECRET_NAME_CHARS} allowed; keep its credential in the Docker config"
        )
    return name


def registry_for_secret_name(name: str) -> str:
    """The exact authority a secrets-store name stands for (the inverse of :func:`secret_name_for`).

    Raises:
        ValueError: ``name`` is not the name of any registry authority.
    """
    if not name.startswith(_NAME_PREFIX):
        raise ValueError(f"{name[:80]!r} is not a registry credential name (registry_…)")
    readback = {v: k for k, v in _SEPARATORS.items()}

    def separator(run: re.Match[str]) -> str:
        text = run.group()
        if text in readback:
            return readback[text]
        if len(text) % 3 == 0:
            return "-" * (len(text) // 3)
        raise ValueError(f"{name[:80]!r} holds a run of {len(text)} underscores, which no authority spells")

    registry = _RUN_RE.sub(separator, name[len(_NAME_PREFIX) :])
    _check_authority(registry)
    if secret_name_for(registry) != name:
        raise ValueError(f"{name[:80]!r} is not the name of any registry authority")
    return registry


def docker_config_path(environ: os._Environ[str] | dict[str, str] | None = None) -> Path:
    """``$DOCKER_CONFIG/config.json`` when set, else ``~/.docker/config.json``."""
    env = os.environ if environ is None else environ
    directory = env.get("DOCKER_CONFIG")
    return Path(directory) / "config.json" if directory else Path("~/.docker/config.json").expanduser()


def _split(value: str, where: str, registry: str) -> RegistryCredential:
    username, sep, password = value.partition(":")
    if not sep or not username or not password:
        raise SecretsUnavailable(
            f"the registry credential in {where} is not USERNAME:PASSWORD",
            hint="store the value as USERNAME:PASSWORD",
        )
    return RegistryCredential(username, SecretValue(password), registry=registry)


def _store_name(registry: str) -> str | None:
    """The store name of ``registry``, or ``None`` when none can stand for it."""
    try:
        name = secret_name_for(registry)
    except ValueError:
        return None
    # The name is injective; reading it back is the exact authority comparison itself.
    return name if registry_for_secret_name(name) == registry else None


def _from_store(registry: str, store: SecretsStore) -> RegistryCredential | None:
    name = _store_name(registry)
    if name is None:
        return None
    value = store.get(REGISTRY_SECRET_SCOPE, REGISTRY_SECRET_PRINCIPAL, name)
    return None if value is None else _split(value.reveal(), f"secret {name}", registry)


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
        return _split(decoded, where, registry)
    username, password = entry.get("username"), entry.get("password")
    if isinstance(username, str) and isinstance(password, str) and username and password:
        return RegistryCredential(username, SecretValue(password), registry=registry)
    return None


def find_credential(
    registry: str, *, secrets: SecretsStore | None, docker_config: Path | None
) -> tuple[RegistryCredential | None, str]:
    """The credential for ``registry`` and where it came from (for messages; never the value).

    Args:
        registry: ``host[:port]``; only a credential recorded for exactly this authority is found.
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
            return found, f"secrets store ({_store_name(registry)})"
    if docker_config is not None:
        found = _from_docker(registry, docker_config)
        if found is not None:
            return found, f"docker config {docker_config}"
    return None, "none"
