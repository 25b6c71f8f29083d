"""The operator's host config file: strict, relative to itself, found in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from host.errors import ConfigInvalid
from host.formats.hostfile import FILE_NAME, find_host_file, load_host_file, render_host_file


def test_rendered_file_loads_back_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ops" / FILE_NAME
    path.parent.mkdir()
    path.write_text(render_host_file(state_dir="state", lock="../stockade.lock", trusted_keys="keys.json",
                                     require_signatures=True, audit="/var/log/stockade.log"))
    loaded = load_host_file(path)
    assert loaded.state_dir == path.parent.resolve() / "state"
    assert loaded.lock == path.parent.resolve() / "../stockade.lock"
    assert loaded.trusted_keys == path.parent.resolve() / "keys.json"
    assert loaded.audit == Path("/var/log/stockade.log")
    assert loaded.require_signatures is True and loaded.store == "local"
    assert loaded.admin_policy_dir is None and loaded.trusted_operator_keys is None


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    path.write_text('format = "stockade.host/1"\nextra = 1\n[host]\nlock = 3\nstore = "redis://x"\nsecret = "x"\n')
    with pytest.raises(ConfigInvalid) as caught:
        load_host_file(path)
    locs = [p["loc"] for p in caught.value.details["problems"]]
    assert locs == ["extra", "host.lock", "host.store", "host.secret"]
    assert caught.value.code == "CONFIG_INVALID"


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    path.write_text('format = "stockade.host/1"\n' + "# pad\n" * 20_000)
    with pytest.raises(ConfigInvalid, match="over 65536 bytes"):
        load_host_file(path)


def test_find_order_explicit_env_cwd_state_dir(tmp_path: Path) -> None:
    cwd, state = tmp_path / "cwd", tmp_path / "state"
    cwd.mkdir()
    state.mkdir()
    assert find_host_file(None, env={}, cwd=cwd, state_dir=state) is None
    (state / FILE_NAME).write_text("")
    assert find_host_file(None, env={}, cwd=cwd, state_dir=state) == state / FILE_NAME
    assert find_host_file(None, env={"STOCKADE_HOME": str(state)}, cwd=cwd, state_dir=None) == state / FILE_NAME
    (cwd / FILE_NAME).write_text("")
    assert find_host_file(None, env={}, cwd=cwd, state_dir=state) == cwd / FILE_NAME
    named = tmp_path / "named.toml"
    named.write_text("")
    assert find_host_file(None, env={"STOCKADE_CONFIG": str(named)}, cwd=cwd, state_dir=state) == named
    assert find_host_file(named, env={"STOCKADE_CONFIG": "/nope"}, cwd=cwd, state_dir=state) == named


@pytest.mark.parametrize("source", ["explicit", "env"])
def test_a_named_file_that_does_not_exist_is_an_error_not_a_fallback(tmp_path: Path, source: str) -> None:
    (tmp_path / FILE_NAME).write_text("")  # a local file must not be used instead
    missing = tmp_path / "missing.toml"
    with pytest.raises(ConfigInvalid, match="not found"):
        if source == "explicit":
            find_host_file(missing, env={}, cwd=tmp_path, state_dir=None)
        else:
            find_host_file(None, env={"STOCKADE_CONFIG": str(missing)}, cwd=tmp_path, state_dir=None)


def test_unsafe_allow_unsigned_round_trips_and_must_be_a_bool(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    path.write_text(render_host_file(state_dir="s", lock="l", trusted_keys="k.json", require_signatures=False,
                                     unsafe_allow_unsigned=True))
    assert "unsafe_allow_unsigned = true" in path.read_text()
    assert load_host_file(path).unsafe_allow_unsigned is True
    plain = tmp_path / "plain.toml"
    plain.write_text(render_host_file(state_dir="s", lock="l", trusted_keys=None, require_signatures=False))
    assert "unsafe_allow_unsigned" not in plain.read_text()
    assert load_host_file(plain).unsafe_allow_unsigned is None
    bad = tmp_path / "bad.toml"
    bad.write_text('format = "stockade.host/1"\n[host]\nunsafe_allow_unsigned = "yes"\n')
    with pytest.raises(ConfigInvalid) as caught:
        load_host_file(bad)
    assert caught.value.details["problems"] == [{"loc": "host.unsafe_allow_unsigned", "msg": "must be true or false"}]
    both = tmp_path / "both.toml"
    both.write_text('format = "stockade.host/1"\n[host]\nrequire_signatures = true\nunsafe_allow_unsigned = true\n')
    with pytest.raises(ConfigInvalid) as contradiction:
        load_host_file(both)
    assert contradiction.value.details["problems"] == [
        {"loc": "host.unsafe_allow_unsigned", "msg": "contradicts require_signatures = true"}
    ]
