"""host.runtime._calltype: the cached ``call`` type is what a call uses, and the private
wasmtime-py methods it relies on are guarded (a missing one costs speed, not loads)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from wasmtime import component as wc

from host.config import HostConfig
from host.runtime import Runtime
from host.runtime._calltype import CallType
from tests.support import wat


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    runtime = Runtime(HostConfig(state_dir=tmp_path_factory.mktemp("state")))
    yield runtime
    runtime.close()


def test_a_call_uses_the_cached_type_not_wasmtimes_query(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = rt.load(wat.echo_component(), sha256=wat.sha256(wat.echo_component()))
    queried: list[object] = []

    def type_query(self: wc.Func, store: object) -> Any:
        queried.append(store)
        raise AssertionError("Func.type was queried: the cached CallType was not used")

    monkeypatch.setattr(wc.Func, "type", type_query)
    result = wat.run_module(rt, wat.echo_component(), input_json='{"a":1}')
    assert result.output == '{"a":1}'  # the echo ran ...
    assert queried == []  # ... without asking wasmtime for the type
    assert loaded.call_type.result._cases() is loaded.call_type.result._cases()  # pinned list


def test_type_without_private_helpers_is_left_unpinned() -> None:
    result = object()  # a result type of a wasmtime-py without _cases/_tagged
    call_type = CallType(SimpleNamespace(params=[("tool", "s"), ("input", "s")], result=result))  # type: ignore[arg-type]
    assert call_type.result is result and call_type.params == [("tool", "s"), ("input", "s")]


def test_func_that_cannot_be_shadowed_is_returned_unchanged() -> None:
    call_type = CallType(SimpleNamespace(params=[], result=object()))  # type: ignore[arg-type]

    class SlottedFunc:
        __slots__ = ()

        def type(self, store: object) -> str:
            return "own"

    func = SlottedFunc()
    assert call_type.bind(func) is func  # type: ignore[arg-type]
    assert func.type(None) == "own"
    bare = object()
    assert call_type.bind(bare) is bare  # type: ignore[arg-type]
