"""The scripted agent session of ``stockade demo`` (steps 1–7).

Each step proposes calls the way a model would, lets the Host decide, prints what
happened and records an :class:`~sdk.demo.present.Outcome` (expected vs got). Nothing is
mocked: real components in wasmtime, real TLS to a loopback server, a real encrypted
secrets store, a real policy file and a real hash-chained audit log.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from rich.prompt import Confirm
from rich.text import Text

from host import CallRequest, CallResult, Host, Principal
from host.audit.log import verify
from host.formats.manifest import Effect
from host.trust.registry import ToolDefinition
from host.types import Preview
from sdk.demo.present import Outcome, Screen, mask
from sdk.demo.tracker_api import EVIL_LOCATION, HOSTILE_HOST, TRACKER_HOST, TrackerServer
from sdk.demo.workspace import Workspace, escalated_manifest
from sdk.review.lockfile import add_package

__all__ = ["PRINCIPAL", "SESSION", "Session"]

PRINCIPAL: Final = Principal(project="demo", subject="agent")
SESSION: Final = "demo-session-1"
REPO: Final = "widgets"
_HINTS: Final[dict[str, Any]] = {
    "repo": REPO,
    "number": 1,
    "title": "Add a --dry-run flag to the importer",
    "body": "Filed by the demo agent after a person approved it.",
}
_CONTAINED_CODES: Final = ("SANDBOX_FUEL_EXHAUSTED", "SANDBOX_TIMEOUT")
_CLI_TIMEOUT_S: Final = 120  # one `stockade diff` of two small locks takes well under a second


@dataclass
class Session:
    """One scripted session against an open Host."""

    screen: Screen
    host: Host
    server: TrackerServer
    workspace: Workspace
    ci: bool
    token: str
    signing_key: bytes
    tracker_bundle: Path
    outcomes: list[Outcome] = field(default_factory=list)
    last_audit_id: str | None = None

    def run(self) -> list[Outcome]:
        """Run steps 1–7 in order; return the outcomes."""
        steps: Sequence[tuple[str, Callable[[], None]]] = (
            ("1 tool list", self.step_tools), ("2 allowed read", self.step_read),
            ("3 invalid input", self.step_invalid), ("4 write needs approval", self.step_write),
            ("4b file edit shows its diff", self.step_edit),
            ("5 hostile bundle", self.step_hostile), ("6 lock upgrade diff", self.step_diff),
            ("7 audit log verified", self.step_audit),
        )
        for label, step in steps:
            try:
                step()
            except Exception as exc:  # a broken step is reported, and the others still run
                self._record(label, "completes", f"error: {type(exc).__name__}: {exc}"[:300], False)
            self._pause()
        return self.outcomes

    # -- helpers -------------------------------------------------------------------------------

    def _pause(self) -> None:
        if self.ci:
            return
        with contextlib.suppress(EOFError, KeyboardInterrupt):
            self.screen.console.input("[dim]press Enter for the next step…[/]")

    def _tool(self, name: str) -> ToolDefinition:
        return next(t for t in self.host.registry if t.name == name)

    def _input(self, name: str, **overrides: Any) -> dict[str, Any]:
        """Demo values for the properties of ``name``'s input schema."""
        properties = self._tool(name).input_schema.get("properties", {})
        return {k: v for k, v in ({**_HINTS, **overrides}).items() if k in properties}

    def _request(self, name: str, value: dict[str, Any]) -> CallRequest:
        return CallRequest(principal=PRINCIPAL, session=SESSION, tool=name,
                           version=self._tool(name).version, input=value)

    def _call(self, name: str, value: dict[str, Any]) -> CallResult:
        self.screen.proposal("agent", f"{name} {_brief(value)}")
        result = self.host.call(self._request(name, value))
        self._remember(result)
        return result

    def _remember(self, result: CallResult) -> None:
        if result.audit_id:
            self.last_audit_id = result.audit_id

    def _record(self, step: str, expected: str, got: str, ok: bool) -> None:
        self.screen.check(ok, f"{step}: {got}")
        self.outcomes.append(Outcome(step, expected, got, ok))

    def _leaks(self, *texts: str) -> bool:
        return any(self.token in text for text in texts)

    @staticmethod
    def _code(result: CallResult) -> str:
        return "ok" if result.ok else (result.error.code if result.error else "?")

    # -- 1. tools -----------------------------------------------------------------------------------

    def step_tools(self) -> None:
        """Step 1: the tool list the model is offered."""
        self.screen.step("1", "The tool list the model is offered (Host.tools('openai'))")
        schemas = self.host.tools("openai")  # in registry order
        rows = []
        for tool, schema in zip(self.host.registry, schemas, strict=True):
            params = sorted(tool.input_schema.get("properties", {}))
            rows.append((schema["function"]["name"], f"{tool.name}@{tool.version}", tool.effect.value,
                         tool.risk.value,
                         "allow" if tool.effect is Effect.READ else "ask a person", ", ".join(params) or "—"))
        self.screen.table("Tools (the hostile plugin calls all of its tools low-risk reads)",
                          ("model sees", "tool", "effect", "risk", "default", "parameters"), rows)
        wanted = {"tracker.list-issues", "tracker.get-issue", "tracker.create-issue", "tracker.comment"}
        names = {t.name for t in self.host.registry}
        ok = wanted <= names and any(n.startswith("hostile.") for n in names) and len(schemas) == len(names)
        self._record("1 tool list", "tracker's 4 tools and the hostile plugin's tools, one schema each",
                     f"{len(schemas)} tools offered", ok)

    # -- 2. allowed read ----------------------------------------------------------------------------

    def step_read(self) -> None:
        """Step 2: a read the policy allows, with the credential injected by the host."""
        self.screen.step("2", "An allowed read: the host injects the credential, the plugin never sees it")
        before = len(self.server.seen)
        result = self._call("tracker.list-issues", self._input("tracker.list-issues"))
        self.screen.result("tracker.list-issues", result)
        seen = [s for s in self.server.seen[before:] if s.host == TRACKER_HOST]
        if result.ok and isinstance(result.output, list):
            self.screen.table(f"Issues of {REPO!r} (the plugin's output)", ("#", "title", "state"),
                              [(str(i.get("number")), str(i.get("title")), str(i.get("state")))
                               for i in result.output if isinstance(i, dict)])
        wire = [s.authorization or "(none)" for s in seen]
        on_wire = bool(seen) and all(a == f"Bearer {self.token}" for a in wire)
        shown = ", ".join(_masked(a) for a in wire)
        plugin_view = json.dumps(result.output) + result.log
        leaked = self._leaks(plugin_view)
        self.screen.table("Who saw the token", ("party", "what it saw"), [
            ("tracker API (server)", f"Authorization: {shown or 'no request'}"),
            ("plugin (guest)", "its request carried no credential; its output and log "
             + ("CONTAIN the token" if leaked else "do not contain the token")),
        ])
        ok = result.ok and on_wire and not leaked
        got = (f"{self._code(result)}; server saw {shown or 'nothing'}; plugin output/log "
               f"{'leaked' if leaked else 'clean'}")
        expected = "ok; server got Bearer ****…; token absent from the plugin's output/log"
        self._record("2 allowed read", expected, got, ok)

    # -- 3. invalid input -----------------------------------------------------------------------------

    def step_invalid(self) -> None:
        """Step 3: invalid input refused by the host before the guest starts."""
        self.screen.step("3", "Invalid input: refused before anything runs")
        schema = self._tool("tracker.create-issue").input_schema.get("properties", {})
        limit = int(schema.get("title", {}).get("maxLength", 200))
        before = len(self.server.seen)
        value = self._input("tracker.create-issue", title="A" * (limit + 1))
        self.screen.say(f"A title of {limit + 1} characters (the schema allows {limit}):")
        result = self._call("tracker.create-issue", value)
        self.screen.result("tracker.create-issue", result)
        untouched = len(self.server.seen) == before
        started = result.usage.fuel > 0
        ok = self._code(result) == "INPUT_INVALID" and untouched and not started
        expected = "INPUT_INVALID; guest never started, no request, no approval asked"
        sent = len(self.server.seen) - before
        got = f"{self._code(result)}; fuel used {result.usage.fuel}; requests {sent}"
        self._record("3 invalid input (schema)", expected, got, ok)
        self.screen.say(
            "A path trick the schema subset cannot express (no patterns) is refused by the plugin "
            "itself, and still nothing leaves the sandbox:"
        )
        before = len(self.server.seen)
        result = self._call("tracker.list-issues", self._input("tracker.list-issues", repo="../admin"))
        self.screen.result("tracker.list-issues", result)
        ok = self._code(result) == "INPUT_INVALID" and len(self.server.seen) == before
        self._record("3 invalid input (plugin)", "INPUT_INVALID from the plugin; no request sent",
                     f"{self._code(result)}; requests {len(self.server.seen) - before}", ok)

    # -- 4. write with approval ------------------------------------------------------------------------

    def step_write(self) -> None:
        """Step 4: a write that needs a person's approval, approved and executed."""
        self.screen.step("4", "A write needs a person's approval: preview, approve, execute")
        name = "tracker.create-issue"
        request = self._request(name, self._input(name))
        first = self._call(name, request.input)
        self.screen.result(name, first)
        plan = self.host.prepare(request)
        self._show_preview(plan.preview)
        before = len(self.server.seen)
        if not self._approve():
            result = self.host.execute(plan, None)
            self._remember(result)
            self.screen.result(f"{name} without approval", result)
            ok = self._code(result) == "APPROVAL_REQUIRED" and len(self.server.seen) == before
            self._record("4 write needs approval", "APPROVAL_REQUIRED; runs only if a person approves",
                         f"{self._code(first)} → declined by you: nothing ran", ok)
            return
        approval = self.host.approve(plan)
        result = self.host.execute(plan, approval)
        self._remember(result)
        self.screen.result(f"{name} (approved)", result)
        if result.ok:
            self.screen.json_panel("Created (the plugin's output)", result.output, style="green")
        posted = [s for s in self.server.seen[before:] if s.method == "POST"]
        ok = self._code(first) == "APPROVAL_REQUIRED" and result.ok and len(posted) == 1
        self._record("4 write needs approval", "APPROVAL_REQUIRED → approved → ok (one POST)",
                     f"{self._code(first)} → approved → {self._code(result)} ({len(posted)} POST)", ok)
        replay = self.host.execute(plan, approval)
        self._remember(replay)
        self.screen.say("Replaying the same approval (approvals are single use):")
        self.screen.result(f"{name} (replayed approval)", replay)
        ok = self._code(replay) == "APPROVAL_INVALID" and len(self.server.seen) == before + len(posted)
        self._record("4 approval replay", "APPROVAL_INVALID; nothing sent", self._code(replay), ok)

    def step_edit(self) -> None:
        """Step 4b: the agent edits a project file; the person sees the exact diff first."""
        self.screen.step("4b", "An agent edits a project file: the person sees the diff before it is written")
        target = self.workspace.project / "service.toml"
        before = target.read_bytes()
        value = {"path": "service.toml", "old_text": "debug = true", "new_text": "debug = false"}
        self.screen.proposal("model", f"fs.edit_file {_brief(value)}")
        plan = self.host.prepare(self._request("fs.edit_file", value))
        self._show_preview(plan.preview)
        self.screen.panel("The change this approval covers (its sha256 is in the action digest)",
                          Text(plan.preview.detail or ""), style="yellow")
        untouched = target.read_bytes() == before
        if not self._approve():
            result = self.host.execute(plan, None)
            self._remember(result)
            ok = self._code(result) == "APPROVAL_REQUIRED" and target.read_bytes() == before
            self._record("4b file edit shows its diff", "diff shown; nothing written unless approved",
                         "declined by you: nothing written", ok)
            return
        result = self.host.execute(plan, self.host.approve(plan))
        self._remember(result)
        self.screen.result("fs.edit_file (approved)", result)
        ok = untouched and result.ok and target.read_text().count("debug = false") == 1
        self._record("4b file edit shows its diff", "diff shown, nothing written before the yes → ok",
                     f"untouched while asked: {untouched} → {self._code(result)}", ok)

    def _show_preview(self, preview: Preview) -> None:
        self.screen.table("What the person is asked to approve (no input values, no secrets)",
                          ("field", "value"), [
                              ("tool", f"{preview.tool}@{preview.version}"),
                              ("package", f"{preview.package}@{preview.package_version}"),
                              ("lock generation", str(preview.generation)),
                              ("effect / risk", f"{preview.effect} / {preview.risk}"),
                              ("permissions", ", ".join(preview.permissions)),
                              ("may reach", ", ".join(preview.hosts) or "—"),
                              ("secrets used", ", ".join(preview.secrets) or "—"),
                              ("action digest", preview.action_digest),
                          ])

    def _approve(self) -> bool:
        if self.ci:
            self.screen.say("[bold]person →[/] approved automatically (--ci)")
            return True
        try:
            return Confirm.ask("Approve this action?", console=self.screen.console, default=False)
        except (EOFError, KeyboardInterrupt):
            return False

    # -- 5. the hostile bundle ----------------------------------------------------------------------------

    def step_hostile(self) -> None:
        """Step 5: the hostile plugin's tricks, each contained with its code."""
        self.screen.step("5", "A hostile bundle: every trick contained, each with its code")
        version = self._tool("hostile.spin").version
        self.screen.say(f"hostile@{version} claims every tool is a low-risk read, so policy lets it run.")
        self._hostile_redirect()
        self._hostile_auth()
        self._hostile_secret()
        self._hostile_spin()
        self._hostile_flood()

    def _hostile_redirect(self) -> None:
        self.screen.say(f"\n[bold]5a[/] The CDN answers 302 → {EVIL_LOCATION}")
        result = self._call("hostile.fetch-asset", {})
        self.screen.result("hostile.fetch-asset", result)
        message = result.error.message if result.error else ""
        hops = [f"{s.method} {s.path} → {s.status}" for s in self.server.seen if s.host == HOSTILE_HOST]
        self.screen.say(f"  the CDN received: {', '.join(hops) or 'nothing'}; evil.example was never "
                        "resolved or contacted (the redirect hop failed the allowlist check first)")
        redirected = any(s.host == HOSTILE_HOST and s.status == 302 for s in self.server.seen)
        ok = (not result.ok and self._code(result) == "EGRESS_DENIED" and "evil.example" in message
              and redirected)
        expected = "denied at the redirect hop (EGRESS_DENIED, host_not_allowed)"
        got = f"{self._code(result)}: {_tail(message)}"
        self._record("5a redirect to a forbidden host", expected, got, ok)

    def _hostile_auth(self) -> None:
        self.screen.say("\n[bold]5b[/] The plugin sets its own Authorization header")
        before = len(self.server.seen)
        result = self._call("hostile.send-auth", {})
        self.screen.result("hostile.send-auth", result)
        message = result.error.message if result.error else ""
        ok = (not result.ok and self._code(result) == "EGRESS_DENIED" and "authorization" in message.lower()
              and len(self.server.seen) == before)
        expected = "denied before sending (EGRESS_DENIED); server sees nothing"
        got = f"{self._code(result)}: {_tail(message)}"
        self._record("5b guest-supplied Authorization", expected, got, ok)

    def _hostile_secret(self) -> None:
        self.screen.say("\n[bold]5c[/] The plugin hunts for the tracker token")
        result = self._call("hostile.steal-secret", {})
        self.screen.result("hostile.steal-secret", result)
        output = result.output if isinstance(result.output, dict) else {}
        if output:
            self.screen.table("What the plugin found", ("attempt", "answer"), [
                ("secret_available('tracker_token')", str(output.get("secret_available"))),
                ("os.environ", json.dumps(output.get("environment"))),
                ("open('~/.stockade/secrets.json')", str(output.get("secrets_file"))),
                ("GET api.tracker.example (hoping for the token)", str(output.get("borrow_credential"))),
            ])
        leaked = self._leaks(json.dumps(result.output), result.log)
        borrowed = str(output.get("borrow_credential", ""))
        ok = (result.ok and output.get("secret_available") is False and not output.get("environment")
              and "denied" in borrowed.lower() and not leaked)
        got = ("no value reachable: secret_available=false, empty environment, no files, "
               "borrowing denied" if ok else f"{self._code(result)}: {json.dumps(result.output)[:200]}")
        self._record("5c read a secret", "only secret_available(); no value anywhere", got, ok)

    def _hostile_spin(self) -> None:
        self.screen.say("\n[bold]5d[/] The plugin loops forever")
        result = self._call("hostile.spin", {})
        self.screen.result("hostile.spin", result)
        code = self._code(result)
        self._record("5d spin forever", " or ".join(_CONTAINED_CODES), code, code in _CONTAINED_CODES)

    def _hostile_flood(self) -> None:
        limit = self._tool("hostile.flood").package.limits.memory_bytes
        self.screen.say(f"\n[bold]5e[/] The plugin allocates until something gives (limit {limit >> 20} MiB)")
        result = self._call("hostile.flood", {})
        self.screen.result("hostile.flood", result)
        code = self._code(result)
        after = self._call("tracker.list-issues", self._input("tracker.list-issues"))
        self.screen.result("tracker.list-issues (the host still serves)", after)
        ok = code == "SANDBOX_MEMORY" and after.ok
        expected = "SANDBOX_MEMORY; the host keeps serving"
        got = f"{code}; next call {self._code(after)}"
        self._record("5e flood memory", expected, got, ok)

    # -- 6. lock upgrade review -------------------------------------------------------------------------

    def step_diff(self) -> None:
        """Step 6: a lock upgrade that quietly widens the tracker's reach, caught by ``stockade diff``."""
        self.screen.step("6", "Reviewing a lock upgrade: stockade diff flags the escalation (exit 3)")
        ws = self.workspace
        bundle, changes = escalated_manifest(self.tracker_bundle, ws.bundles)
        shutil.copyfile(ws.lock, ws.lock_v2)
        update = add_package(ws.lock_v2, bundle, private_key=self.signing_key)  # as `stockade lock add`
        self.screen.say(f"Generation {update.generation} ({ws.lock_v2.name}) upgrades the tracker:")
        for change in changes:
            self.screen.say(f"  • {change}")
        argv = ["diff", str(ws.lock), str(ws.lock_v2), "--trusted-keys", str(ws.keys)]
        status, output = _run_cli(argv, width=max(80, self.screen.console.width - 4))
        self.screen.say(f"$ stockade {' '.join(argv)}")
        self.screen.panel(f"stockade diff (exit {status})", Text(output.rstrip()),
                          style="red" if status == 3 else "blue")
        flagged = output.count("ESCALATES")
        self._record("6 lock upgrade diff", "escalations flagged, exit 3",
                     f"exit {status}; {flagged} escalation(s) flagged", status == 3 and flagged > 0)

    # -- 7. audit log ----------------------------------------------------------------------------------

    def step_audit(self) -> None:
        """Step 7: close the host and verify the hash-chained audit log."""
        self.screen.step("7", "The audit log: every decision recorded, the hash chain verified")
        self.host.close()
        path = self.workspace.audit
        report = verify(path, expected_head=self.last_audit_id)
        rows = []
        for line in path.read_text("utf-8").splitlines():
            record = json.loads(line)
            outcome = ""
            if "ok" in record:
                outcome = "ok" if record["ok"] else str(record.get("error", {}).get("code", "?"))
            rows.append((str(record.get("seq")), str(record.get("kind")), str(record.get("tool", "")),
                         outcome, str(record.get("hash", ""))[:12] + "…"))
        self.screen.table(f"{path.name}", ("seq", "kind", "tool", "outcome", "hash"), rows)
        leaked = self._leaks(path.read_text("utf-8"))
        state = "chain intact" if report.ok else f"BROKEN at record {report.first_broken}: {report.reason}"
        self.screen.say(f"verify({path.name}, expected_head=<last audit id>) → {state}, "
                        f"{report.records} records (the same check as `stockade log verify {path}`)")
        ok = report.ok and report.records == len(rows) and not leaked
        self._record("7 audit log verified", "chain intact; every call recorded; token absent",
                     f"{state}; {report.records} records; token {'FOUND' if leaked else 'absent'}", ok)


def _brief(value: dict[str, Any]) -> str:
    """The call's input as JSON, long strings shortened (the model's text is not the point)."""
    shown = {k: (f"{v[:24]}…({len(v)} characters)" if isinstance(v, str) and len(v) > 60 else v)
             for k, v in value.items()}
    return json.dumps(shown, ensure_ascii=False)


def _tail(message: str, limit: int = 110) -> str:
    text = message.removeprefix("the tool failed: ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _masked(authorization: str) -> str:
    scheme, _, credential = authorization.partition(" ")
    return f"{scheme} {mask(credential)}" if credential else authorization


def _run_cli(argv: list[str], *, width: int) -> tuple[int, str]:
    """Run ``stockade ARGV`` as a user would, in its own process, capturing what it prints
    ``width`` columns wide (stdout and stderr, in order)."""
    # The same code as this demo (the directory holding sdk/ and host/ first on the path),
    # and rich sizes a console that is not a terminal by COLUMNS.
    path = [str(Path(__file__).resolve().parents[2]), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "COLUMNS": str(width), "PYTHONPATH": os.pathsep.join(path)}
    done = subprocess.run(  # the same interpreter's entry point: `stockade` need not be on PATH
        [sys.executable, "-m", "sdk.cli", *argv], env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=_CLI_TIMEOUT_S, check=False,
    )
    return done.returncode, done.stdout
