"""The state-store port and its backends (issue 11, DESIGN §12).

See :mod:`host.store.port` for the contract. ``local`` is the embedded default;
``postgres`` (``pip install 'stockade[postgres]'``) lets many host processes behave as
one. :func:`open_store` turns the ``--store`` / ``STOCKADE_STORE`` value into a backend.
:mod:`host.store.watch` notices a newer lock generation accepted by another process
(``Host.follow_generations``, :mod:`host.reload`).

Example::

    store = open_store("postgresql://stockade:…@db.internal/stockade")   # PostgresStore
"""

from __future__ import annotations

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
    "is_postgres_spec",
    "open_postgres",
]

_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_spec(spec: str) -> bool:
    """Whether a ``--store`` value names a PostgreSQL database (``postgresql://…``)."""
    return spec.startswith(_SCHEMES)


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
