"""Audit: the hash-chained log with signed checkpoints (:mod:`.log`) and the Ed25519 key
that signs them (:mod:`.key`).

The names of the log module stay importable from here, each imported on first use
(PEP 562) so that importing the key module does not load the log: ``from host.audit
import AuditLog`` keeps working; new code imports from the submodule.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from host.audit.log import (
        CHECKPOINT_KIND,
        CHECKPOINT_STATEMENT,
        DURABILITY_MODES,
        GENESIS,
        MAX_RECORD_BYTES,
        REDACTED,
        RESERVED_FIELDS,
        AuditLog,
        CheckpointAnchor,
        Durability,
        VerifyReport,
        check_append_args,
        checkpoint_payload,
        checkpoint_reason,
        checkpoint_statement,
        encode_for_append,
        redact_params,
        verify,
    )

__all__ = [
    "CHECKPOINT_KIND",
    "CHECKPOINT_STATEMENT",
    "DURABILITY_MODES",
    "GENESIS",
    "MAX_RECORD_BYTES",
    "REDACTED",
    "RESERVED_FIELDS",
    "AuditLog",
    "CheckpointAnchor",
    "Durability",
    "VerifyReport",
    "check_append_args",
    "checkpoint_payload",
    "checkpoint_reason",
    "checkpoint_statement",
    "encode_for_append",
    "redact_params",
    "verify",
]


def __getattr__(name: str) -> object:
    """Import a name of the log module on first access (see ``__all__``)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f"{__name__}.log"), name)
    globals()[name] = value
    return value
