"""Every ``stockade new`` template passes its own tests, in both languages, through the CLI.

Each case builds a real component (componentize-py or componentize-js) the first time a
cache sees it; the module is separate from ``test_new_and_test.py`` so its builds run on
another worker under ``--dist loadscope``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import author_cli as stockade


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["python", "javascript"])
@pytest.mark.parametrize(("template", "passed"), [("write-with-approval", 4), ("compute", 4)])
def test_every_template_passes_its_own_tests(tmp_path: Path, lang: str, template: str, passed: int) -> None:
    new = stockade("new", "tpl", "--lang", lang, "--template", template, cwd=tmp_path)
    assert new.returncode == 0, new.stderr
    test = stockade("test", str(tmp_path / "tpl"), cwd=tmp_path)
    assert test.returncode == 0, test.stdout + test.stderr
    assert f"{passed} passed" in test.stdout
