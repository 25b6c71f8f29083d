"""Where a lock's registry-pulled bundles live, and how a lock names their source (docs/design.md §12).

Bundles travel as OCI artifacts (``stockade push``/``stockade pull``, :mod:`sdk.oci.client`) and
are pulled **by digest** into a local content-addressed store next to the lock::

    <lock dir>/bundle-store/sha256/<hex of the OCI manifest digest>/
        manifest.json       the Stockade manifest (the artifact's config blob)
        module.wasm         the component (the module layer)
        signature.json      the package signature, when the artifact carries one
        oci-manifest.json   the OCI manifest bytes; their sha256 is the directory's name

A lock entry made from a registry (``stockade lock add oci://REF@sha256:…``) records where
it came from in an optional ``source`` field (format ``stockade.source.oci/1``)::

    "source": {"format": "stockade.source.oci/1",
               "repository": "registry.example:5000/team/tracker",
               "digest": "sha256:<64 hex>", "tag": "1.2.0"}

``tag`` is informational (the tag the digest was resolved from, or ``null``); only the
digest is ever used to fetch. An entry with a ``source`` must name the store directory of
that digest as its ``bundle``, so a reviewer can see the bundle is exactly what the
registry served under that digest. ``Host.open`` never uses the network: it reads the
store, and a missing store directory is ``BUNDLE_MISSING`` with a hint to fetch it.

Example::

    source = OciSource(format=SOURCE_FORMAT, repository="127.0.0.1:5000/team/echo",
                       digest="sha256:" + "ab" * 32, tag=None)
    store_bundle_path(source.digest)      # "bundle-store/sha256/abab…"
    source.reference()                    # "oci://127.0.0.1:5000/team/echo@sha256:abab…"
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict

__all__ = [
    "SOURCE_FORMAT",
    "STORE_DIR",
    "OciSource",
    "check_digest",
    "check_repository",
    "check_tag",
    "store_bundle_path",
]

SOURCE_FORMAT: Final = "stockade.source.oci/1"
STORE_DIR: Final = "bundle-store"
"""The store's directory name, relative to the lock file's directory."""

_LABEL = r"(?:[a-z0-9]|[a-z0-9][a-z0-9-]*[a-z0-9])"
_REGISTRY = rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]{{1,5}})?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY_RE: Final = re.compile(rf"(?P<registry>{_REGISTRY})/(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)")
TAG_RE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
DIGEST_RE: Final = re.compile(r"sha256:[a-f0-9]{64}")
MAX_REPOSITORY_CHARS: Final = 255  # the distribution spec's limit on a repository name


def check_repository(value: str) -> str:
    """Check ``registry[:port]/path`` (lower case; the registry must be explicit).

    The registry part must contain a ``.`` or a ``:port`` or be ``localhost``: a bare
    ``team/tracker`` would silently mean Docker Hub in other tools, so it is refused.

    Raises:
        ValueError: the value is not such a repository.
    """
    match = REPOSITORY_RE.fullmatch(value)
    if match is None or len(value) > MAX_REPOSITORY_CHARS:
        raise ValueError(f"{value[:80]!r} is not a repository of the form registry.example[:port]/path")
    registry = match.group("registry")
    if "." not in registry and ":" not in registry and registry != "localhost":
        raise ValueError(f"{value[:80]!r} does not name a registry (write registry.example[:port]/path)")
    _, _, port = registry.partition(":")
    if port and not 1 <= int(port) <= 65535:
        raise ValueError(f"{value[:80]!r} has a port outside 1-65535")
    return value


def check_tag(value: str) -> str:
    """Raises ValueError unless ``value`` is an OCI tag."""
    if TAG_RE.fullmatch(value) is None:
        raise ValueError(f"{value[:80]!r} is not an OCI tag")
    return value


def check_digest(value: str) -> str:
    """Raises ValueError unless ``value`` is ``sha256:`` and 64 lower-case hex digits."""
    if DIGEST_RE.fullmatch(value) is None:
        raise ValueError(f"{value[:80]!r} is not a sha256 digest (sha256:<64 lower-case hex>)")
    return value


def store_bundle_path(digest: str) -> str:
    """The bundle path (relative to the lock's directory) of the artifact with ``digest``.

    Raises:
        ValueError: ``digest`` is not a sha256 digest.
    """
    return f"{STORE_DIR}/sha256/{check_digest(digest).removeprefix('sha256:')}"


class OciSource(BaseModel):
    """A lock entry's source: the OCI repository and manifest digest it was pulled from."""

    # defer_build: validators are built on first use, not at import (CLI start-up time):
    # the bundle store is read only when a lock names an OCI source.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

    format: Literal["stockade.source.oci/1"]
    repository: Annotated[str, AfterValidator(check_repository)]
    digest: Annotated[str, AfterValidator(check_digest)]
    tag: Annotated[str, AfterValidator(check_tag)] | None = None

    def reference(self) -> str:
        """``oci://repository@digest``: what ``stockade pull`` takes to fetch it again."""
        return f"oci://{self.repository}@{self.digest}"

    def display(self) -> str:
        """``oci://repository[:tag]@digest``, for people."""
        tag = f":{self.tag}" if self.tag else ""
        return f"oci://{self.repository}{tag}@{self.digest}"
