"""Components the host must refuse at load time, before anything runs (docs/design.md §2)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from host.config import HostConfig
from host.errors import ComponentRefused, DigestMismatch
from host.runtime import Runtime
from tests.support import wat


@pytest.fixture
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    runtime = Runtime(HostConfig(state_dir=tmp_path_factory.mktemp("state")))
    yield runtime
    runtime.close()


def _load(rt: Runtime, module: bytes) -> object:
    return rt.load(module, sha256=wat.sha256(module), name="suspect")


def _artifacts(rt: Runtime) -> list[str]:
    directory = rt._config.artifact_dir
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_core_module_refused(rt: Runtime) -> None:
    with pytest.raises(ComponentRefused, match="core WebAssembly module, not a component") as info:
        _load(rt, wat.core_module())
    assert info.value.code == "COMPONENT_REFUSED"
    assert rt.stats().compiled == 0


@pytest.mark.parametrize(
    ("module", "message"),
    [
        (b"", "not a WebAssembly binary"),
        (b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 64, "not a WebAssembly binary"),
        (b"(component)", "not a WebAssembly binary"),
        (b"\x00asm\x0e\x00\x01\x00", "unsupported WebAssembly version/layer 0e000100"),
        (b"\x00asm\x0d\x00\x01\x00\x01\xff\xff\xff\xff\x0f", "malformed component binary"),
    ],
    ids=["empty", "elf", "text-format", "future-layer", "section-past-end"],
)
def test_non_component_bytes_refused(rt: Runtime, module: bytes, message: str) -> None:
    with pytest.raises(ComponentRefused, match=message):
        _load(rt, module)
    assert rt.stats().compiled == 0


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("returns-string", r"found func\(tool: string, input: string\) -> string"),
        ("one-param", r"found func\(input: string\)"),
        ("param-names", r"found func\(name: string, input: string\)"),
        ("error-cases", r"variant \{ bad-input: string, failed: string \}"),
        ("missing", "does not export `call`"),
    ],
    ids=lambda v: v if " " not in v and "\\" not in v else "",
)
def test_wrong_call_type_refused(rt: Runtime, kind: str, message: str) -> None:
    with pytest.raises(ComponentRefused, match=message) as info:
        _load(rt, wat.wrong_call_component(kind))
    assert info.value.details["export_name"] == "call"
    assert _artifacts(rt) == []  # a refused component is never cached


_FUNC = "(func (param \"x\" string))"


@pytest.mark.parametrize(
    ("decl", "named"),
    [
        (f'(import "wasi:http/outgoing-handler@0.2.0" (instance (export "handle" {_FUNC})))',
         "wasi:http/outgoing-handler@0.2.0"),
        (f'(import "wasi:http/types@0.2.9" (instance (export "f" {_FUNC})))', "wasi:http/types@0.2.9"),
        (f'(import "evil:pkg/iface@1.0.0" (instance (export "f" {_FUNC})))', "evil:pkg/iface@1.0.0"),
        (f'(import "stockade:plugin/host@2.0.0" (instance (export "log" {_FUNC})))',
         "stockade:plugin/host@2.0.0"),
        (f'(import "stockade:plugin/host@0.9.0" (instance (export "log" {_FUNC})))',
         "stockade:plugin/host@0.9.0"),
        (f'(import "stockade:plugin/admin@1.0.0" (instance (export "f" {_FUNC})))',
         "stockade:plugin/admin@1.0.0"),
        (f'(import "wasi:io/streams@0.3.0" (instance (export "f" {_FUNC})))', "wasi:io/streams@0.3.0"),
        (f'(import "wasi:keyvalue/store@0.2.0" (instance (export "f" {_FUNC})))',
         "wasi:keyvalue/store@0.2.0"),
        (f'(import "wasi:cli/environment" (instance (export "f" {_FUNC})))', "wasi:cli/environment"),
        (f'(import "log" {_FUNC})', "log"),
        ('(import "wasi:cli/environment@0.2.0" (func (result (list string))))',
         "wasi:cli/environment@0.2.0"),
        (f'(import "stockade:plugin/host@1.1.0" (instance (export "spawn" {_FUNC})))',
         "stockade:plugin/host@1.1.0#spawn"),
        ('(import "stockade:plugin/host@1.1.0" (instance (export "log" (func (param "level" string) '
         '(param "message" string)))))', "stockade:plugin/host@1.1.0#log"),
        ('(import "stockade:plugin/host@1.1.0" (instance (export "secret-available" '
         '(func (param "name" string) (result string)))))', "stockade:plugin/host@1.1.0#secret-available"),
        (f'(import "stockade:plugin/types@1.1.0" (instance (export "log" {_FUNC})))',
         "stockade:plugin/types@1.1.0#log"),
        ('(import "stockade:plugin/types@1.1.0" (instance (type $t (enum "a")) (export "log-level" '
         '(type (eq $t)))))', "stockade:plugin/types@1.1.0#log-level"),
    ],
    ids=[
        "wasi-http-handler", "wasi-http-types", "unknown-package", "host-major-2", "host-major-0",
        "other-stockade-interface", "wasi-io-0.3", "wasi-keyvalue", "unversioned-wasi", "bare-function",
        "wasi-as-function", "unknown-host-function", "host-log-wrong-type",
        "host-secret-returns-value", "function-in-types-instance", "types-instance-wrong-enum",
    ],
)
def test_forbidden_import_refused_and_named(rt: Runtime, decl: str, named: str) -> None:
    with pytest.raises(ComponentRefused) as info:
        _load(rt, wat.import_component(decl))
    assert repr(named) in info.value.message
    assert info.value.details["import_name"] == named
    assert _artifacts(rt) == []


@pytest.mark.parametrize(
    "decl",
    [
        '(import "wasi:random/random@0.2.0" (instance (export "get-random-u64" (func (result u64)))))',
        '(import "wasi:clocks/monotonic-clock@0.2.3" (instance (export "now" (func (result u64)))))',
        '(import "stockade:plugin/types@1.1.0" (instance (type $t (enum "debug" "info" "warn" "error")) '
        '(export "log-level" (type (eq $t)))))',
    ],
    ids=["wasi-random", "wasi-clocks", "types-instance"],
)
def test_allowed_imports_accepted(rt: Runtime, decl: str) -> None:
    assert wat.run_module(rt, wat.import_component(decl), input_json="fine").output == "fine"


def test_host_minor_version_is_linked(rt: Runtime) -> None:
    module = wat.guest(
        "(call $log (i32.const 1) {S:m}) (call $ok {S:m})",
        host=["log"],
        host_interface="stockade:plugin/host@1.3.0",
        strings={"m": "hello from 1.3"},
    )
    result = wat.run_module(rt, module)
    assert result.output == "hello from 1.3"
    assert [line.text for line in result.log] == ["hello from 1.3"]



_V1_0_HTTP = (
    '(type $h (record (field "name" string) (field "value" string))) (export "header" (type $hh (eq $h))) '
    '(type $rq (record (field "method" string) (field "url" string) (field "headers" (list $hh)) '
    '(field "body" (option (list u8))) (field "timeout-ms" (option u32)))) (export "request" (type $r (eq $rq))) '
)


@pytest.mark.parametrize(
    "decl",
    [
        f'(import "stockade:plugin/host@1.0.0" (instance (export "log" {_FUNC})))',
        f'(import "stockade:plugin/types@1.0.0" (instance {_V1_0_HTTP}))',
        f'(import "stockade:plugin/host@1.0.3" (instance {_V1_0_HTTP}))',
    ],
    ids=["host-1.0.0", "types-1.0.0", "host-1.0.3"],
)
def test_component_built_for_wit_1_0_refused_with_rebuild_hint(rt: Runtime, decl: str) -> None:
    # 1.0.0 carried headers as list<header> and bodies as list<u8>, which wasmtime-py
    # lifts element by element in Python outside every limit.
    with pytest.raises(ComponentRefused, match=r"stockade:plugin@1\.0\.0") as info:
        _load(rt, wat.import_component(decl))
    assert info.value.code == "COMPONENT_REFUSED"
    assert "stockade build" in info.value.hint
    assert info.value.details["import_name"].startswith("stockade:plugin/")
    assert _artifacts(rt) == []

@pytest.mark.parametrize(
    "pinned",
    ["0" * 64, "not-hex", "", wat.sha256(b"something else"), "é" * 64, wat.sha256(wat.echo_component()) + "00"],
    ids=["zeros", "garbage", "empty", "other-module", "non-ascii", "right-prefix-too-long"],
)
def test_digest_mismatch_refused_before_compiling(rt: Runtime, pinned: str) -> None:
    module = wat.echo_component()
    with pytest.raises(DigestMismatch, match="does not match its pinned sha256") as info:
        rt.load(module, sha256=pinned, name="tracker")
    assert info.value.code == "DIGEST_MISMATCH"
    assert info.value.details["actual"] == wat.sha256(module)
    assert rt.stats().compiled == 0
    assert _artifacts(rt) == []


def test_digest_accepts_uppercase_hex(rt: Runtime) -> None:
    module = wat.echo_component()
    loaded = rt.load(module, sha256=wat.sha256(module).upper())
    assert loaded.sha256 == wat.sha256(module)


def test_component_of_another_runtime_refused(rt: Runtime, tmp_path_factory: pytest.TempPathFactory) -> None:
    with Runtime(HostConfig(state_dir=tmp_path_factory.mktemp("other"))) as other:
        foreign = other.load(wat.echo_component(), sha256=wat.sha256(wat.echo_component()))
    rt.load(wat.echo_component(), sha256=wat.sha256(wat.echo_component()))
    with pytest.raises(ValueError, match="not loaded by this runtime"):
        rt.run(foreign, tool="t", input_json="{}", limits=wat.DEFAULT_LIMITS,
               egress=wat.DenyAllEgress(), secret_available=lambda n: False)
