"""Added latency of ``exec.run``'s sandbox against a bare ``subprocess.run``, in one run.

Run: ``python tests/benchmarks/bench_exec.py [--runs 200]``

For each command (``/bin/true``: the spawn alone; ``git --version``: a real binary), the
runs are interleaved, one of each row per iteration, so load on the machine hits every
row alike. Rows (median ms per command):

  (b)  ``subprocess.run(argv, capture_output=True)``: a bare process
  (s)  :func:`host.sandbox.run_sandboxed` of the same argv: bwrap (namespaces, binds,
       seccomp program on a pipe, prlimit), bounded capture, plus the pids cgroup when the
       host runs as root (the process limit of a root host)
  (l)  (s) with Landlock: the launcher (the system's ``python3 -I -S``) applies the
       ruleset, then execs the command; what every call pays where the kernel has Landlock
  (n)  the same without the pids cgroup: what a host running as an unprivileged user
       pays (``RLIMIT_NPROC`` binds there); only printed when this runs as root
  (h)  ``exec.run`` through the Host: prepare (profile digest), approve, execute
       (durable intent and outcome records, audit log on /dev/shm when available)

Printed: the medians, s - b (the sandbox's added latency; target ≤ 20 ms), l - b, n - b
and h - b (the Host applies Landlock where the kernel has it).
On this machine (root, cgroup v1), a process inside a pids cgroup makes bwrap's namespace
set-up and teardown slower by 10-20 ms, which is why (n) is shown apart.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import dataclasses
import os

import host.sandbox.process as sandbox_process
from host.config import CommandEntry
from host.sandbox import Limits, SandboxProfile, find_bwrap, run_sandboxed
from host.sandbox.launch import abi
from tests.support.commands import make_exec_host

COMMANDS = {"true": ["/bin/true"], "git": ["/usr/bin/git", "--version"]}


class _NoCgroup:
    """Stands in for the pids cgroup (row n only)."""

    def __init__(self, max_processes: int) -> None:
        del max_processes

    def launcher(self) -> list[str]:
        return []

    def close(self) -> None:
        return None


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    bwrap = find_bwrap(None)
    if bwrap is None:
        raise SystemExit("bwrap is not on PATH")
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=base) as scratch:
        entries = [CommandEntry(name="true", path=Path("/bin/true")), CommandEntry(name="git", path=Path("/usr/bin/git"))]
        ex = make_exec_host(Path(scratch), entries)
        limits = Limits(cpu_s=60, memory_bytes=4 << 30, max_processes=256, max_file_bytes=256 << 20,
                        max_open_files=256)  # fmt: skip
        print(f"runs per row: {args.runs} (interleaved); median ms per command")
        root = os.geteuid() == 0
        landlock = f"abi {abi()}" if abi() >= 1 else "unavailable"
        print(f"Landlock: {landlock}")
        print(f"{'command':<16}{'bare (b)':>10}{'sandbox (s)':>13}{'landlock (l)':>14}{'no cgroup (n)':>15}"
              f"{'exec.run (h)':>14}{'s - b':>9}{'l - b':>9}{'n - b':>9}{'h - b':>9}")  # fmt: skip
        for name, argv in COMMANDS.items():
            profile = SandboxProfile(workspace=ex.ws, mode="ro", read_only=(".git",), binary=Path(argv[0]),
                                     network="none", limits=limits)  # fmt: skip
            landlocked = dataclasses.replace(profile, landlock=landlock)
            rows: dict[str, list[float]] = {"b": [], "s": [], "l": [], "n": [], "h": []}

            def bare(argv: list[str] = argv) -> object:
                return subprocess.run(argv, capture_output=True, check=True)

            def sandboxed(argv: list[str] = argv, profile: SandboxProfile = profile) -> object:
                return run_sandboxed(profile, bwrap, argv, cwd=".", stdin=b"", deadline_s=10, cancel=None,
                                     max_output_bytes=65536)  # fmt: skip

            def with_landlock(argv: list[str] = argv, profile: SandboxProfile = landlocked) -> object:
                return run_sandboxed(profile, bwrap, argv, cwd=".", stdin=b"", deadline_s=10, cancel=None,
                                     max_output_bytes=65536)  # fmt: skip

            def uncgrouped(sandboxed: Callable[[], object] = sandboxed) -> object:
                real = sandbox_process.PidsCgroup
                sandbox_process.PidsCgroup = _NoCgroup  # type: ignore[assignment,misc]  # row n only
                try:
                    return sandboxed()
                finally:
                    sandbox_process.PidsCgroup = real  # type: ignore[misc]  # restored

            def hosted(name: str = name, argv: list[str] = argv) -> object:
                result = ex.run(name, *argv[1:])
                assert result.ok and result.output["exit_code"] == 0, result
                return result

            for fn in (bare, sandboxed, with_landlock, uncgrouped, hosted):  # warm caches and the code paths
                fn()
            for _ in range(args.runs):
                rows["b"].append(_timed(bare))
                rows["s"].append(_timed(sandboxed))
                rows["l"].append(_timed(with_landlock))
                if root:
                    rows["n"].append(_timed(uncgrouped))
                rows["h"].append(_timed(hosted))
            b, s, ll, h = (statistics.median(rows[k]) for k in "bslh")
            n = statistics.median(rows["n"]) if root else s
            label = "/bin/true" if name == "true" else "git --version"
            print(f"{label:<16}{b:>10.2f}{s:>13.2f}{ll:>14.2f}{n:>15.2f}{h:>14.2f}{s - b:>9.2f}{ll - b:>9.2f}"
                  f"{n - b:>9.2f}{h - b:>9.2f}")  # fmt: skip
        ex.host.close()


if __name__ == "__main__":
    main()
