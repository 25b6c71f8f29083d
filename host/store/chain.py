"""Export and verify the audit chains held in a PostgreSQL store.

A chain in the database is the same sequence of canonical JSON lines as an audit log
file, so exporting is writing each line plus ``"\\n"`` in ``seq`` order, and the export
verifies with ``stockade log verify`` (:func:`host.audit.log.verify`).

Verifying in place (:func:`verify_chain`) streams the chain through the same verifier and
then compares the result with the chain's head row: removing records from the end of the
table (which would leave a valid shorter chain) is detected unless the head row was
rewritten too. Against that, the report's ``anchor`` (the newest signed checkpoint seen)
is what to keep outside the database and pass back as ``expected_head``.

Example::

    with open("audit.jsonl", "wb") as out:
        export_chain(store, "project:p", out)
    report = verify_chain(store, "project:p")
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from host.audit.log import GENESIS, VerifyReport, verify
from host.errors import StoreUnavailable

if TYPE_CHECKING:
    from host.store.postgres import PostgresStore

__all__ = ["export_chain", "pick_chain", "verify_chain"]


def pick_chain(store: PostgresStore, chain: str | None) -> str:
    """The chain to export or verify: ``chain`` if given (it must exist), else the only one.

    Raises:
        StoreUnavailable: no such chain, or several and none named (the message lists them).
    """
    names = [name for name, _, _ in store.chains()]
    if chain is not None:
        if chain not in names:
            raise StoreUnavailable(f"the store has no audit chain {chain!r}", hint=_choices(names))
        return chain
    if len(names) == 1:
        return names[0]
    what = "several audit chains; name one with --chain" if names else "no audit chain"
    raise StoreUnavailable(f"the store holds {what}", hint=_choices(names))


def _choices(names: list[str]) -> str:
    shown = ", ".join(names[:20]) + (" …" if len(names) > 20 else "")
    return f"Chains: {shown}" if names else "Nothing has been audited through this store yet."


def export_chain(store: PostgresStore, chain: str, out: IO[bytes]) -> int:
    """Write ``chain`` as an audit log file to ``out``; return the number of records.

    Raises:
        StoreUnavailable: the database could not be read.
    """
    count = 0
    for line in store.lines(chain):
        out.write(line.encode("utf-8") + b"\n")
        count += 1
    return count


def verify_chain(
    store: PostgresStore, chain: str, *, expected_head: str | None = None, **options: Any
) -> VerifyReport:
    """Verify ``chain`` in place: every record, then the head row.

    Args:
        store: the store.
        chain: the chain's name (``project:<name>``, ``host`` or ``all``).
        expected_head: a record hash known to be in the chain.
        options: passed to :func:`host.audit.log.verify` (e.g. ``keys``).

    Raises:
        StoreUnavailable: the database could not be read.

    Returns:
        The report of :func:`host.audit.log.verify`, not ok also when the records end
        elsewhere than the head row says.
    """
    heads = {name: (seq, head) for name, seq, head in store.chains()}
    if chain not in heads:
        raise StoreUnavailable(f"the store has no audit chain {chain!r}")
    fd, name = tempfile.mkstemp(prefix="stockade-chain-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "wb") as out:
            export_chain(store, chain, out)
        report = verify(Path(name), expected_head=expected_head, **options)
    finally:
        os.unlink(name)
    seq, head = heads[chain]
    if report.ok and (report.records, report.head) != (seq, head):
        # The head row was read first: records appended since can only make the chain longer.
        if report.records < seq or (report.records == seq and report.head != head):
            why = (
                f"the chain's head row names record {seq} ({head[:16]}…) but the records end at "
                f"{report.records} ({(report.head or GENESIS)[:16]}…): records were removed or rewritten"
            )
            return dataclasses.replace(report, ok=False, first_broken=report.records + 1, reason=why)
    return report
