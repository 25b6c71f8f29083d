"""Helpers to build real :class:`EgressSession` objects against loopback servers.

Public-looking names (``api.tracker.example``) are mapped to loopback addresses by a
:class:`FakeResolver`; loopback is reachable only because sessions are built with
``allow_loopback=True`` (the host's ``unsafe_allow_loopback``) unless a test says not.

Example::

    with LoopbackServer(routes={"/v1/echo": echo()}) as server:
        resolver = FakeResolver({"api.tracker.example": ["127.0.0.1"]})
        session = make_session(allow=[allow("api.tracker.example", server.port)],
                               resolver=resolver)
        session.send(get(f"http://api.tracker.example:{server.port}/v1/echo"))
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from host.egress.policy import EgressPolicy
from host.egress.port import HttpRequest
from host.egress.session import EgressSession
from host.formats.manifest import CredentialMapping, HttpConfig
from host.secrets.redact import Redactor
from host.secrets.store import SecretValue

__all__ = [
    "FakeResolver",
    "allow",
    "bearer",
    "get",
    "http_config",
    "make_session",
    "mapping",
    "request",
]

MiB = 1024 * 1024


class FakeResolver:
    """The DNS port, scripted: ``answers[host]`` is a list of addresses, or a list of
    such lists consumed one per call (the last one repeats). Records every call."""

    def __init__(self, answers: Mapping[str, Sequence[Any]]) -> None:
        self._answers = {host: list(value) for host, value in answers.items()}
        self._lock = threading.Lock()
        self.calls: list[str] = []

    def __call__(self, host: str) -> list[str]:
        with self._lock:
            self.calls.append(host)
            if host not in self._answers:
                raise OSError(f"NXDOMAIN {host}")
            value = self._answers[host]
            if value and isinstance(value[0], (list, tuple)):
                answer = value.pop(0) if len(value) > 1 else value[0]
                return list(answer)
            return list(value)


def allow(
    host: str,
    port: int | None,
    *,
    scheme: str = "http",
    path_prefix: str = "/",
    methods: Sequence[str] = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"),
) -> dict[str, Any]:
    """One ``http.allow`` entry as the manifest JSON writes it."""
    return {"scheme": scheme, "host": host, "port": port, "path_prefix": path_prefix, "methods": list(methods)}


def mapping(
    secret: str,
    location: Mapping[str, Any],
    hosts: Sequence[str],
    path_prefixes: Sequence[str] = ("/",),
    *,
    optional: bool = False,
) -> dict[str, Any]:
    """One ``http.credentials`` entry as the manifest JSON writes it."""
    return {
        "secret": secret,
        "location": dict(location),
        "hosts": list(hosts),
        "path_prefixes": list(path_prefixes),
        "optional": optional,
    }


def bearer(secret: str, hosts: Sequence[str], path_prefixes: Sequence[str] = ("/",)) -> dict[str, Any]:
    return mapping(secret, {"type": "bearer"}, hosts, path_prefixes)


def http_config(
    allow_entries: Sequence[Mapping[str, Any]],
    credentials: Sequence[Mapping[str, Any]] = (),
    *,
    max_request_bytes: int = 1 * MiB,
    max_response_bytes: int = 10 * MiB,
    timeout_ms: int = 30_000,
) -> HttpConfig:
    """A real, validated ``HttpConfig`` (through the manifest's JSON edge)."""
    document = {
        "allow": list(allow_entries),
        "credentials": list(credentials),
        "max_request_bytes": max_request_bytes,
        "max_response_bytes": max_response_bytes,
        "timeout_ms": timeout_ms,
    }
    return HttpConfig.model_validate_json(json.dumps(document))


def make_session(
    *,
    allow: Sequence[Mapping[str, Any]],
    resolver: FakeResolver,
    credentials: Sequence[Mapping[str, Any]] = (),
    staged: Mapping[str, str] | None = None,
    package: str = "tracker",
    max_requests: int = 16,
    call_timeout_s: float = 10.0,
    ca_file: Path | None = None,
    allow_loopback: bool = True,
    max_request_bytes: int = 1 * MiB,
    max_response_bytes: int = 10 * MiB,
    timeout_ms: int = 30_000,
    mapped_credentials: Sequence[CredentialMapping] | None = None,
    **kwargs: Any,
) -> EgressSession:
    """An EgressSession over a real policy, real manifest models and a real Redactor.

    ``mapped_credentials`` overrides the credentials the session uses (to test that a
    session applies only the mappings it was given, e.g. another package's).
    """
    http = http_config(
        allow,
        credentials,
        max_request_bytes=max_request_bytes,
        max_response_bytes=max_response_bytes,
        timeout_ms=timeout_ms,
    )
    staged_values = {name: SecretValue(value) for name, value in (staged or {}).items()}
    usernames = [
        m.location.username for m in http.credentials if m.location.type == "basic"
    ]
    return EgressSession(
        http,
        EgressPolicy.from_allow(http.allow),
        package=package,
        credentials=http.credentials if mapped_credentials is None else mapped_credentials,
        staged=staged_values,
        max_requests=max_requests,
        deadline=time.monotonic() + call_timeout_s,
        resolver=resolver,
        ca_file=ca_file,
        allow_loopback=allow_loopback,
        redactor=Redactor(staged_values.values(), basic_usernames=usernames),
        **kwargs,
    )


def request(
    method: str,
    url: str,
    headers: Sequence[tuple[str, str]] = (),
    body: bytes | None = None,
    timeout_ms: int | None = None,
) -> HttpRequest:
    return HttpRequest(method, url, tuple(headers), body, timeout_ms)


def get(url: str, headers: Sequence[tuple[str, str]] = (), timeout_ms: int | None = None) -> HttpRequest:
    return request("GET", url, headers, None, timeout_ms)
