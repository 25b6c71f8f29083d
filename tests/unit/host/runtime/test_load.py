"""Loading several components: parallel compilation, progress, errors in input order."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from host.config import HostConfig
from host.errors import ComponentRefused, DigestMismatch
from host.runtime import ProgressEvent, Runtime
from tests.support import wat


def _items() -> list[tuple[str, bytes, str]]:
    modules = {
        "echo": wat.echo_component(),
        "counter": wat.counter_component(),
        "logging": wat.logging_component(),
        "secret": wat.secret_component(),
    }
    return [(name, module, wat.sha256(module)) for name, module in modules.items()]


def test_load_many_compiles_in_parallel_and_reports_progress(tmp_path: Path) -> None:
    events: list[ProgressEvent] = []
    threads: set[str] = set()

    def progress(event: ProgressEvent) -> None:
        events.append(event)
        threads.add(threading.current_thread().name)

    with Runtime(HostConfig(state_dir=tmp_path)) as rt:
        loaded = rt.load_many(_items(), progress=progress)
        assert [c.name for c in loaded] == ["echo", "counter", "logging", "secret"]
        assert wat.run_module(rt, wat.counter_component()).output == "1"
    compiling = sorted(e.name for e in events if e.stage == "compiling")
    compiled = [e for e in events if e.stage == "compiled"]
    assert compiling == ["counter", "echo", "logging", "secret"]
    assert sorted(e.done for e in compiled) == [1, 2, 3, 4]
    assert all(e.total == 4 for e in events)
    assert all(name.startswith("stockade-compile") for name in threads)


def test_second_runtime_reports_cached(tmp_path: Path) -> None:
    with Runtime(HostConfig(state_dir=tmp_path)) as rt:
        rt.load_many(_items())
    events: list[ProgressEvent] = []
    with Runtime(HostConfig(state_dir=tmp_path)) as rt:
        rt.load_many(_items(), progress=events.append)
        assert rt.stats().compiled == 0
        assert rt.stats().deserialized == 4
    assert {e.stage for e in events} == {"cached"}
    assert sorted(e.done for e in events) == [1, 2, 3, 4]


def test_duplicate_items_compile_once(tmp_path: Path) -> None:
    echo = wat.echo_component()
    items = [(f"echo-{i}", echo, wat.sha256(echo)) for i in range(6)]
    with Runtime(HostConfig(state_dir=tmp_path)) as rt:
        loaded = rt.load_many(items)
        assert rt.stats().compiled == 1
    assert len({id(c.component) for c in loaded}) == 1
    assert [c.name for c in loaded] == [f"echo-{i}" for i in range(6)]


def test_first_failure_in_input_order_raised_after_all_finish(tmp_path: Path) -> None:
    items = _items()
    items.insert(1, ("tampered", wat.echo_component(), "0" * 64))
    items.insert(3, ("core", wat.core_module(), wat.sha256(wat.core_module())))
    with Runtime(HostConfig(state_dir=tmp_path)) as rt:
        with pytest.raises(DigestMismatch, match="tampered"):
            rt.load_many(items)
        with pytest.raises(ComponentRefused):
            rt.load_many(items[2:])
        # the good items were still compiled and are usable
        assert rt.stats().compiled == 4


def test_load_many_of_nothing(tmp_path: Path) -> None:
    with Runtime(HostConfig(state_dir=tmp_path)) as rt:
        assert rt.load_many([]) == []
