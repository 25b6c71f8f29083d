"""``stockade diff`` gates CI on lock history too: a new lock that is
not the direct successor of the old one exits 4; ``--from-git REV`` diffs the committed
lock (and bundles) against the working tree.

Attacks defended: a pull request that rolls the lock back to an older generation (with
an old, vulnerable plugin), forks it, or skips generations, passing a gate that only
looked at escalations.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.bundles import lock_digest, lock_entry, make_manifest, write_bundle, write_lock
from tests.support.cli import json_out, run_cli


def _write(root: Path, manifest: dict, *, generation: int, previous: str | None) -> Path:  # type: ignore[type-arg]
    bundle = write_bundle(root / "bundles" / manifest["package"]["name"], manifest)
    return write_lock(root / "stockade.lock", [lock_entry(root, bundle)], generation=generation, previous=previous)


def _two(tmp_path: Path, *, generation: int, chained: bool, widen: bool = False) -> tuple[Path, Path]:
    old = _write(tmp_path / "old", make_manifest(), generation=2, previous="1" * 64)
    manifest = make_manifest()
    if widen:
        manifest["http"]["allow"][0]["host"] = "*.tracker.example"
    previous = lock_digest(old) if chained else ("2" * 64 if generation > 1 else None)
    new = _write(tmp_path / "new", manifest, generation=generation, previous=previous)
    return old, new


@pytest.mark.parametrize(
    ("generation", "chained", "relation"),
    [(1, False, "rollback"), (2, False, "fork"), (3, False, "fork"), (4, False, "skipped")],
    ids=["rollback", "same-generation-fork", "next-generation-unchained", "skipped-generation"],
)
def test_lock_that_is_not_a_direct_successor_exits_4(tmp_path: Path, generation: int, chained: bool,
                                                      relation: str) -> None:
    old, new = _two(tmp_path, generation=generation, chained=chained)
    proc = run_cli("diff", str(old), str(new), "--json", cwd=tmp_path)
    assert proc.returncode == 4, proc.stderr
    assert json_out(proc)["relation"] == relation
    text = run_cli("diff", str(old), str(new), cwd=tmp_path)
    assert text.returncode == 4 and f"NOT A SUCCESSOR ({relation})" in text.stdout


def test_rollback_with_an_escalation_still_exits_4(tmp_path: Path) -> None:
    old, new = _two(tmp_path, generation=1, chained=False, widen=True)
    proc = run_cli("diff", str(old), str(new), "--json", cwd=tmp_path)
    assert proc.returncode == 4 and json_out(proc)["escalated"] is True


def test_direct_successor_with_an_escalation_exits_3(tmp_path: Path) -> None:
    old, new = _two(tmp_path, generation=3, chained=True, widen=True)
    proc = run_cli("diff", str(old), str(new), "--json", cwd=tmp_path)
    assert proc.returncode == 3 and json_out(proc)["relation"] == "successor"


def git(root: Path, *argv: str) -> None:
    subprocess.run(["git", "-C", str(root), *argv], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
                        "HOME": str(root), "PATH": "/usr/bin:/bin"})


def _repo(tmp_path: Path, *, ignore_bundles: bool = False) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    _write(repo, make_manifest(), generation=1, previous=None)
    if ignore_bundles:
        (repo / ".gitignore").write_text("bundles/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "gen 1")
    return repo


@pytest.mark.parametrize("ignore_bundles", [False, True], ids=["bundles-committed", "bundles-ignored"])
def test_from_git_diffs_the_committed_lock_against_the_working_tree(tmp_path: Path, ignore_bundles: bool) -> None:
    repo = _repo(tmp_path, ignore_bundles=ignore_bundles)
    committed = lock_digest(repo / "stockade.lock")
    manifest = make_manifest()
    manifest["http"]["allow"][0]["host"] = "*.tracker.example"
    if ignore_bundles:  # the old bundle is not in git: a build output, same bytes in the working tree
        (repo / "bundles" / "tracker-v2").mkdir()
        bundle = write_bundle(repo / "bundles" / "tracker-v2", manifest)
        write_lock(repo / "stockade.lock", [lock_entry(repo, bundle)], generation=2, previous=committed)
    else:
        _write(repo, manifest, generation=2, previous=committed)
    proc = run_cli("diff", "--from-git", "HEAD", "stockade.lock", "--json", cwd=repo)
    assert proc.returncode == 3, proc.stderr
    report = json_out(proc)
    assert report["relation"] == "successor" and "http.wildcard" in report["escalations"]
    assert report["old"]["generation"] == 1 and report["new"]["generation"] == 2


def test_from_git_catches_a_rollback_in_a_pull_request(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _write(repo, make_manifest(), generation=2, previous=lock_digest(repo / "stockade.lock"))
    git(repo, "commit", "-q", "-am", "gen 2")
    git(repo, "checkout", "-q", "HEAD~1", "--", "stockade.lock")  # the PR puts generation 1 back
    proc = run_cli("diff", "--from-git", "main", cwd=repo)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "NOT A SUCCESSOR (rollback)" in proc.stdout


def test_from_git_reports_git_and_path_failures(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    bad = run_cli("diff", "--from-git", "no-such-rev", cwd=repo)
    assert bad.returncode == 1 and "error: GIT_FAILED" in bad.stderr
    (repo / "other.lock").write_text(json.dumps({"format": "stockade.lock/1"}))
    missing = run_cli("diff", "--from-git", "HEAD", "other.lock", cwd=repo)
    assert missing.returncode == 1 and "error: LOCK_NOT_IN_GIT: other.lock does not exist at HEAD" in missing.stderr
    usage = run_cli("diff", "--from-git", "HEAD", "a.lock", "b.lock", cwd=repo)
    assert usage.returncode == 2
    lone = run_cli("diff", "only-one.lock", cwd=repo)
    assert lone.returncode == 2 and "NEW_LOCK" in lone.stderr
