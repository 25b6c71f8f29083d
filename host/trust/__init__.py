"""Trust: what the host believes about a lock, checked before anything runs.

- :mod:`host.trust.lock` verifies a lock file (digests, signatures, manifests) into a
  :class:`~host.trust.lock.LoadedLock`;
- :mod:`host.trust.lockstate` moves the accepted lock state forward only (rollback, fork
  and package downgrade refused);
- :mod:`host.trust.bundlestore` reads the bundles a lock names, from a directory or an
  OCI store;
- :mod:`host.trust.registry` is the frozen registry of every tool of one generation.

This ``__init__`` imports nothing.
"""
