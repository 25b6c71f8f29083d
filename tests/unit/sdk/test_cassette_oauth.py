"""Recording a cassette for a package with an OAuth credential mapping is refused.

The tokens the host obtains mid-call are not staged values of the cassette's redactor, so
an API that echoed one back would reach the file redacted by name only (the attack:
an echoed access token committed with the cassette)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from host.errors import CassetteInvalid
from sdk._cassette import HarnessCassette
from tests.unit.host.test_manifest_oauth import _oauth, manifest, parse


def _bundle(doc: dict[str, Any]) -> Any:
    return SimpleNamespace(manifest=parse(doc))


@pytest.mark.parametrize("mode", ["once", "all", "new_episodes"])
def test_recording_with_an_oauth_mapping_refused_before_any_request(tmp_path: Path, mode: str) -> None:
    with pytest.raises(CassetteInvalid) as caught:
        HarnessCassette(tmp_path / "c.json", mode, bundle=_bundle(manifest(_oauth())), secrets={},
                        basic_usernames=())
    assert caught.value.details["reason"] == "oauth_not_recordable"
    assert not (tmp_path / "c.json").exists()


def test_recording_a_static_credential_package_is_not_refused(tmp_path: Path) -> None:
    cassette = HarnessCassette(tmp_path / "c.json", "once", bundle=_bundle(manifest()), secrets={},
                               basic_usernames=())
    assert cassette.recording
