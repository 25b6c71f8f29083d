"""OCI registries: the distribution client (:mod:`.client`), bundles as artifacts
(:mod:`.artifact`) and registry credentials (:mod:`.creds`).

Empty on purpose: ``stockade --help`` imports no submodule; import the one you use.
"""
