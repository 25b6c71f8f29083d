"""Benchmark: ``pull_bundle`` vs a plain httpx2 download of the same blobs, real registry.

Run: ``python tests/benchmarks/bench_oci.py [--mib 18] [--n 5]`` (a script, not a test;
needs the ``docker-registry`` binary).

A bundle whose module is the echo component plus a custom section of ``--mib`` MiB of
random bytes (18 MiB is the size of a componentize-py plugin) is pushed to a loopback
registry (plain HTTP). Then, ``--n`` times each, medians:

- **baseline**: one ``httpx2.Client`` GETs the OCI manifest and the three blobs, nothing
  checked, nothing written;
- **pull**: ``pull_bundle`` into a fresh store: bounded streaming reads, manifest and blob
  digests, the manifest rules, the module digest, annotations, then staging directory,
  fsync of every file and of the directories, and one rename.

Prints the raw rows and the ratio pull / baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sdk.bundle import read_bundle
from sdk.oci.artifact import pull_bundle, push_bundle
from sdk.oci.client import RegistryClient, parse_reference
from tests.oci.conftest import custom_section
from tests.support.bundles import write_bundle
from tests.support.hosts import echo_manifest, echo_tool
from tests.support.registry import RegistryServer
from tests.support.wat import echo_component


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=18)
    parser.add_argument("--n", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-oci-") as scratch:
        root = Path(scratch)
        module = custom_section(echo_component(), os.urandom(args.mib << 20))
        bundle = read_bundle(write_bundle(root / "b", echo_manifest([echo_tool()], module), module))
        with RegistryServer.start(root / "registry") as registry:
            ref = parse_reference(f"{registry.address}/bench/echo:1")
            with RegistryClient(registry.address, insecure=True, credential=None) as client:
                digest = push_bundle(client, ref, bundle)
                base, pull = [], []
                for i in range(args.n):
                    base.append(_baseline(registry.address, ref.path, digest))
                    started = time.perf_counter()
                    pull_bundle(client, ref.pinned(digest), store_root=root / f"store-{i}",
                                trusted_keys=None, require_signatures=False)
                    pull.append(time.perf_counter() - started)
    rows = {"module_bytes": len(module), "baseline_ms": [round(t * 1000, 1) for t in base],
            "pull_ms": [round(t * 1000, 1) for t in pull]}
    ratio = statistics.median(pull) / statistics.median(base)
    print(json.dumps(rows))
    print(f"median baseline {statistics.median(base) * 1000:.1f} ms, pull {statistics.median(pull) * 1000:.1f} ms,"
          f" ratio pull/baseline {ratio:.2f}")


def _baseline(address: str, path: str, digest: str) -> float:
    started = time.perf_counter()
    with httpx2.Client(base_url=f"http://{address}", timeout=30) as plain:
        manifest = plain.get(f"/v2/{path}/manifests/{digest}",
                             headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}).json()
        for descriptor in [manifest["config"], *manifest["layers"]]:
            plain.get(f"/v2/{path}/blobs/{descriptor['digest']}").raise_for_status()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
