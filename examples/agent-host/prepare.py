"""Prepare a workspace for the agent-host example: build jsonkit, lock it, write a policy.

    python examples/agent-host/prepare.py WORKDIR

writes ``WORKDIR/stockade.lock`` (the jsonkit bundle under ``WORKDIR/bundles``) and
``WORKDIR/state/policy.json``, where role ``agent`` (bound to ``demo/agent``) may call
``jsonkit.query`` outright and ``jsonkit.transform`` only with a person's approval.
jsonkit is pure computation (no network, no secrets), so nothing else is needed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from host import FilePolicyEngine
from sdk.author.build import build_project
from sdk.review.lockfile import add_package

REPO = Path(__file__).resolve().parents[2]


def prepare(workdir: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    built = build_project(REPO / "plugins" / "jsonkit", out_dir=workdir / "bundles")
    print(f"built {built.bundle_dir.name}{' (cached)' if built.cached else ''}")
    update = add_package(workdir / "stockade.lock", built.bundle_dir)  # as `stockade lock add`
    print(f"locked at generation {update.generation}: {update.path}")
    state = workdir / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    policy = FilePolicyEngine.initialize(state / "policy.json")
    policy.set_role(
        "agent", allow=["tool.call:jsonkit.query", "json.use"], ask=["tool.call:jsonkit.transform"]
    )
    policy.grant_role("demo", "agent", "agent")
    print(f"policy: {policy.path} (jsonkit.transform asks a person)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/agent-host/prepare.py WORKDIR")
    prepare(Path(sys.argv[1]))
