"""The ``--allow-loopback`` remap's gates: explicit hosts, loopback targets only, and every
other host kept to the public-address rule although the host allows loopback."""

from __future__ import annotations

import pytest

from sdk._loopback import LoopbackRemap


@pytest.mark.parametrize(
    "spec",
    ["api.example.com=10.0.0.1:8080", "api.example.com=8.8.8.8:443", "api.example.com=127.0.0.1",
     "api.example.com", "=127.0.0.1:80", "api.example.com=127.0.0.1:0", "api.example.com=localhost:80"],
    ids=["private-target", "public-target", "no-port", "no-target", "no-host", "port-zero", "name-target"],
)  # fmt: skip
def test_remap_to_anything_but_a_loopback_address_and_port_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="--allow-loopback"):
        LoopbackRemap.parse([spec])


def test_non_remapped_host_resolving_to_loopback_stays_refused() -> None:
    remap = LoopbackRemap.parse(["API.Example.com.=127.0.0.1:8443", "other.example.com=[::1]:9000"])
    resolve = remap.resolver(lambda host: ["127.0.0.1"] if host == "rebind.example.com" else ["93.184.215.14"])
    assert resolve("api.example.com") == ["127.77.0.1"]  # a token, connected to 127.0.0.1:8443
    assert resolve("other.example.com") == ["127.77.0.2"]
    assert resolve("public.example.com") == ["93.184.215.14"]
    with pytest.raises(OSError, match="non-public address and is not remapped"):
        resolve("rebind.example.com")
    assert remap.describe() == ["api.example.com → 127.0.0.1:8443", "other.example.com → ::1:9000"]


def test_dev_refuses_a_non_loopback_remap_as_a_usage_error(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from sdk.cli import main  # noqa: PLC0415

    (tmp_path / "manifest.json").write_text("{}")
    status = main(["dev", "x.y", "--bundle", str(tmp_path), "--allow-loopback", "api.example.com=10.0.0.1:80"])
    assert status == 2
    assert "is not a loopback address" in capsys.readouterr().err
