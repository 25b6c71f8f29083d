"""The state-store port and its backends (docs/design.md §12).

See :mod:`host.store.port` for the contract. ``local`` is the embedded default;
``postgres`` (``pip install 'stockade[postgres]'``) lets many host processes behave as
one. :func:`open_store` turns the ``--store`` / ``STOCKADE_STORE`` value into a backend.
:mod:`host.store.watch` notices a newer lock generation accepted by another process
(``Host.follow_generations``, :mod:`host.call.reload`).

Example::

    store = open_store("postgresql://stockade:…@db.internal/stockade")   # PostgresStore
"""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING

from host.errors import StoreUnavailable
from host.store.local import LocalStore
from host.store.port import (
    ApprovalPort,
    AuditSink,
    GrantPort,
    LockGenerationPort,
    RateLimitPort,
    StateStore,
)

if TYPE_CHECKING:
    from host.store.postgres import PostgresStore

__all__ = [
    "ApprovalPort",
    "AuditSink",
    "GrantPort",
    "LocalStore",
    "LockGenerationPort",
    "RateLimitPort",
    "StateStore",
    "dsn_has_password",
    "is_postgres_spec",
    "open_postgres",
]

_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_spec(spec: str) -> bool:
    """Whether a ``--store`` value names a PostgreSQL database (``postgresql://…``)."""
    return spec.startswith(_SCHEMES)


_SECRET_KEYWORDS = frozenset({"password", "sslpassword"})


def dsn_has_password(spec: str) -> bool:
    """Whether a ``postgresql://`` DSN carries a password (``user:PASSWORD@``, or a
    ``password``/``sslpassword`` parameter, however percent-encoded).

    libpq decodes keywords and values of URI parameters; so does :mod:`urllib.parse`.
    When psycopg is installed its own parser is asked as well, so nothing libpq would
    read as a password slips past.
    """
    if not is_postgres_spec(spec):
        return False
    parts = urllib.parse.urlsplit(spec)
    netloc_userinfo = parts.netloc.rpartition("@")[0]
    if ":" in netloc_userinfo:
        return True
    query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    if _SECRET_KEYWORDS & set(query):
        return True
    try:
        from psycopg import ProgrammingError  # noqa: PLC0415 - optional dependency
        from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415
    except ImportError:
        return False
    try:
        parsed = conninfo_to_dict(spec)
    except ProgrammingError:  # a DSN libpq cannot parse is refused when it is opened
        return False
    return bool(_SECRET_KEYWORDS & {key for key, value in parsed.items() if value is not None})


def open_postgres(dsn: str, **options: object) -> PostgresStore:
    """Open a :class:`~host.store.postgres.PostgresStore` (imports psycopg lazily).

    Raises:
        StoreUnavailable: psycopg is not installed, or the store cannot be opened.
    """
    try:
        from host.store.postgres import PostgresStore  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise StoreUnavailable(
            f"the postgres store needs psycopg 3 ({exc.name} is not installed)",
            hint="pip install 'stockade[postgres]'",
        ) from None
    return PostgresStore(dsn, **options)  # type: ignore[arg-type]  # options are PostgresStore's keywords
