"""The scope port of a command's store, shared by ``stockade scopes`` and ``policy explain``."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from host.errors import AuditUnavailable, ScopeInvalid
from sdk.commands._common import approver_options, audit_path, host_config, open_store_spec, state_dir


def approver_keys(args: argparse.Namespace) -> dict[str, Any]:
    """The config file's approver key and trusted approver keys (PostgresStore options)."""
    settings = getattr(args, "host_file", None)
    return approver_options(
        settings.approver_key if settings is not None else None,
        settings.trusted_approver_keys if settings is not None else None,
    )


@contextmanager
def scopes(args: argparse.Namespace, *, write: bool = True) -> Iterator[Any]:
    """The scope port: the state dir's book (records go to the audit log when no host
    holds it, else to the book's journal for the host; reads open no log), or a
    PostgreSQL store's."""
    if args.store in (None, "local"):
        from host.call.open import open_audit
        from host.scopes import LocalScopes

        root = state_dir(args)
        if not write:
            yield LocalScopes(root, audit=None)
            return
        try:
            audit = open_audit(audit_path(args), host_config(args, root))
        except AuditUnavailable:  # a running host holds the log: it appends the records
            audit = None
        try:
            yield LocalScopes(root, audit=audit)
        finally:
            if audit is not None:
                audit.close()
        return
    with open_store_spec(args.store, **approver_keys(args)) as store:
        yield store.scopes


def covering(args: argparse.Namespace, tool: str, version: str) -> list[dict[str, Any]]:
    """The active scopes of ``args.project``/``args.subject`` naming exactly (tool, version),
    with what is left (for ``policy explain``); empty when the store cannot be read."""
    try:
        with scopes(args, write=False) as port:
            states = port.entries()
    except (ScopeInvalid, OSError):
        return []
    now = time.time()
    found = []
    for s in states:
        scope = s.signed.scope
        entry = scope.tool_entry(tool, version)
        if entry is None or (scope.principal.project, scope.principal.subject) != (
            args.project,
            args.subject,
        ):
            continue
        found.append(
            {
                "id": scope.id,
                "job": scope.job,
                "status": s.status(now),
                "remaining": s.remaining(tool, version),
                "not_after": scope.not_after,
                "session": scope.session,
            }
        )
    return found
