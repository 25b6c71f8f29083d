"""A minimal OCI distribution client for Stockade bundles (docs/design.md §12), over httpx2.

Why not the ``oras`` package (oras-py 0.2.x, read for this decision): its ``get_manifest``
returns ``response.json()`` — the parsed document, not the bytes — so the manifest's
digest can never be checked against a pinned ``@sha256:`` reference; ``download_blob``
streams straight into the final output file and never checks the blob's digest or size
(a corrupt layer is written, half a layer stays visible on failure); ``pull`` takes file
names from the registry's ``org.opencontainers.image.title`` annotations; requests are
sent without a timeout (a hanging registry hangs the pull) and retried with sleeps up to
five times. It also brings ``requests`` and ``jsonschema`` as a second HTTP stack. What a
Stockade pull needs is a handful of distribution-spec calls with every byte verified
before anything is written, so this module implements exactly those on httpx2 (already a
dependency), following the OCI distribution spec v1.1:

- ``GET /v2/<name>/manifests/<tag|digest>`` — bounded read, sha256 of the exact bytes;
- ``GET /v2/<name>/blobs/<digest>`` — streamed, bounded by the descriptor's size, sha256
  checked; at most 3 redirects (blob storage), credentials dropped on another origin;
- ``HEAD /v2/<name>/blobs/<digest>``, ``POST /v2/<name>/blobs/uploads/`` + ``PUT
  <location>?digest=…`` (monolithic upload), ``PUT /v2/<name>/manifests/<ref>``.

Every answer is read with ``Accept-Encoding: identity`` and decoded under the host's one
decoding policy (:mod:`host.egress.decoding`: one gzip/deflate layer at most, decoded
bytes counted against the limit, stacked or unknown codings refused), so a compressed
bomb never costs more memory than its limit.

Transport rules: HTTPS by default, verified against the system store plus an optional
extra CA file; plain HTTP only for registries named in ``insecure`` (``HOST:PORT``),
which the CLI prints loudly. Every request has a timeout and every operation an overall
deadline. Authentication: ``Basic`` challenges, and ``Bearer`` token challenges
(``WWW-Authenticate: Bearer realm=…,service=…,scope=…``) with the credentials sent to the
realm only over HTTPS (or to the same insecure origin). Credentials come from the
secrets store or the Docker config file (:mod:`sdk.oci.creds`), never from argv, and
never appear in a message: errors carry the status, the registry's error *code* and the
path, never a response body or a header.

Errors: unreachable, timed out, 5xx or 429 → ``RegistryUnavailable``; other 4xx →
``RegistryRefused``; bytes that do not match their digest → ``DigestMismatch``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import ssl
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, final

import httpx2

from host.egress.decoding import BodyDecoder, BodyTooLarge, ResponseInvalid
from host.errors import DigestMismatch, RegistryRefused, RegistryUnavailable
from host.secrets.store import SecretValue
from host.trust.bundlestore import check_digest, check_repository, check_tag

__all__ = [
    "OCI_MANIFEST_MEDIA_TYPE",
    "OciReference",
    "RegistryClient",
    "RegistryCredential",
    "parse_reference",
]

OCI_MANIFEST_MEDIA_TYPE: Final = "application/vnd.oci.image.manifest.v1+json"
MAX_OCI_MANIFEST_BYTES: Final = 1024 * 1024  # bytes; a Stockade artifact manifest is about 1 KiB
MAX_TOKEN_BYTES: Final = 64 * 1024  # bytes of a token endpoint's answer
MAX_REDIRECTS: Final = 3
DEFAULT_TIMEOUT_S: Final = 30.0  # seconds per request (connect, read, write)
DEFAULT_DEADLINE_S: Final = 600.0  # seconds for one whole transfer (a trickling server is cut)
_ERROR_CODE_RE: Final = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
_CHUNK: Final = 64 * 1024
_SERVED_OTHER_BYTES: Final = (
    "the registry served other bytes than the artifact pins; report it, pull again later"
)


# --- references ---------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class OciReference:
    """``registry[:port]/path[:tag][@sha256:…]``; at least a tag or a digest.

    Attributes:
        repository: ``registry[:port]/path``.
        tag: the tag, if given (never used to fetch when a digest is given).
        digest: ``sha256:<hex>``, if given.
    """

    repository: str
    tag: str | None
    digest: str | None

    @property
    def registry(self) -> str:
        """``host[:port]``."""
        return self.repository.split("/", 1)[0]

    @property
    def path(self) -> str:
        """The repository path inside the registry (``team/tracker``)."""
        return self.repository.split("/", 1)[1]

    def pinned(self, digest: str) -> OciReference:
        """This reference pinned to ``digest`` (the tag is kept for information)."""
        return OciReference(self.repository, self.tag, check_digest(digest))

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        return f"{self.repository}{tag}{digest}"


def parse_reference(text: str) -> OciReference:
    """Parse ``[oci://]registry[:port]/path[:tag][@sha256:<hex>]``.

    Raises:
        ValueError: not such a reference (no registry, upper case, bad tag, a digest of
            another algorithm, neither tag nor digest).

    Returns:
        The reference.
    """
    rest = text.removeprefix("oci://")
    digest = tag = None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        check_digest(digest)
    slash = rest.find("/")
    colon = rest.rfind(":")
    if colon > slash > 0:
        rest, tag = rest[:colon], check_tag(rest[colon + 1 :])
    check_repository(rest)
    if tag is None and digest is None:
        raise ValueError(f"{text[:120]!r} names neither a tag nor a digest (add @sha256:<hex>)")
    return OciReference(rest, tag, digest)


# --- credentials ----------------------------------------------------------------------------


@final
class RegistryCredential:
    """A username and password (or identity token) for exactly one registry; masked in ``repr``.

    ``registry`` is the exact authority (``host[:port]``) the credential belongs to;
    :class:`RegistryClient` refuses it for any other authority, so a look-alike name can
    never receive it.
    """

    __slots__ = ("password", "registry", "username")

    def __init__(self, username: str, password: SecretValue, *, registry: str) -> None:
        self.username = username
        self.password = password
        self.registry = registry

    def __repr__(self) -> str:
        return (
            f"RegistryCredential(registry={self.registry!r}, username={self.username!r}, password='********')"
        )

    def basic(self) -> str:
        """The ``Authorization`` value for HTTP Basic."""
        raw = f"{self.username}:{self.password.reveal()}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")


def _decoded(response: httpx2.Response, limit: int) -> Iterator[bytes]:
    """The body decoded under the host's one decoding policy (:mod:`host.egress.decoding`).

    The client asks for ``Accept-Encoding: identity``; a registry that compresses anyway
    gets one ``gzip`` or ``deflate`` layer decoded, in bounded steps, with the decoded
    bytes counted against ``limit`` (httpx2's own decoders are unbounded: 1 KB of
    ``gzip, gzip`` would become gigabytes before any size check).

    Raises:
        BodyTooLarge: more than ``limit`` decoded bytes, or a bomb's ratio.
        ResponseInvalid: stacked or unknown codings, corrupt compressed data.
        httpx2.HTTPError: the transfer failed.
    """
    decoder = BodyDecoder.for_encodings(response.headers.get_list("content-encoding"), limit=limit)
    for raw in response.iter_raw(_CHUNK):
        yield from decoder.feed(raw)
    yield from decoder.finish()


def _read_limited(response: httpx2.Response, limit: int) -> bytes:
    """At most ``limit`` decoded bytes of a streamed body (the rest is never read or decoded)."""
    data = bytearray()
    try:
        for chunk in _decoded(response, limit + 1):
            data += chunk[: limit - len(data)]
            if len(data) >= limit:
                break
    except (BodyTooLarge, ResponseInvalid):
        pass  # what was read is all that is used (a token, an error code): it fails on its own
    return bytes(data)


# --- the client -----------------------------------------------------------------------------


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    """Parse ``Scheme k="v",k2="v2"`` (RFC 7235, the forms registries send)."""
    scheme, _, rest = header.strip().partition(" ")
    params = dict(re.findall(r'([A-Za-z_]+)="([^"]*)"', rest))
    return scheme.lower(), params


@final
class RegistryClient:
    """One registry, over HTTPS (or plain HTTP when it is named insecure).

    Args:
        registry: ``host[:port]``.
        insecure: speak plain HTTP to this registry (only for ``--insecure-registry``).
        credential: username/password for Basic or token authentication, or ``None``.
        ca_file: a PEM file of extra CA certificates to trust (the system store is kept).
        timeout_s: per-request timeout in seconds.
        deadline_s: limit in seconds for one whole transfer.
        transport: an httpx2 transport (tests only); ``None`` uses the default.
    """

    def __init__(
        self,
        registry: str,
        *,
        insecure: bool,
        credential: RegistryCredential | None,
        ca_file: Path | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        deadline_s: float = DEFAULT_DEADLINE_S,
    ) -> None:
        check_repository(f"{registry}/x")
        if credential is not None and credential.registry != registry:
            # Callers look credentials up by exact authority; a mismatch is a bug, never a fallback.
            raise RuntimeError(
                f"a credential for {credential.registry!r} was handed to the client of {registry!r}"
            )
        self.registry = registry
        self.insecure = insecure
        self._base = f"{'http' if insecure else 'https'}://{registry}"
        self._credential = credential
        self._deadline_s = deadline_s
        self._tokens: dict[str, SecretValue] = {}  # bearer tokens by scope
        self._use_basic = False  # set once the registry sent a Basic challenge
        context = ssl.create_default_context()
        if ca_file is not None:
            context.load_verify_locations(cafile=str(ca_file))
        self._client = httpx2.Client(
            verify=context,
            timeout=httpx2.Timeout(timeout_s),
            follow_redirects=False,
            trust_env=False,
            headers={"User-Agent": "stockade-oci/1", "Accept-Encoding": "identity"},
        )

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def __repr__(self) -> str:
        return f"RegistryClient({self.registry!r}, insecure={self.insecure})"

    # -- the operations --

    def get_manifest(self, path: str, reference: str) -> tuple[bytes, str]:
        """Fetch a manifest by tag or digest: ``(exact bytes, their sha256 digest)``.

        When ``reference`` is a digest, the bytes must hash to it (DIGEST_MISMATCH).

        Raises:
            RegistryUnavailable, RegistryRefused, DigestMismatch.
        """
        url = f"{self._base}/v2/{path}/manifests/{reference}"
        data = self._get_bounded(
            url, path, MAX_OCI_MANIFEST_BYTES, "manifest", accept=OCI_MANIFEST_MEDIA_TYPE
        )
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if reference.startswith("sha256:") and not hmac.compare_digest(digest, reference):
            raise DigestMismatch(
                f"the registry served a manifest with digest {digest} for {path}@{reference}",
                file="oci-manifest",
                expected=reference,
                actual=digest,
                hint="the registry (or something between) did not serve what was pinned; nothing was written",
            )
        return data, digest

    def get_blob(self, path: str, digest: str, size: int, what: str) -> bytes:
        """Fetch a blob and check its size and sha256 before returning it.

        Raises:
            RegistryUnavailable, RegistryRefused, DigestMismatch: a different size or digest.
        """
        url = f"{self._base}/v2/{path}/blobs/{digest}"
        data = self._get_bounded(url, path, size, what, accept=None, exact=True)
        actual = "sha256:" + hashlib.sha256(data).hexdigest()
        if not hmac.compare_digest(actual, digest):
            raise DigestMismatch(
                f"{what} blob of {path} has digest {actual}, the artifact pins {digest}",
                file=what,
                expected=digest,
                actual=actual,
                hint="the registry served corrupt or substituted bytes; nothing was written",
            )
        return data

    def blob_exists(self, path: str, digest: str) -> bool:
        """``HEAD`` a blob. Raises RegistryUnavailable, RegistryRefused (not 404)."""
        with self._send("HEAD", f"{self._base}/v2/{path}/blobs/{digest}", scope=f"{path}:pull,push") as r:
            if r.status_code == 404:
                return False
            self._check(r, "blob")
            return True

    def upload_blob(self, path: str, data: bytes) -> str:
        """Upload ``data`` as a blob (monolithic POST + PUT) unless present; return its digest.

        Raises:
            RegistryUnavailable, RegistryRefused.
        """
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if self.blob_exists(path, digest):
            return digest
        scope = f"{path}:pull,push"
        with self._send("POST", f"{self._base}/v2/{path}/blobs/uploads/", scope=scope) as r:
            self._check(r, "upload")
            location = r.headers.get("location", "")
        target = self._same_origin(urllib.parse.urljoin(f"{self._base}/", location))
        target += ("&" if "?" in target else "?") + urllib.parse.urlencode({"digest": digest})
        headers = {"Content-Type": "application/octet-stream"}
        with self._send("PUT", target, scope=scope, content=data, headers=headers) as r:
            self._check(r, "upload")
        return digest

    def put_manifest(self, path: str, reference: str, data: bytes, media_type: str) -> str:
        """``PUT`` a manifest under a tag or digest; return the sha256 digest of ``data``.

        Raises:
            RegistryUnavailable, RegistryRefused; DigestMismatch when the registry states
            another digest for what it stored.
        """
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        url = f"{self._base}/v2/{path}/manifests/{reference}"
        with self._send(
            "PUT", url, scope=f"{path}:pull,push", content=data, headers={"Content-Type": media_type}
        ) as r:
            self._check(r, "manifest")
            stated = r.headers.get("docker-content-digest")
        if stated is not None and stated != digest:
            raise DigestMismatch(
                f"the registry stored the manifest as {stated[:80]}, expected {digest}",
                file="oci-manifest",
                expected=digest,
            )
        return digest

    # -- transport --

    def _same_origin(self, url: str) -> str:
        if not url.startswith(f"{self._base}/"):
            raise RegistryRefused(
                f"the registry {self.registry} sent an upload location on another origin; refused",
                status=202,
            )
        return url

    def _get_bounded(
        self, url: str, path: str, limit: int, what: str, *, accept: str | None, exact: bool = False
    ) -> bytes:
        """GET ``url`` (following at most 3 redirects for blobs), reading at most ``limit`` bytes."""
        scope = f"{path}:pull"
        headers = {"Accept": accept} if accept else {}
        started = time.monotonic()
        for _ in range(MAX_REDIRECTS + 1):
            with self._send("GET", url, scope=scope, headers=headers) as response:
                if response.status_code in (301, 302, 303, 307, 308) and accept is None:
                    url = self._redirect_target(url, response)
                    continue
                self._check(response, what)
                return self._read_body(response, limit, what, started, exact=exact)
        raise RegistryRefused(f"more than {MAX_REDIRECTS} redirects fetching the {what}", status=310)

    def _redirect_target(self, url: str, response: httpx2.Response) -> str:
        target = urllib.parse.urljoin(url, str(response.headers.get("location", "")))
        if not target.startswith("https://") and not target.startswith(f"{self._base}/"):
            raise RegistryRefused(
                f"the registry redirected to a plain-HTTP location ({target.split('?')[0][:120]}); refused",
                status=response.status_code,
            )
        return target

    def _read_body(
        self, response: httpx2.Response, limit: int, what: str, started: float, *, exact: bool
    ) -> bytes:
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise DigestMismatch(
                f"the {what} is {declared} bytes, over the {limit} bytes allowed for it; nothing was written",
                file=what,
                hint=_SERVED_OTHER_BYTES,
            )
        chunks: list[bytes] = []
        total = 0
        try:
            for chunk in _decoded(response, limit):
                total += len(chunk)
                if time.monotonic() - started > self._deadline_s:
                    raise RegistryUnavailable(
                        f"fetching the {what} from {self.registry} took longer than {self._deadline_s:g} s"
                    )
                chunks.append(chunk)
        except BodyTooLarge as exc:
            raise DigestMismatch(
                f"the {what} is longer than the {limit} bytes allowed for it ({exc}); nothing was written",
                file=what,
                hint=_SERVED_OTHER_BYTES,
            ) from None
        except ResponseInvalid as exc:
            raise RegistryRefused(
                f"the registry {self.registry} sent the {what} in a form the host does not decode ({exc}); "
                "nothing was written",
                status=response.status_code,
            ) from None
        except httpx2.HTTPError as exc:
            raise self._unavailable(exc, what) from None
        if exact and total != limit:
            raise DigestMismatch(
                f"the {what} is {total} bytes, the artifact says {limit}; nothing was written",
                file=what,
                hint=_SERVED_OTHER_BYTES,
            )
        return b"".join(chunks)

    @contextmanager
    def _send(
        self,
        method: str,
        url: str,
        *,
        scope: str,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Iterator[httpx2.Response]:
        """Send once, answer one auth challenge, and yield the (streaming) response."""
        base_headers = dict(headers or {})
        same_origin = url.startswith(f"{self._base}/")
        for attempt in range(2):
            request_headers = dict(base_headers)
            auth = self._authorization(scope) if same_origin else None
            if auth is not None:
                request_headers["Authorization"] = auth
            request = self._client.build_request(method, url, content=content, headers=request_headers)
            try:
                response = self._client.send(request, stream=True)
            except httpx2.HTTPError as exc:
                raise self._unavailable(exc, "request") from None
            try:
                if response.status_code == 401 and attempt == 0 and same_origin:
                    challenge = response.headers.get("www-authenticate", "")
                    response.close()
                    self._answer_challenge(challenge, scope)
                    continue
                yield response
                return
            finally:
                response.close()

    def _authorization(self, scope: str) -> str | None:
        token = self._tokens.get(scope)
        if token is not None:
            return f"Bearer {token.reveal()}"
        if self._use_basic and self._credential is not None:
            return self._credential.basic()
        return None

    def _answer_challenge(self, header: str, scope: str) -> None:
        scheme, params = _challenge(header)
        if self._credential is None and scheme != "bearer":
            raise RegistryRefused(
                f"the registry {self.registry} asks for credentials and none are configured",
                status=401,
                hint="store them in the secrets store or ~/.docker/config.json (never on the command line)",
            )
        if scheme == "basic":
            self._use_basic = True
            return
        if scheme != "bearer" or "realm" not in params:
            raise RegistryRefused(f"the registry {self.registry} sent an unsupported challenge", status=401)
        self._tokens[scope] = self._fetch_token(params, scope)

    def _fetch_token(self, params: dict[str, str], scope: str) -> SecretValue:
        realm = params["realm"]
        parsed = urllib.parse.urlsplit(realm)
        if parsed.scheme != "https" and not realm.startswith(f"{self._base}/"):
            raise RegistryRefused(
                f"the registry {self.registry} names a token service over plain HTTP; refused",
                status=401,
            )
        query = {"service": params.get("service", "")}
        if params.get("scope") or scope:
            query["scope"] = params.get("scope") or f"repository:{scope}"
        headers = {"Authorization": self._credential.basic()} if self._credential is not None else {}
        request = self._client.build_request("GET", realm, params=query, headers=headers)
        try:
            response = self._client.send(request, stream=True)
            try:
                self._check(response, "token")
                body = _read_limited(response, MAX_TOKEN_BYTES)
            finally:
                response.close()
        except httpx2.HTTPError as exc:
            raise self._unavailable(exc, "token") from None
        try:
            document = json.loads(body)
            token = document.get("token") or document.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryRefused(f"the token service of {self.registry} sent no token", status=401)
        return SecretValue(token)

    def _check(self, response: httpx2.Response, what: str) -> None:
        status = response.status_code
        if status < 300:
            return
        if status >= 500 or status == 429:
            raise RegistryUnavailable(
                f"the registry {self.registry} answered {status} for the {what}; nothing was written",
                status=status,
            )
        code = self._error_code(response)
        raise RegistryRefused(
            f"the registry {self.registry} answered {status}{' ' + code if code else ''} for the {what}",
            status=status,
            registry_code=code,
        )

    @staticmethod
    def _error_code(response: httpx2.Response) -> str:
        """The first OCI error code of the body (``MANIFEST_UNKNOWN``), never its free text."""
        try:
            first = json.loads(_read_limited(response, MAX_TOKEN_BYTES))["errors"][0]["code"]
        except (ValueError, KeyError, IndexError, TypeError, httpx2.HTTPError):
            return ""
        return first if isinstance(first, str) and _ERROR_CODE_RE.fullmatch(first) else ""

    def _unavailable(self, exc: httpx2.HTTPError, what: str) -> RegistryUnavailable:
        if isinstance(exc, httpx2.TimeoutException):
            reason = "did not answer in time"
        elif isinstance(exc, httpx2.ConnectError) and ("SSL" in str(exc) or "TLS" in str(exc)):
            reason = "failed the TLS handshake (plain HTTP registries need --insecure-registry HOST:PORT)"
        elif isinstance(exc, httpx2.ConnectError):
            reason = "could not be reached"
        else:
            reason = f"broke the connection ({type(exc).__name__})"
        scheme = "http" if self.insecure else "https"
        return RegistryUnavailable(
            f"the registry {scheme}://{self.registry} {reason} ({what}); nothing was written",
            registry=self.registry,
        )
