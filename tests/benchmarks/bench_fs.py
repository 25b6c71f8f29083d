"""Cost of the ``fs.*`` host tools against plain Python file code, as ratios in one run.

Run: ``python tests/benchmarks/bench_fs.py [--calls 300] [--rounds 3]``

Rows (median µs per call, one 1 MiB text file of 30,000 lines, audit log on /dev/shm when
available so the rows measure the tools, not the disk's fsync):

  (p)  plain Python: open, read the file, decode, slice the lines of one 64 KiB page
  (r)  ``Host.call`` of ``fs.read_file`` for the same page: envelope, registry, policy,
       input validation, openat2 beneath the root fd, fstat checks, read, page, output
       validation, outcome record
  (q)  plain Python: read, replace one unique line, write a temp file, fsync, rename
  (e)  ``fs.edit_file`` prepare + approve + execute of the same edit: the diff, the bound
       digest, the re-read at execute, the durable intent record, the atomic write with
       file and directory fsync

Ratios printed: r/p and e/q.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.bench_sandbox import measure
from tests.support.workspace import make_fs_host

LINES = 30_000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=base) as scratch:
        fs = make_fs_host(Path(scratch))
        target = fs.ws / "big.txt"
        target.write_text("".join(f"line {i:06d} " + "x" * 20 + "\n" for i in range(LINES)))
        first_page = fs.read(path="big.txt").output["end_line"]
        flip = [0]

        def plain_read() -> object:
            with open(target, "rb") as handle:
                text = handle.read().decode("utf-8")
            return "\n".join(f"{n}: {line}" for n, line in enumerate(text.split("\n")[:first_page], 1))

        def host_read() -> object:
            result = fs.read(path="big.txt")
            assert result.ok
            return result

        def plain_edit() -> object:
            old, new = ("line 015000 ", "LINE 015000 ") if flip[0] == 0 else ("LINE 015000 ", "line 015000 ")
            flip[0] ^= 1
            text = target.read_text()
            temp = target.with_name(".bench.tmp")
            with open(temp, "w") as handle:
                handle.write(text.replace(old, new, 1))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, target)
            return None

        def host_edit() -> object:
            old, new = ("line 015000 ", "LINE 015000 ") if flip[0] == 0 else ("LINE 015000 ", "line 015000 ")
            flip[0] ^= 1
            result = fs.edit(path="big.txt", old_text=old, new_text=new)
            assert result.ok, result.error
            return result

        rows = {}
        for key, fn in (("p", plain_read), ("r", host_read), ("q", plain_edit), ("e", host_edit)):
            rows[key] = measure(fn, args.calls, args.rounds)
            print(f"({key}) median {rows[key][0]:9.1f} µs   p90 {rows[key][1]:9.1f} µs", flush=True)
        print(f"r/p = {rows['r'][0] / rows['p'][0]:.2f}   e/q = {rows['e'][0] / rows['q'][0]:.2f}")
        fs.host.close()


if __name__ == "__main__":
    main()
