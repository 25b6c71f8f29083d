"""``stockade store migrate``: create or upgrade the schema of a PostgreSQL state store.

Run it once before the first host starts, and after upgrading Stockade. Each migration is
applied in its own transaction under an advisory lock, so two operators racing apply each
step once. A database whose schema is newer than this Stockade is refused (a rolled-back
deploy must not write into a schema it does not understand); hosts refuse any schema but
their own and never migrate on their own.

Exit codes: 0 migrated (or already current), 1 refused or unreachable, 2 usage error.
"""

from __future__ import annotations

import argparse
from typing import Any

from host.errors import StoreUnavailable
from sdk.commands._common import EXIT_OK, UsageFailed, add_store_option, print_json


def register(sub: Any) -> None:
    """Add the ``store`` subcommand."""
    parser = sub.add_parser("store", help="PostgreSQL state store tools", description="State store tools.")
    inner = parser.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    migrate = inner.add_parser(
        "migrate",
        help="create or upgrade the schema of a PostgreSQL state store",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store_option(migrate, local=False)
    migrate.add_argument("--json", action="store_true", help="print a JSON report")
    migrate.set_defaults(func=run_migrate)


def run_migrate(args: argparse.Namespace) -> int:
    """Apply pending migrations; 0 done, 1 refused."""
    from host.store import is_postgres_spec

    if not args.store or not is_postgres_spec(args.store):
        raise UsageFailed(
            "STORE_REQUIRED", "name the database: --store postgresql://… (or set STOCKADE_STORE)"
        )
    before, after, shown = _migrate(args.store)
    if args.json:
        print_json({"ok": True, "store": shown, "from_version": before, "to_version": after})
    elif before == after:
        print(f"ok: the store's schema is current (version {after}) at {shown}")
    else:
        print(f"ok: migrated the store's schema from version {before} to {after} at {shown}")
    return EXIT_OK


def _migrate(dsn: str) -> tuple[int, int, str]:
    try:
        from host.store.migrations import migrate_database

        return migrate_database(dsn)
    except ImportError as exc:
        raise StoreUnavailable(
            f"the postgres store needs psycopg 3 ({exc.name} is not installed)",
            hint="pip install 'stockade[postgres]'",
        ) from None
