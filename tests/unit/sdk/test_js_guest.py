"""The JavaScript guest SDK's boundary mappings (WIT 1.1.0), run under node.

Bodies cross as latin-1 text and headers as a JSON block; the SDK maps both ways so that
authors keep passing strings/Uint8Arrays and header lists. ``js/conversions.mjs`` checks
every byte value both ways, UTF-8 string bodies (lone surrogates included), ``text()`` and
``json()`` against ``TextDecoder`` (BOM dropped, invalid bytes replaced) and the header
block; the componentize-js plugin tests repeat the byte round trip inside wasm.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent / "js"
IMPORT = 'from "stockade:plugin/host@1.1.0";'


def test_js_sdk_maps_bodies_and_headers_both_ways(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    source = (REPO_ROOT / "sdk" / "js" / "stockade.js").read_text("utf-8")
    assert IMPORT in source
    (tmp_path / "stockade.mjs").write_text(source.replace(IMPORT, 'from "./fakehost.mjs";'), "utf-8")
    for name in ("conversions.mjs", "fakehost.mjs"):
        shutil.copy(HERE / name, tmp_path / name)
    proc = subprocess.run([node, str(tmp_path / "conversions.mjs")], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "js sdk conversions ok"
