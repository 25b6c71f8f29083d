"""HostConfig: keyword arguments only, and the checks of its values."""

from __future__ import annotations

from pathlib import Path

import pytest

from host.config import HostConfig


def test_host_config_is_keyword_only(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="positional"):
        HostConfig(tmp_path)  # type: ignore[misc]
    config = HostConfig(state_dir=str(tmp_path))  # type: ignore[arg-type]
    assert config.state_dir == tmp_path and config.unsafe_allow_loopback is False


@pytest.mark.parametrize(
    ("field", "value"),
    [("audit_flush_interval_ms", 0), ("audit_checkpoint_every", True), ("audit_checkpoint_interval_s", -1.0)],
)
def test_non_positive_times_refused(tmp_path: Path, field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"HostConfig.{field} must be positive"):
        HostConfig(state_dir=tmp_path, **{field: value})  # type: ignore[arg-type]
