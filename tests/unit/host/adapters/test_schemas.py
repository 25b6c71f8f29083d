"""Model-facing names: valid per format, unique, deterministic."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from host.adapters.schemas import check_model_names, model_name, resolve_model_name, tool_schemas
from host.errors import ManifestInvalid, ToolNotFound

OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MCP_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


@dataclass(frozen=True)
class _Tool:
    name: str
    version: str = "1.0.0"
    description: str = "d"
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})


def _offered(tools: list[_Tool], fmt: str) -> list[str]:
    schemas = tool_schemas(tools, fmt)  # type: ignore[arg-type]
    return [s["function"]["name"] if fmt == "openai" else s["name"] for s in schemas]


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "mcp"])
def test_tool_names_differing_after_64th_char_are_both_offered(fmt: str) -> None:
    # "p." + 60 a's is 62 chars; as an OpenAI name "p__" + 60 a's + "-x" is 65 chars.
    x, y = _Tool("p." + "a" * 60 + "-x"), _Tool("p." + "a" * 60 + "-y")
    names = _offered([x, y], fmt)
    assert len(set(names)) == 2
    assert resolve_model_name([x, y], fmt, names[0]) == (x.name, "1.0.0")  # type: ignore[arg-type]
    assert resolve_model_name([x, y], fmt, names[1]) == (y.name, "1.0.0")  # type: ignore[arg-type]
    pattern = MCP_NAME if fmt == "mcp" else OPENAI_NAME
    assert all(pattern.match(n) for n in names)


def test_truncated_names_are_deterministic_and_carry_a_digest() -> None:
    x = _Tool("p." + "a" * 60 + "-x")
    first = model_name(x, versioned=False, format="openai")
    assert first == model_name(x, versioned=False, format="openai")
    assert len(first) == 64 and re.search(r"_[0-9a-f]{12}$", first)


def test_versions_that_sanitize_alike_get_distinct_names() -> None:
    a, b = _Tool("echo.say", "1.0.0-a"), _Tool("echo.say", "1.0.0+a")
    for fmt in ("openai", "mcp"):
        names = _offered([a, b], fmt)
        assert len(set(names)) == 2, fmt
        assert [resolve_model_name([a, b], fmt, n)[1] for n in names] == ["1.0.0-a", "1.0.0+a"]  # type: ignore[arg-type]


def test_mcp_names_have_no_at_sign_and_fit_128() -> None:
    tools = [_Tool("tracker.list-issues", "1.2.0"), _Tool("tracker.list-issues", "2.0.0-rc.1+" + "b" * 100)]
    names = _offered(tools, "mcp")
    assert names[0] == "tracker.list-issues_v1.2.0"
    assert all(MCP_NAME.match(n) and "@" not in n for n in names)
    with pytest.raises(ToolNotFound):
        resolve_model_name(tools, "mcp", "tracker.list-issues@1.2.0")


def test_single_version_keeps_the_plain_name() -> None:
    assert _offered([_Tool("echo.say")], "mcp") == ["echo.say"]
    assert _offered([_Tool("echo.say")], "openai") == ["echo__say"]


def test_colliding_names_refused_when_the_registry_is_checked() -> None:
    digest_like = _Tool("a.b", "1.0.0")
    # Two identical identities are the only way to share a name after disambiguation.
    with pytest.raises(ManifestInvalid, match="would both be offered"):
        check_model_names([digest_like, digest_like])
