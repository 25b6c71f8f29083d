"""The workspace file tools (``fs.*``) in a trace: one host-tool span, and no file
contents, edit text or path in any exported span or metric."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.sdk.metrics.export import MetricsData

from tests.support.otel import Otel, otel
from tests.support.workspace import make_fs_host

__all__ = ["otel"]

CONTENT = "file-contents-canary-3391"
NEW_TEXT = "edit-text-canary-5512"


def _metrics_text(data: MetricsData | None) -> str:
    return "" if data is None else data.to_json()


def test_fs_calls_are_host_tool_spans_without_contents(tmp_path: Path, otel: Otel) -> None:
    fs = make_fs_host(tmp_path)
    (fs.ws / "notes-secretname.txt").write_text(f"one {CONTENT}\n")
    try:
        read = fs.read(path="notes-secretname.txt")
        assert read.ok and CONTENT in str(read.output)
        assert fs.edit(path="notes-secretname.txt", old_text=CONTENT, new_text=NEW_TEXT).ok
    finally:
        fs.host.close()
    assert NEW_TEXT in (fs.ws / "notes-secretname.txt").read_text()
    spans = otel.finished()
    tools = [s for s in spans if s.name == "stockade.host_tool"]
    assert [s.attributes["stockade.tool"] for s in tools] == ["fs.read_file", "fs.edit_file"]
    assert "stockade.sandbox" not in {s.name for s in spans}
    exported = "\n".join(s.to_json() for s in spans) + _metrics_text(otel.metrics.get_metrics_data())
    assert CONTENT not in exported and NEW_TEXT not in exported and "notes-secretname" not in exported
