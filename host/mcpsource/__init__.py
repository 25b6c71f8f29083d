"""External MCP servers as a governed tool source (docs/design.md §12).

- :mod:`host.formats.mcppin`: the ``stockade.mcp/1`` declaration, the
  ``stockade.mcp-pin/1`` pin, the lock entry and their verification;
- :mod:`host.mcpsource.stdio`: the bounded JSON-RPC client and the isolated spawn;
- :mod:`host.mcpsource.http`: a Streamable HTTP session (the official SDK's client, needs
  the ``mcp`` extra) whose bytes go through :mod:`host.mcpsource.egress` (the declared
  URL as allowlist, SSRF guard, pinned addresses, host-injected credential headers);
- :mod:`host.mcpsource.rpc`: what both share (cancellation, the connection protocol);
- :mod:`host.mcpsource.source`: one source at run time (rug-pull check, calls, BUSY,
  cancellation, restarts).

The :class:`host.Host` is still the one entry point: a pinned tool is an ordinary
registry entry, and a call to it runs the whole pipeline of docs/design.md §6.
"""
