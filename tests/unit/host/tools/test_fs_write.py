"""``fs.write_file``: creating is explicit, never an overwrite, and approved as a diff."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from host.errors import StockadeError
from host.tools.atomic import atomic_create
from tests.support.workspace import FsHost, make_fs_host


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[FsHost]:
    fixture = make_fs_host(tmp_path)
    try:
        yield fixture
    finally:
        fixture.host.close()


def test_create_shows_the_new_content_as_a_diff_then_writes(fs: FsHost) -> None:
    plan = fs.host.prepare(fs.request("fs.write_file", path="new.txt", content="a\nb\n", create_only=True))
    assert plan.status == "approval_required" and plan.preview.detail is not None
    assert plan.preview.detail.splitlines()[:3] == ["--- /dev/null", "+++ b/new.txt", "@@ -0,0 +1,2 @@"]
    assert not (fs.ws / "new.txt").exists()
    result = fs.host.execute(plan, fs.host.approve(plan))
    assert result.ok and result.output["lines_added"] == 2
    assert (fs.ws / "new.txt").read_bytes() == b"a\nb\n"


def test_existing_file_is_never_overwritten(fs: FsHost) -> None:
    (fs.ws / "old.txt").write_text("keep\n")
    with pytest.raises(StockadeError) as caught:
        fs.host.prepare(fs.request("fs.write_file", path="old.txt", content="x", create_only=True))
    assert caught.value.details["reason"] == "exists"
    assert (fs.ws / "old.txt").read_text() == "keep\n"


def test_file_created_between_approval_and_write_is_kept(fs: FsHost) -> None:
    plan = fs.host.prepare(fs.request("fs.write_file", path="race.txt", content="mine\n", create_only=True))
    approval = fs.host.approve(plan)
    (fs.ws / "race.txt").write_text("theirs\n")
    result = fs.host.execute(plan, approval)
    assert result.error is not None and result.error.code in ("APPROVAL_INVALID", "INPUT_INVALID")
    assert (fs.ws / "race.txt").read_text() == "theirs\n"


def test_link_never_replaces_a_name_created_in_the_last_window(tmp_path: Path) -> None:
    (tmp_path / "x").symlink_to("/etc/passwd")
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(StockadeError) as caught:
            atomic_create(dir_fd, "x", b"data")
    finally:
        os.close(dir_fd)
    assert caught.value.details["reason"] == "exists"
    assert os.readlink(tmp_path / "x") == "/etc/passwd" and sorted(p.name for p in tmp_path.iterdir()) == [
        "x"
    ]


@pytest.mark.parametrize(
    ("input", "reason"),
    [
        ({"path": "n.txt", "content": "x", "create_only": False}, "create_only_required"),
        ({"path": "missing/n.txt", "content": "x", "create_only": True}, "not_found"),
        ({"path": ".git/hooks/pre-commit", "content": "x", "create_only": True}, "protected"),
        ({"path": "../n.txt", "content": "x", "create_only": True}, "dotdot"),
        ({"path": "n.txt", "content": "a\x00b", "create_only": True}, "not_text"),
        ({"path": "link/n.txt", "content": "x", "create_only": True}, "symlink"),
    ],
    ids=["create_only_false", "no_parent", "protected", "dotdot", "nul", "through_symlink"],
)
def test_write_file_refusals(fs: FsHost, input: dict[str, object], reason: str) -> None:
    (fs.ws / "link").symlink_to(fs.root)
    with pytest.raises(StockadeError) as caught:
        fs.host.prepare(fs.request("fs.write_file", **input))
    assert caught.value.details["reason"] == reason
    assert not (fs.root / "n.txt").exists()


def test_write_file_limits_crossed(tmp_path: Path) -> None:
    fs = make_fs_host(tmp_path, max_file_bytes=10, max_diff_bytes=10_000)
    try:
        with pytest.raises(StockadeError) as caught:
            fs.host.prepare(fs.request("fs.write_file", path="big", content="x" * 11, create_only=True))
        assert caught.value.details["reason"] == "too_large"
    finally:
        fs.host.close()
