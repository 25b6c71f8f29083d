"""host.__all__ is the stable API (docs/design.md §11); it changes only on purpose."""

from __future__ import annotations

import host


def test_host_all_is_sorted_and_complete() -> None:
    public = {name for name in dir(host) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(host, name)).__name__ == "module"}
    assert sorted(host.__all__) == host.__all__
    assert set(host.__all__) == public - modules - {"annotations"}
