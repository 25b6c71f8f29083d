"""Type descriptions and the load-time shape of accepted components (host.runtime.checks)."""

from __future__ import annotations

from wasmtime import component as wc

from host.runtime.checks import EXPECTED_CALL_TYPE, HOST_FUNCTION_TYPES, check_component, describe_func
from host.runtime.engine import build_engine
from tests.support import wat

ENGINE = build_engine()


def _compile(module: bytes) -> wc.Component:
    return wc.Component(ENGINE, module)


def test_echo_call_type_described_exactly() -> None:
    component = _compile(wat.echo_component())
    call = component.type.exports(ENGINE)["call"].ty
    assert describe_func(call) == EXPECTED_CALL_TYPE


def test_host_function_types_match_the_wit() -> None:
    component = _compile(wat.guest("(call $done)", host=["log", "secret-available", "http-request"]))
    host = component.type.imports(ENGINE)["stockade:plugin/host@1.1.0"].ty
    for name, expected in HOST_FUNCTION_TYPES.items():
        assert describe_func(host.exports(ENGINE)[name].ty) == expected


def test_shape_records_wasi_and_host_functions() -> None:
    plain = check_component(_compile(wat.echo_component()), ENGINE)
    assert not plain.uses_wasi
    assert plain.host_functions == frozenset()
    logging = check_component(_compile(wat.logging_component()), ENGINE)
    assert logging.host_functions == frozenset({"log"})
    environment = check_component(_compile(wat.environment_component()), ENGINE)
    assert environment.uses_wasi


def test_checks_do_not_instantiate() -> None:
    # A component whose start function loops forever is checked without running it
    # (the store would need fuel; none exists here).
    component = _compile(wat.start_loop_component())
    assert check_component(component, ENGINE).host_functions == frozenset()
