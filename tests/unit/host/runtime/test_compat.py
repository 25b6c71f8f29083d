"""The string repairs of host.runtime._compat: installed, and the same values as wasmtime-py's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from wasmtime.component import _types as wasmtime_types

from host.config import HostConfig
from host.egress.port import HttpFailure, HttpRequest, HttpResponse
from host.runtime import Runtime, _compat
from tests.support import wat


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    runtime = Runtime(HostConfig(state_dir=tmp_path_factory.mktemp("state")))
    yield runtime
    runtime.close()


def test_string_converters_are_replaced_on_wasmtime_50() -> None:
    assert _compat.FAST_STRINGS
    assert wasmtime_types.String.convert_to_c is _compat._lower_string
    assert wasmtime_types.String.convert_from_c is _compat._lift_string


@pytest.mark.parametrize(
    "text", ["", "a", "ünïcödé ✓ 🦀", "\x00nul\x00", "x" * (1 << 20)], ids=["empty", "one", "unicode", "nul", "1MiB"]
)
def test_strings_round_trip_unchanged(rt: Runtime, text: str) -> None:
    assert wat.run_module(rt, wat.echo_component(), input_json=text).output == text


@pytest.mark.parametrize(
    "body", [b"plain ascii", bytes(range(256)), b""], ids=["ascii-as-utf8-bytes", "every-byte", "empty"]
)
def test_response_body_lowered_byte_for_byte(rt: Runtime, body: bytes) -> None:
    class Port:
        def send(self, request: HttpRequest) -> HttpResponse | HttpFailure:
            return HttpResponse(200, (), body)

    output = wat.run_module(rt, wat.http_component(), input_json="https://api.example/v1", egress=Port()).output
    assert output == "ok:200:" + body.decode("latin-1")


def test_lowering_a_non_string_still_refused() -> None:
    with pytest.raises(TypeError, match="expected string type"):
        _compat._lower_string(None, None, 42, None)
