"""Adapters from the frozen registry to model APIs (OpenAI, Anthropic, MCP)."""
