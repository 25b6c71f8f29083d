"""Observability off (the default): no OpenTelemetry import, no span, records unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from host import observe
from tests.support.hosts import make_host

REPO = Path(__file__).resolve().parents[2]


def test_host_without_enable_imports_no_opentelemetry(tmp_path: Path) -> None:
    """A whole call runs with no OpenTelemetry module loaded (the ``otel`` extra is optional)."""
    script = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from pathlib import Path
from tests.support.hosts import make_host
fx = make_host(Path({str(tmp_path)!r}))
assert fx.host.call(fx.request()).ok
fx.host.close()
print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_hooks_off_are_one_shared_object_and_records_carry_no_trace_id(tmp_path: Path) -> None:
    assert not observe.enabled()
    assert observe.span("stockade.call") is observe.span("stockade.sandbox") is observe.OFF
    port = object()
    assert observe.egress(port, port) is port
    assert observe.trace_id() is None
    fx = make_host(tmp_path)
    assert fx.host.call(fx.request()).ok
    fx.host.close()
    records = [json.loads(line) for line in fx.audit_path.read_text().splitlines()]
    assert [r for r in records if "trace_id" in r] == []
