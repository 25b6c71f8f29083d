"""Formats: the versioned documents a lock pins and an operator writes, parsed strictly.

- :mod:`host.formats.manifest` — ``stockade.manifest/1``, a package's tools and limits;
- :mod:`host.formats.schema` — the bounded JSON Schema subset of package tools;
- :mod:`host.formats.schemaprofile` — the external profile of pinned MCP tools' schemas;
- :mod:`host.formats.mcppin` — ``stockade.mcp/1`` declarations and pins of MCP sources;
- :mod:`host.formats.hostfile` — ``stockade.host/1``, the operator's host config file.

Each model refuses unknown fields; a module here reads no policy and runs nothing. This
``__init__`` imports nothing.
"""
