"""Options and client opening shared by ``push``, ``pull``, ``lock add oci://`` and ``lock fetch``.

- ``--insecure-registry HOST:PORT`` (repeatable): plain HTTP for exactly that registry,
  printed loudly on stderr every time; every other registry is HTTPS, verified against the
  system trust store plus ``--registry-ca FILE``.
- Credentials: never options, each for one exact authority. The secrets store of
  ``--state-dir`` (scope ``stockade``, subject ``registry``, name
  :func:`sdk.oci.creds.secret_name_for`, e.g. ``registry_127_0_0_1__5000``, value
  ``USER:PASSWORD``) or
  ``$DOCKER_CONFIG/config.json`` / ``~/.docker/config.json`` (see :mod:`sdk.oci.creds`).
- ``--registry-timeout SECONDS`` per request (default 30).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from host.trust.bundlestore import STORE_DIR
from host.trust.lock import TrustedKeys
from sdk.commands._common import DEFAULT_LOCK, add_state_dir, open_secrets, state_dir, stderr_console
from sdk.oci.client import DEFAULT_TIMEOUT_S, RegistryClient
from sdk.oci.creds import docker_config_path, find_credential

__all__ = ["add_registry_options", "add_verify_options", "open_registry", "store_root", "trusted_keys"]


def _host_port(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT")
    return value.lower()


def add_registry_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--insecure-registry``, ``--registry-ca``, ``--registry-timeout`` and ``--state-dir``."""
    parser.add_argument(
        "--insecure-registry",
        type=_host_port,
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="speak plain HTTP to this registry (local testing only; printed loudly)",
    )
    parser.add_argument(
        "--registry-ca", type=Path, default=None, metavar="FILE", help="extra CA certificates (PEM) to trust"
    )
    parser.add_argument(
        "--registry-timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"timeout of each registry request (default {DEFAULT_TIMEOUT_S:g})",
    )
    if not any("--state-dir" in action.option_strings for action in parser._actions):
        add_state_dir(parser)


def add_verify_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--trusted-keys`` and ``--require-signatures`` (signature layer verification)."""
    parser.add_argument(
        "--trusted-keys",
        type=Path,
        default=None,
        metavar="FILE",
        help="verify the artifact's signature against these keys (stockade.keys/1)",
    )
    parser.add_argument(
        "--require-signatures", action="store_true", help="refuse an artifact without a trusted signature"
    )


def trusted_keys(args: argparse.Namespace) -> TrustedKeys | None:
    """The keys of ``--trusted-keys``, or ``None``. Raises LockInvalid when unreadable."""
    path = getattr(args, "trusted_keys", None)
    return TrustedKeys.load(path) if path is not None else None


def store_root(args: argparse.Namespace) -> Path:
    """The bundle store next to ``--lock`` (default ``./stockade.lock``)."""
    lock = getattr(args, "lock", None) or DEFAULT_LOCK
    return Path(lock).resolve().parent / STORE_DIR


def open_registry(args: argparse.Namespace, registry: str) -> RegistryClient:
    """A client for ``registry`` with the chosen transport and stored credentials.

    Raises:
        SecretsUnavailable: the secrets store or the Docker config cannot be read.
    """
    insecure = registry.lower() in args.insecure_registry
    credential, origin = find_credential(
        registry, secrets=open_secrets(state_dir(args)), docker_config=docker_config_path()
    )
    console = stderr_console()
    if insecure:
        console.print(
            f"[bold red]WARNING: plain HTTP to registry {registry} (--insecure-registry):[/] anyone on "
            "the path can read and change the traffic; digests are still verified."
        )
        if credential is not None:
            console.print(f"[bold red]WARNING: credentials from {origin} are sent over plain HTTP.[/]")
    return RegistryClient(
        registry,
        insecure=insecure,
        credential=credential,
        ca_file=args.registry_ca,
        timeout_s=args.registry_timeout,
    )
