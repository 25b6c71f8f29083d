"""For reviewers and operators: capability reports and lock diffs (:mod:`.report`), MCP sources
(:mod:`.mcp`), host-file commands (:mod:`.command`), and editing the lock (:mod:`.lockfile`).

Empty on purpose: ``stockade --help`` imports no submodule; import the one you use.
"""
