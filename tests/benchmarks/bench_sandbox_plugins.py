"""Rows (d) and (e) of ``bench_sandbox.py``: echo through a componentize-py and a
componentize-js plugin, built (cached) with ``tests.support.plugins``.

Imported by ``bench_sandbox.py`` when present. The first run builds both plugins
(~10–15 s each) and compiles them (~8–16 s each); later runs use the caches.
"""

from __future__ import annotations

from collections.abc import Callable

from host.egress.port import DenyAllEgress
from host.runtime import Runtime, SandboxLimits
from tests.support.plugins import build_test_plugin

LIMITS = SandboxLimits(fuel=2_000_000_000, memory_bytes=128 << 20, timeout_ms=10_000, max_log_bytes=65_536)
INPUT = '{"message":"hello, sandbox"}'


def rows(rt: Runtime) -> list[tuple[str, Callable[[], object]]]:
    """(d) Python plugin echo, (e) JavaScript plugin echo: fresh instance per call."""
    out: list[tuple[str, Callable[[], object]]] = []
    for label, name, tool in (("(d)  Python plugin echo (componentize-py)", "echo_py", "echo.echo"),
                              ("(e)  JavaScript plugin echo (componentize-js)", "echo_js", "echojs.echo")):
        build = build_test_plugin(name)
        component = rt.load(build.module_path.read_bytes(), sha256=build.module_sha256, name=name)

        def call(component: object = component, tool: str = tool) -> object:
            result = rt.run(component, tool=tool, input_json=INPUT, limits=LIMITS,  # type: ignore[arg-type]
                            egress=DenyAllEgress(), secret_available=lambda _n: False)
            if result.output != INPUT:
                raise RuntimeError(f"echo returned {result.output!r}")
            return result

        out.append((label, call))
    return out
