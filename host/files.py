"""Public file primitives for callers outside ``host`` (the SDK, host apps' tooling).

The implementation and its contracts live in :mod:`host._files`; this module is the
stable import path (``sdk`` never reaches into ``host._*`` modules, docs/design.md §1):

- :func:`read_regular` / :func:`open_regular`: bounded, non-blocking reads of a regular
  file, refusing FIFOs, devices and directories (and symlinks with ``nofollow=True``),
  raising the caller's ``StockadeError`` class;
- :func:`atomic_write`: temp file, fsync, ``os.replace``, directory fsync;
- :func:`create_exclusive`: write-then-link, never replacing an existing file;
- :func:`replace_dir`: swap a complete directory into place (bundles, toolchains);
- :func:`fsync_dir`, :func:`interprocess_lock`.

Example::

    from host.files import atomic_write, read_regular
    data = read_regular(path, 1 << 20, what="lock", error=LockInvalid)
    atomic_write(path, data, mode=0o644)
"""

from __future__ import annotations

from host._files import (
    atomic_write,
    create_exclusive,
    fsync_dir,
    interprocess_lock,
    open_regular,
    read_regular,
    replace_dir,
)

__all__ = [
    "atomic_write",
    "create_exclusive",
    "fsync_dir",
    "interprocess_lock",
    "open_regular",
    "read_regular",
    "replace_dir",
]
