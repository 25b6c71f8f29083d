"""Secrets: the encrypted store (:mod:`.store`), the master key (:mod:`.masterkey`) and
redaction of staged values (:mod:`.redact`), the layer just above the core modules.

The names of the store module stay importable from here, each imported on first use
(PEP 562) so that importing one submodule does not load the others: ``from host.secrets
import SecretsStore`` keeps working; new code imports from the submodule.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from host.secrets.store import (
        FORMAT,
        MASTER_KEY_ENV,
        MAX_VALUE_BYTES,
        MIN_VALUE_CHARS,
        MasterKey,
        SecretInfo,
        SecretsStore,
        SecretValue,
        check_secret,
        generate_key_file,
    )

__all__ = [
    "FORMAT",
    "MASTER_KEY_ENV",
    "MAX_VALUE_BYTES",
    "MIN_VALUE_CHARS",
    "MasterKey",
    "SecretInfo",
    "SecretValue",
    "SecretsStore",
    "check_secret",
    "generate_key_file",
]


def __getattr__(name: str) -> object:
    """Import a name of the store module on first access (see ``__all__``)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f"{__name__}.store"), name)
    globals()[name] = value
    return value
