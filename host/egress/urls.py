"""URL normalization and host/path patterns: the URL rules of docs/design.md §8.

Every allowlist check and every credential match goes through :func:`normalize_url`,
:class:`HostPattern` and :func:`path_matches`, so there is one reading of a URL.

Invariants (refuse, never repair):

* The whole URL is at most :data:`MAX_URL_CHARS` characters and holds no ASCII control
  character (reason ``control_character``), no space and no backslash (``invalid_url``).
* Only absolute ``http://`` or ``https://`` URLs (the scheme is case-insensitive);
  ``//host``, ``https:/host`` and ``https:host`` are ``invalid_url``; any other scheme
  is ``scheme_not_allowed``. Whether ``http`` is allowed is the allowlist's business.
* Any ``@`` in the authority is ``userinfo``, even an empty userinfo (``https://@b``).
* The port is 1–5 ASCII digits without a leading zero, 1–65535, else ``invalid_url``.
* Host: ``%`` is refused (``invalid_url``); lower-cased; non-ASCII through UTS-46 with
  the ``idna`` package (STD3 rules, non-transitional), never Python's IDNA2003 codec,
  so a full-width dot ``．`` is a label separator as in browsers; exactly one trailing
  dot removed; empty labels refused; ASCII labels are LDH (letters, digits, inner
  hyphens, 1–63 characters; ``xn--`` labels must be valid A-labels); at most 253
  characters. A host whose last label is numeric (``2130706433``, ``127.1``,
  ``0x7f.1``, ``0177.0.0.1``) is an IPv4 attempt and must be canonical dotted decimal,
  else ``ip_literal``; it is never resolved as a DNS name. IPv4 spelled with non-ASCII
  characters (full-width digits) is ``ip_literal``. IPv6 only in brackets, no zone id
  (``ip_literal`` / ``invalid_url``). ``localhost`` and ``*.localhost`` are
  ``localhost``.
* Path: only RFC 3986 ``pchar`` characters and ``/``; raw non-ASCII is refused (a
  client would have to re-encode it, and what is checked must be what is sent). Every
  ``%`` starts a valid escape and each decoded segment is valid UTF-8 (``invalid_url``).
  A segment decoding to contain ``/`` or ``\\`` is ``encoded_separator``; one decoding
  to contain a control character is ``control_character`` (stricter than docs/design.md §8: an
  encoded NUL or CR/LF has no use in an API path and is a classic truncation trick).
  ``.``/``..`` followed by ``;`` (``/..;/``, read as ``..`` by some servers) is
  ``dot_segment``. Escapes of unreserved characters are decoded and other escapes
  upper-cased (RFC 3986 §6.2.2), then ``.`` and ``..`` are resolved (§5.2.4), so
  ``%2e%2E`` is ``..``. An empty path is ``/``.
* Query: kept as written, but every ``%`` must start a valid escape and only printable
  ASCII other than ``"``, ``<`` and ``>`` is allowed, so httpx2 sends it unchanged.
  The fragment is dropped.

Example::

    url = normalize_url("HTTPS://Bücher.Example./a/./b/%2e%2e/c?q=1#top")
    url.url()    # 'https://xn--bcher-kva.example/a/c?q=1'
    parse_host_pattern("*.example.com").matches(normalize_url("https://api.example.com/"))  # True
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal, NoReturn, Protocol

import idna

from host.egress.addresses import format_ipv6, parse_ipv4_canonical, parse_ipv6
from host.errors import EgressDenied

__all__ = [
    "DEFAULT_PORTS",
    "MAX_URL_CHARS",
    "DenyReason",
    "HostKind",
    "HostPattern",
    "NormalizedUrl",
    "UrlOrigin",
    "make_host_pattern",
    "normalize_path_prefix",
    "normalize_url",
    "parse_host_pattern",
    "path_matches",
]

DenyReason = Literal[
    "invalid_url",  # malformed, relative, space/backslash, bad port/escape/label, non-ASCII path
    "control_character",  # an ASCII control character in the URL or a decoded path segment
    "scheme_not_allowed",  # a scheme other than http/https, or one no matching entry names
    "insecure_scheme",  # http:// while no matching allow entry says http
    "userinfo",  # any '@' in the authority
    "ip_literal",  # non-canonical IPv4, unbracketed IPv6, IPv4 spelled in non-ASCII
    "localhost",  # localhost or *.localhost, refused by name
    "encoded_separator",  # a path segment decoding to contain '/' or '\'
    "dot_segment",  # '.' or '..' followed by ';' in a path segment
    "empty_allowlist",  # the manifest allows no egress at all
    "host_not_allowed",  # no allow entry matches the host
    "port_not_allowed",  # allow entries match the host but not the port
    "path_not_allowed",  # ... nor the path prefix
    "method_not_allowed",  # ... nor the method
    "blocked_address",  # the host is, or resolves to, a non-public address (DNS vetting)
    "dns_failure",  # resolution failed or returned no address
]
"""Every ``EgressDenied.reason`` the policy layer raises, in one place."""

HostKind = Literal["dns", "ipv4", "ipv6"]

MAX_URL_CHARS: Final = 8192
"""Longest URL accepted, in characters (a common server limit for the request line)."""

DEFAULT_PORTS: Final[Mapping[str, int]] = MappingProxyType({"http": 80, "https": 443})

_CONTROL_CHAR = re.compile(r"[\x00-\x1f\x7f]")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*(?=:)")
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_HEX = frozenset("0123456789abcdefABCDEF")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PCHAR = _UNRESERVED | frozenset("!$&'()*+,;=:@")  # plus '%' escapes (RFC 3986 §3.3)
_QUERY_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F)) - frozenset('"<>#\\')
_MAX_HOST_CHARS = 253
_SHOWN_CHARS = 80


def _show(text: str) -> str:
    """A bounded repr of untrusted text for error messages."""
    if len(text) > _SHOWN_CHARS:
        return repr(text[:_SHOWN_CHARS]) + "…"
    return repr(text)


def _deny(reason: DenyReason, message: str) -> NoReturn:
    raise EgressDenied(message, reason=reason)


class UrlOrigin(Protocol):
    """Anything with a normalized scheme, host, port and host kind (a :class:`NormalizedUrl`
    or a ``host.egress.policy.EgressTarget``)."""

    @property
    def scheme(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def host_kind(self) -> HostKind: ...


@dataclass(frozen=True, slots=True)
class NormalizedUrl:
    """A URL that passed every rule of docs/design.md §8, in the form that is sent.

    Attributes:
        scheme: ``"http"`` or ``"https"``.
        host: lower-case A-label DNS name, canonical IPv4, or RFC 5952 IPv6 (no brackets).
        port: the effective port (the scheme's default when the URL gave none).
        path: normalized path, always starting with ``/``.
        query: the query without ``?`` (``""`` when absent or empty).
        host_kind: ``"dns"``, ``"ipv4"`` or ``"ipv6"``.
    """

    scheme: str
    host: str
    port: int
    path: str
    query: str
    host_kind: HostKind

    def authority(self) -> str:
        """``host[:port]`` as written in the URL (IPv6 bracketed, default port omitted)."""
        host = f"[{self.host}]" if self.host_kind == "ipv6" else self.host
        if self.port == DEFAULT_PORTS[self.scheme]:
            return host
        return f"{host}:{self.port}"

    def url(self) -> str:
        """The URL that is actually sent: no fragment, no default port, IPv6 in brackets."""
        query = f"?{self.query}" if self.query else ""
        return f"{self.scheme}://{self.authority()}{self.path}{query}"


def normalize_url(url: str) -> NormalizedUrl:
    """Check and normalize an absolute http(s) URL by the rules of docs/design.md §8.

    Args:
        url: the URL as the guest gave it (untrusted).

    Raises:
        EgressDenied: with ``reason`` one of ``invalid_url``, ``control_character``,
            ``scheme_not_allowed``, ``userinfo``, ``ip_literal``, ``localhost``,
            ``encoded_separator``, ``dot_segment`` (see the module docstring).

    Returns:
        The normalized URL.
    """
    if not isinstance(url, str):
        _deny("invalid_url", f"a URL must be a string, not {type(url).__name__}")
    _check_url_characters(url)
    scheme, rest = _split_scheme(url)
    authority, raw_path, raw_query = _split_rest(rest)
    host_text, port_text = _split_authority(authority)
    host, kind = _normalize_host(host_text)
    port = _parse_port(port_text, scheme)
    return NormalizedUrl(
        scheme=scheme,
        host=host,
        port=port,
        path=_normalize_path(raw_path),
        query=_check_query(raw_query),
        host_kind=kind,
    )


def _check_url_characters(url: str) -> None:
    if len(url) > MAX_URL_CHARS:
        _deny("invalid_url", f"URL is longer than {MAX_URL_CHARS} characters")
    control = _CONTROL_CHAR.search(url)
    if control is not None:
        _deny("control_character", f"URL contains the control character U+{ord(control.group(0)):04X}")
    if " " in url:
        _deny("invalid_url", "URL contains a space")
    if "\\" in url:
        _deny("invalid_url", "URL contains a backslash")


def _split_scheme(url: str) -> tuple[str, str]:
    match = _SCHEME.match(url)
    if match is None:
        _deny("invalid_url", f"not an absolute URL (scheme://host/path): {_show(url)}")
    scheme = match.group(0).lower()
    if scheme not in DEFAULT_PORTS:
        _deny("scheme_not_allowed", f"scheme {_show(scheme)} is not allowed; only http and https")
    rest = url[match.end() + 1 :]
    if not rest.startswith("//"):
        _deny("invalid_url", f"not an absolute URL (scheme://host/path): {_show(url)}")
    return scheme, rest[2:]


def _split_rest(rest: str) -> tuple[str, str, str | None]:
    """Split ``authority path [?query] [#fragment]``; the fragment is dropped."""
    rest = rest.split("#", 1)[0]
    end = len(rest)
    for delimiter in "/?":
        index = rest.find(delimiter)
        if index != -1:
            end = min(end, index)
    authority, tail = rest[:end], rest[end:]
    path, sep, query = tail.partition("?")
    return authority, path, (query if sep else None)


def _split_authority(authority: str) -> tuple[str, str | None]:
    """Split ``host[:port]``; refuse userinfo and unbracketed IPv6."""
    if "@" in authority:
        _deny("userinfo", "URL must not contain userinfo ('@' in the authority)")
    if authority.startswith("["):
        close = authority.find("]")
        if close == -1:
            _deny("invalid_url", f"unterminated IPv6 literal: {_show(authority)}")
        host, after = authority[: close + 1], authority[close + 1 :]
        if after == "":
            return host, None
        if not after.startswith(":"):
            _deny("invalid_url", f"unexpected text after IPv6 literal: {_show(after)}")
        return host, after[1:]
    if authority.count(":") > 1:
        _deny("ip_literal", f"IPv6 addresses must be written in brackets: {_show(authority)}")
    host, sep, port = authority.partition(":")
    return host, (port if sep else None)


def _parse_port(text: str | None, scheme: str) -> int:
    if text is None:
        return DEFAULT_PORTS[scheme]
    if not (text.isascii() and text.isdigit()) or len(text) > 5:
        _deny("invalid_url", f"port must be 1–5 digits: {_show(text)}")
    if len(text) > 1 and text.startswith("0"):
        _deny("invalid_url", f"port must not have leading zeros: {_show(text)}")
    port = int(text)
    if not 1 <= port <= 65535:
        _deny("invalid_url", f"port {port} is outside 1–65535")
    return port


def _normalize_host(text: str) -> tuple[str, HostKind]:
    """Normalize a URL host (the authority without port) to ``(host, kind)``."""
    if text == "":
        _deny("invalid_url", "URL has an empty host")
    if "%" in text:
        _deny("invalid_url", f"'%' is not allowed in a host (no escapes, no IPv6 zone id): {_show(text)}")
    if text.startswith("["):
        address = parse_ipv6(text) if text.endswith("]") else None
        if address is None:
            _deny("ip_literal", f"not an IPv6 address: {_show(text)}")
        return format_ipv6(address), "ipv6"
    if "[" in text or "]" in text:
        _deny("invalid_url", f"brackets are only for IPv6 literals: {_show(text)}")
    from_unicode = not text.isascii()
    ascii_host = _uts46(text) if from_unicode else text.lower()
    if ascii_host.endswith("."):
        ascii_host = ascii_host[:-1]  # exactly one trailing dot
    labels = ascii_host.split(".")
    if "" in labels:
        _deny("invalid_url", f"host has an empty label: {_show(text)}")
    if _looks_numeric(labels[-1]):
        return _ipv4_host(ascii_host, text, from_unicode=from_unicode), "ipv4"
    if ascii_host == "localhost" or ascii_host.endswith(".localhost"):
        _deny("localhost", f"{_show(ascii_host)} is refused by name")
    for label in labels:
        _check_label(label)
    if len(ascii_host) > _MAX_HOST_CHARS:
        _deny("invalid_url", f"host is longer than {_MAX_HOST_CHARS} characters")
    return ascii_host, "dns"


def _uts46(text: str) -> str:
    try:
        return idna.encode(text, uts46=True, std3_rules=True, transitional=False).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        _deny("invalid_url", f"host {_show(text)} is not a valid internationalized name: {exc}")


def _looks_numeric(label: str) -> bool:
    """WHATWG's "ends in a number": such a host is an IPv4 attempt, never a DNS name."""
    if label.isdigit():
        return True
    return label.startswith("0x") and all(char in _HEX for char in label[2:])


def _ipv4_host(ascii_host: str, original: str, *, from_unicode: bool) -> str:
    if from_unicode:
        _deny("ip_literal", f"IPv4 addresses must be written in ASCII: {_show(original)}")
    address = parse_ipv4_canonical(ascii_host)
    if address is None:
        _deny(
            "ip_literal",
            f"IPv4 must be canonical dotted decimal (no octal, hex, short or integer forms): "
            f"{_show(original)}",
        )
    return str(address)


def _check_label(label: str) -> None:
    if _LABEL.fullmatch(label) is None:
        _deny("invalid_url", f"host label {_show(label)} is not letters, digits and inner hyphens")
    if label.startswith("xn--"):
        try:
            valid = idna.encode(idna.decode(label), uts46=False).decode("ascii") == label
        except (idna.IDNAError, UnicodeError):
            valid = False
        if not valid:
            _deny("invalid_url", f"host label {_show(label)} is not a valid IDNA A-label")


def _canonical_segment(segment: str) -> tuple[str, str]:
    """Check one raw path segment; return ``(canonical, decoded)`` or raise EgressDenied."""
    out: list[str] = []
    raw = bytearray()
    index = 0
    while index < len(segment):
        char = segment[index]
        if char == "%":
            pair = segment[index + 1 : index + 3]
            if len(pair) != 2 or not all(c in _HEX for c in pair):
                _deny("invalid_url", f"'%' must start a valid escape: {_show(segment)}")
            value = int(pair, 16)
            raw.append(value)
            out.append(chr(value) if chr(value) in _UNRESERVED else "%" + pair.upper())
            index += 3
            continue
        if char not in _PCHAR:
            _deny("invalid_url", f"character {char!r} is not allowed in a URL path; percent-encode it")
        raw.append(ord(char))
        out.append(char)
        index += 1
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        _deny("invalid_url", f"path segment is not valid UTF-8 once decoded: {_show(segment)}")
    if "/" in decoded or "\\" in decoded:
        _deny("encoded_separator", f"path segment encodes a '/' or '\\': {_show(segment)}")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in decoded):
        _deny("control_character", f"path segment encodes a control character: {_show(segment)}")
    if decoded.startswith((".;", "..;")):
        _deny("dot_segment", f"a dot segment followed by ';' is refused: {_show(segment)}")
    return "".join(out), decoded


def _normalize_path(raw: str) -> str:
    """Check a raw path and resolve dot segments (RFC 3986 §5.2.4)."""
    if raw == "":
        return "/"
    segments = raw.split("/")[1:]  # raw starts with '/' (the authority ended there)
    output: list[str] = []
    for position, segment in enumerate(segments):
        canonical, decoded = _canonical_segment(segment)
        if decoded in (".", ".."):
            if decoded == ".." and output:
                output.pop()
            if position == len(segments) - 1:
                output.append("")  # '/a/b/..' -> '/a/': the trailing slash stays
            continue
        output.append(canonical)
    return "/" + "/".join(output)


def _check_query(raw: str | None) -> str:
    if raw is None:
        return ""
    for index, char in enumerate(raw):
        if char not in _QUERY_CHARS:
            _deny("invalid_url", f"character {char!r} is not allowed in a URL query; percent-encode it")
        if char == "%":
            pair = raw[index + 1 : index + 3]
            if len(pair) != 2 or not all(c in _HEX for c in pair):
                _deny("invalid_url", "'%' in the query must start a valid escape")
    return raw


def path_matches(prefix: str, path: str) -> bool:
    """Whether a normalized ``path`` lies under a normalized ``prefix`` at a segment boundary.

    ``/v1`` matches ``/v1`` and ``/v1/x`` but never ``/v10``; ``/`` matches every path.

    Args:
        prefix: the output of :func:`normalize_path_prefix`.
        path: :attr:`NormalizedUrl.path` (never with a query).

    Returns:
        ``True`` if the path is the prefix or below it.
    """
    if prefix == "/":
        return path.startswith("/")
    return path == prefix or path.startswith(prefix + "/")


def normalize_path_prefix(prefix: str) -> str:
    """Validate and normalize a manifest path prefix.

    The prefix must start with ``/`` and hold no query, fragment, dot segment (also
    ``%2e`` spellings), empty segment, invalid escape or encoded separator. Escapes are
    normalized like URL paths, and one trailing ``/`` is stripped except for the root.

    Args:
        prefix: as written in the manifest, for example ``"/v1/issues/"``.

    Raises:
        ValueError: saying what is wrong (the manifest loader reports MANIFEST_INVALID).

    Returns:
        The normalized prefix, for example ``"/v1/issues"``.
    """
    if not isinstance(prefix, str) or not prefix.startswith("/"):
        raise ValueError(f"a path prefix must be a string starting with '/': {prefix!r}")
    if len(prefix) > MAX_URL_CHARS:
        raise ValueError(f"a path prefix must be at most {MAX_URL_CHARS} characters")
    if any(char in prefix for char in "?#"):
        raise ValueError(f"a path prefix has no query or fragment: {_show(prefix)}")
    if prefix == "/":
        return "/"
    body = prefix[:-1] if prefix.endswith("/") else prefix  # one trailing '/' only
    canonical: list[str] = []
    for segment in body.split("/")[1:]:
        if segment == "":
            raise ValueError(f"a path prefix has no empty segments: {_show(prefix)}")
        try:
            _check_url_characters(segment)
            text, decoded = _canonical_segment(segment)
        except EgressDenied as exc:
            raise ValueError(f"invalid path prefix {_show(prefix)}: {exc.message}") from None
        if decoded in (".", ".."):
            raise ValueError(f"a path prefix has no dot segments: {_show(prefix)}")
        canonical.append(text)
    return "/" + "/".join(canonical)


@dataclass(frozen=True, slots=True)
class HostPattern:
    """An allow entry's or credential's ``scheme://host:port``, valid by construction.

    Build one with :func:`parse_host_pattern` or :func:`make_host_pattern`.

    Attributes:
        scheme: ``"http"`` or ``"https"``.
        host: the normalized host; for a wildcard, the suffix (``example.com`` for
            ``*.example.com``).
        port: the port (already defaulted from the scheme).
        wildcard: ``True`` for ``*.suffix``: exactly one DNS label below ``suffix``.

    Raises:
        ValueError: if the fields are not in normalized form.
    """

    scheme: str
    host: str
    port: int
    wildcard: bool

    def __post_init__(self) -> None:
        if self.scheme not in DEFAULT_PORTS:
            raise ValueError(f"scheme must be http or https, not {self.scheme!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 1 <= self.port <= 65535:
            raise ValueError(f"port must be an int in 1–65535, not {self.port!r}")
        if not isinstance(self.wildcard, bool) or not isinstance(self.host, str):
            raise ValueError("host must be a str and wildcard a bool")
        host, kind = _host_or_value_error(f"[{self.host}]" if ":" in self.host else self.host)
        if host != self.host:
            raise ValueError(f"host must be normalized ({host!r}), not {self.host!r}")
        if self.wildcard and (kind != "dns" or "." not in host):
            raise ValueError(f"a wildcard needs a DNS suffix of at least two labels, not {host!r}")

    def matches_host(self, url: UrlOrigin) -> bool:
        """Whether the host alone matches (scheme and port not compared).

        A literal host matches exactly (an IP only the same address); ``*.suffix``
        matches one DNS label below ``suffix``, never ``suffix`` itself, never an IP.
        """
        if not self.wildcard:
            return url.host == self.host
        if url.host_kind != "dns" or not url.host.endswith("." + self.host):
            return False
        below = url.host[: -len(self.host) - 1]
        return below != "" and "." not in below

    def matches(self, url: UrlOrigin) -> bool:
        """Whether ``url`` has this scheme and port and a matching host."""
        return url.scheme == self.scheme and url.port == self.port and self.matches_host(url)

    def covers(self, other: HostPattern) -> bool:
        """Whether every URL that ``other`` matches is also matched by this pattern.

        Lets a manifest check that a credential's hosts lie inside the allowlist.
        """
        if (other.scheme, other.port) != (self.scheme, self.port):
            return False
        if other.wildcard:
            return self.wildcard and other.host == self.host
        if not self.wildcard:
            return other.host == self.host
        below, dot, rest = other.host.partition(".")
        return below != "" and dot == "." and rest == self.host

    def __str__(self) -> str:
        host = f"*.{self.host}" if self.wildcard else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"{self.scheme}://{host}:{self.port}"


def _host_or_value_error(text: str) -> tuple[str, HostKind]:
    try:
        return _normalize_host(text)
    except EgressDenied as exc:
        raise ValueError(exc.message) from None


def _pattern_host(text: str) -> tuple[str, bool]:
    """Normalize a pattern host (``*.suffix`` or a URL host); return ``(host, wildcard)``."""
    wildcard = text.startswith("*.")
    body = text[2:] if wildcard else text
    if "*" in body:
        raise ValueError(f"'*' is only allowed as the whole first label ('*.example.com'): {_show(text)}")
    host, kind = _host_or_value_error(body)
    if wildcard and kind != "dns":
        raise ValueError(f"a wildcard never matches IP addresses: {_show(text)}")
    if wildcard and "." not in host:
        # '*.com' would admit every name under a top-level domain.
        raise ValueError(f"a wildcard suffix needs at least two labels: {_show(text)}")
    return host, wildcard


def _pattern_port(port: int | None, scheme: str) -> int:
    if port is None:
        return DEFAULT_PORTS[scheme]
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port must be null or an int in 1–65535, not {port!r}")
    return port


def parse_host_pattern(text: str, *, default_scheme: str = "https") -> HostPattern:
    """Parse a credential ``hosts`` entry written ``[scheme://]host[:port]``.

    The scheme defaults to ``default_scheme`` and the port to the scheme's default.
    ``*.suffix`` matches one label below a suffix of at least two labels; ``*`` alone,
    ``*.com``, ``a.*.com``, ``**.x``, userinfo, paths, ``%``, empty labels,
    non-canonical IPv4, unbracketed IPv6 and ``localhost`` are refused: a bad pattern is
    never widened.

    Args:
        text: the pattern, for example ``"https://*.example.com:8443"``.
        default_scheme: ``"https"`` or ``"http"``.

    Raises:
        ValueError: saying what is wrong (the manifest loader reports MANIFEST_INVALID).

    Returns:
        The pattern.
    """
    if not isinstance(text, str) or text == "":
        raise ValueError(f"a host pattern must be a non-empty string: {text!r}")
    if default_scheme not in DEFAULT_PORTS:
        raise ValueError(f"default scheme must be http or https, not {default_scheme!r}")
    try:
        _check_url_characters(text)
    except EgressDenied as exc:
        raise ValueError(f"invalid host pattern {_show(text)}: {exc.message}") from None
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = default_scheme, text
    elif scheme not in DEFAULT_PORTS:
        raise ValueError(f"scheme must be http or https: {_show(text)}")
    if any(char in rest for char in "/?#"):
        raise ValueError(f"a host pattern has no path, query or fragment: {_show(text)}")
    try:
        host_text, port_text = _split_authority(rest)
        port = _parse_port(port_text, scheme)
    except EgressDenied as exc:
        raise ValueError(f"invalid host pattern {_show(text)}: {exc.message}") from None
    host, wildcard = _pattern_host(host_text)
    return HostPattern(scheme=scheme, host=host, port=port, wildcard=wildcard)


def make_host_pattern(scheme: str, host: str, port: int | None) -> HostPattern:
    """Build the pattern of a manifest ``http.allow`` entry.

    Args:
        scheme: ``"http"`` or ``"https"`` (exactly).
        host: a host as in a URL authority without port (``api.example.com``,
            ``*.example.com``, ``203.0.114.7``, ``[2606:4700::1]``).
        port: ``None`` for the scheme's default, else 1–65535.

    Raises:
        ValueError: saying what is wrong.

    Returns:
        The pattern.
    """
    if scheme not in DEFAULT_PORTS:
        raise ValueError(f"scheme must be http or https, not {scheme!r}")
    if not isinstance(host, str) or host == "":
        raise ValueError(f"host must be a non-empty string, not {host!r}")
    try:
        _check_url_characters(host)
    except EgressDenied as exc:
        raise ValueError(f"invalid host {_show(host)}: {exc.message}") from None
    if any(char in host for char in "/?#@"):
        raise ValueError(f"host must be a bare host name (no scheme, userinfo or path): {_show(host)}")
    if ":" in host and not host.startswith("["):
        raise ValueError(f"host must not carry a port (use 'port'); IPv6 goes in brackets: {_show(host)}")
    host_norm, wildcard = _pattern_host(host)
    return HostPattern(scheme=scheme, host=host_norm, port=_pattern_port(port, scheme), wildcard=wildcard)
