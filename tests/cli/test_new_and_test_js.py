"""``stockade new`` -> ``build`` -> ``test`` for a JavaScript project, through the real entry
point. The Python round trip and the rest of ``new``/``test`` are in test_new_and_test.py:
a module of its own so ``--dist loadscope`` builds the two languages on different workers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import new_build_test_round_trip


@pytest.mark.slow
def test_new_build_test_round_trip_javascript(tmp_path: Path) -> None:
    new_build_test_round_trip(tmp_path, "javascript")
