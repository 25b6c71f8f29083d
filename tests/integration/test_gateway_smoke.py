from __future__ import annotations

from pathlib import Path

from tests.support.hosts import make_host


def test_echo_call_end_to_end(tmp_path: Path) -> None:
    fx = make_host(tmp_path)
    with fx.host:
        result = fx.host.call(fx.request())
    assert result.ok, result.error
    assert result.output == {"message": "hi"}
    assert result.audit_id
