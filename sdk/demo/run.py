"""``stockade demo``: set up a workspace, start the fake API, open a Host, run the session.

Setup (shown as "Step 0"):

1. build the first-party ``plugins/tracker`` and the hostile demo plugin
   (``sdk/demo/hostile``) with :func:`sdk.author.build.build_project`, cached across runs;
2. sign both bundles with a fresh demo key and write a lock at generation 1;
3. create a master key (mode 0600) and store the demo secret ``tracker_token`` for
   principal ``demo/agent``, encrypted;
4. write a policy: role ``agent`` allows ``tool.call:<name>`` of every tool and every
   permission the tools require; write tools still ask a person (the class default);
5. make a throw-away CA and start the fake tracker API on 127.0.0.1 over HTTPS;
6. open the Host with ``unsafe_allow_loopback`` (said on screen), the demo CA, the demo
   resolver and transport, compiling each component once (cached across runs).

Then :mod:`sdk.demo.session` runs the scripted agent session. The exit status is 0 only if
every step behaved as expected. ``ci=True`` removes pauses and prompts, nothing else.

Example::

    status = run_demo(ci=True, workdir=None)
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from rich.logging import RichHandler
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from host import FilePolicyEngine, Host, HostConfig
from host.config import WorkspaceGrant
from host.runtime import ProgressEvent
from sdk.author.build import BuildError, BuildResult
from sdk.demo.present import Screen, mask
from sdk.demo.session import PRINCIPAL, Session
from sdk.demo.tracker_api import (
    DEMO_HOSTS,
    DemoCA,
    TrackerServer,
    demo_resolver,
    demo_transport_factory,
)
from sdk.demo.workspace import DEMO_DIR, REPO_ROOT, Workspace, cache_root

__all__ = ["DEMO_TOKEN", "run_demo"]

DEMO_TOKEN: Final = "trk_demo_Q7x4mP9vL2sK8wN3"  # noqa: S105 - a published demo value, by design
"""The demo's tracker token. Fixed, so tests can prove it never reaches the output."""

TRACKER_PROJECT: Final = REPO_ROOT / "plugins" / "tracker"
HOSTILE_PROJECT: Final = DEMO_DIR / "hostile"


def run_demo(*, ci: bool, workdir: Path | None, screen: Screen | None = None) -> int:
    """Run the whole demo.

    Args:
        ci: no pauses and no prompts (the write is approved automatically).
        workdir: an empty (or missing) directory to keep the workspace in; ``None`` for a
            temporary directory removed at the end.
        screen: where to print (default: stdout).

    Raises:
        WorkdirNotEmpty: ``workdir`` exists and is not empty.
        BuildError: a plugin cannot be built (the tracker project is missing, say).
        StockadeError: setting up the host failed (lock, manifest, component, secrets).

    Returns:
        0 if every step behaved as expected, else 1.
    """
    screen = screen or Screen()
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        root = _workspace_root(stack, workdir)
        stack.enter_context(_log_to(screen))
        screen.title(
            "Stockade demo",
            "The model proposes a tool call; the host decides.\n"
            "A scripted agent session against a fake issue tracker on loopback, a hostile plugin, "
            "a lock upgrade review and the audit log.\nNo network is used beyond 127.0.0.1.",
        )
        ws = Workspace(root, cache_root())
        host, server, signing_key, bundles = _setup(screen, ws, stack)
        session = Session(
            screen=screen, host=host, server=server, workspace=ws, ci=ci,
            token=DEMO_TOKEN, signing_key=signing_key, tracker_bundle=bundles["tracker"],
        )
        outcomes = session.run()
        screen.summary(outcomes, time.monotonic() - started)
        if workdir is not None:
            screen.say(f"[dim]workspace kept in {root}[/]")
        return 0 if all(o.ok for o in outcomes) else 1


class WorkdirNotEmpty(ValueError):
    """``--workdir`` names a file or a directory that is not empty (a usage error)."""


def _workspace_root(stack: contextlib.ExitStack, workdir: Path | None) -> Path:
    if workdir is None:
        return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stockade-demo-")))
    workdir = workdir.expanduser().resolve()
    if workdir.exists() and (not workdir.is_dir() or any(workdir.iterdir())):
        raise WorkdirNotEmpty(f"--workdir {workdir} is not empty; choose a new or empty directory")
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


@contextlib.contextmanager
def _log_to(screen: Screen) -> Iterator[None]:
    """Show the host's warnings (e.g. unsafe_allow_loopback) in the demo's own output."""
    logger = logging.getLogger("stockade")
    handler = RichHandler(console=screen.console, show_path=False, show_time=False)
    saved = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = saved


def _setup(
    screen: Screen, ws: Workspace, stack: contextlib.ExitStack
) -> tuple[Host, TrackerServer, bytes, dict[str, Path]]:
    screen.step("0", "Setting up: build, sign, lock, store a secret, write policy, start the fake API")
    ws.create()
    built = _build(screen, ws)
    bundles = {"tracker": built[0].bundle_dir, "hostile": built[1].bundle_dir}
    signing_key = ws.sign_and_lock(bundles.values())
    screen.table(
        "Bundles (signed; locked at generation 1)",
        ("package", "module sha256", "build"),
        [(r.bundle_dir.name, r.module_sha256[:16] + "…", "cached" if r.cached else "built") for r in built],
    )
    ws.store_secret(PRINCIPAL.project, PRINCIPAL.subject, "tracker_token", DEMO_TOKEN)
    screen.say(
        f"Stored secret [bold]tracker_token[/] = {mask(DEMO_TOKEN)} for principal "
        f"{PRINCIPAL.project}/{PRINCIPAL.subject} (AES-256-GCM under a new 0600 master key)."
    )
    ca = DemoCA.create(ws.tls)
    server = stack.enter_context(TrackerServer(ca, token=DEMO_TOKEN))
    screen.warn_panel(
        "test-only settings for this demo",
        [
            "• HostConfig(unsafe_allow_loopback=True): egress may reach 127.0.0.0/8, so the loopback "
            "fake API can be reached. Never use it outside tests; the host logs it and records it in "
            "the audit log.",
            f"• A demo DNS resolver maps {', '.join(DEMO_HOSTS)} to 127.0.0.1 and refuses every other "
            "name (no real DNS query is made).",
            f"• The fake API listens on 127.0.0.1:{server.port}; the demo transport opens port-443 "
            "connections to the vetted loopback address on that port. Allowlists, pinning, "
            "credentials and redirects are checked exactly as in production.",
            f"• TLS is verified against a CA made for this run ({ca.ca_file.name}, via "
            "HostConfig.extra_ca_file).",
        ],
    )
    host = stack.enter_context(_open_host(screen, ws, ca, server, bundles))
    _write_policy(screen, ws, host)
    return host, server, signing_key, bundles


def _build(screen: Screen, ws: Workspace) -> list[BuildResult]:
    projects = [TRACKER_PROJECT, HOSTILE_PROJECT]
    if not (TRACKER_PROJECT / "stockade.toml").is_file():
        raise BuildError(
            f"the first-party tracker plugin is missing ({TRACKER_PROJECT}); "
            "run the demo from a Stockade source checkout",
            code="BUILD_PROJECT_INVALID",
        )
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=screen.console) as bar:
        tasks = [bar.add_task(f"{p.name}: starting", total=1.0) for p in projects]

        def report(index: int, stage: str, fraction: float) -> None:
            bar.update(tasks[index], description=f"{projects[index].name}: {stage}", completed=fraction)

        results = ws.build(projects, report)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return [r for r in results if isinstance(r, BuildResult)]


@contextlib.contextmanager
def _open_host(
    screen: Screen, ws: Workspace, ca: DemoCA, server: TrackerServer, bundles: dict[str, Path]
) -> Iterator[Host]:
    config = HostConfig(
        state_dir=ws.state,
        require_signatures=True,
        trusted_keys_file=ws.keys,
        extra_ca_file=ca.ca_file,
        unsafe_allow_loopback=True,
        workspaces=(WorkspaceGrant(root=ws.project, project=PRINCIPAL.project),),  # the fs.* host tools
    )
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=screen.console) as bar:
        task = bar.add_task("loading components", total=len(bundles))
        host = Host.open(
            ws.lock,
            config=config,
            secrets=ws.open_secrets(),
            policy=FilePolicyEngine(ws.policy),
            audit=ws.audit,
            resolver=demo_resolver,
            transport_factory=demo_transport_factory(ca_file=ca.ca_file, https_port=server.port),
            progress=_compile_reporter(lambda text, done: bar.update(task, description=text, completed=done)),
        )
    with host:
        yield host


def _compile_reporter(update: Callable[[str, int], None]) -> Callable[[ProgressEvent], None]:
    def report(event: ProgressEvent) -> None:
        verb = {"cached": "loaded compiled", "compiling": "compiling", "compiled": "compiled"}[event.stage]
        update(f"{verb} {event.name}", event.done)

    return report


def _write_policy(screen: Screen, ws: Workspace, host: Host) -> None:
    """Role ``agent``: every tool may be called, with the permissions the tools declare."""
    permissions = {f"tool.call:{t.name}" for t in host.registry}
    permissions |= {p for t in host.registry for p in t.permissions}
    ws.write_policy(PRINCIPAL.project, PRINCIPAL.subject, permissions)
    declared = sorted(p for p in permissions if not p.startswith("tool.call:"))
    screen.say(
        f"Policy: role [bold]agent[/] (bound to {PRINCIPAL.project}/{PRINCIPAL.subject}) allows "
        f"tool.call for all {len(host.registry)} tools and {', '.join(declared) or 'no other permission'}; "
        "write tools still ask a person (class default: read allow, write ask)."
    )
