"""``stockade init``: set up a host in one step.

Writes the host config file (``./stockade.host.toml``, or the ``--config`` path) that
every host command reads, so options such as ``--trusted-keys`` are not repeated on
each command; creates the state directory (mode 0700), an empty policy file
(``policy.json``) and the secrets master key (``master.key``, mode 0600), keeping any
that already exist; then prints the commands that take you to a first call: for each
tool of the lock, the ``stockade policy grant-tool`` line that grants exactly what it
declares, and a ``stockade call`` line. The lock's packages are compiled into the
per-user artifact cache, so ``stockade serve`` started afterwards starts warm.

``--trusted-keys FILE`` also turns on ``require_signatures`` (pass
``--allow-unsigned`` to keep unsigned packages loadable: it records
``unsafe_allow_unsigned = true``, since a host with trusted keys otherwise refuses them).
An existing config file is never overwritten.

Exit codes: 0 ok, 1 refused (the config file exists, a file cannot be written), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sdk.commands._common import EXIT_OK, CommandFailed, print_json, verified_lock

if TYPE_CHECKING:
    from host.formats.hostfile import HostFile


def register(sub: Any) -> None:
    """Add the ``init`` subcommand."""
    parser = sub.add_parser(
        "init",
        help="write a host config, policy file and secrets key; print the next commands",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # dest names differ from the host options on purpose: init writes the config file,
    # it must not read one (sdk.commands._common.apply_host_file)
    parser.add_argument(
        "--state-dir",
        dest="new_state_dir",
        default=".stockade",
        metavar="DIR",
        help="host state directory to record (default: .stockade)",
    )
    parser.add_argument(
        "--lock",
        dest="new_lock",
        default="stockade.lock",
        metavar="FILE",
        help="lock file to record (default: stockade.lock)",
    )
    parser.add_argument(
        "--trusted-keys",
        dest="new_trusted_keys",
        default=None,
        metavar="FILE",
        help="trusted keys file (stockade.keys/1) to record; turns on require_signatures",
    )
    parser.add_argument(
        "--allow-unsigned", action="store_true",
        help="with --trusted-keys: do not require signatures (records unsafe_allow_unsigned = true)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--project", default="PROJECT", help="project for the printed commands")
    parser.add_argument("--subject", default="SUBJECT", help="subject for the printed commands")
    parser.set_defaults(func=run)


def _relative(value: str, base: Path) -> str:
    """A path as the config file records it (relative to the file, as written by the user)."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return str(path)
    return os.path.relpath(Path.cwd() / path, base)


def run(args: argparse.Namespace) -> int:
    """Write the config file, the policy file and the key; print the next commands."""
    from host.formats.hostfile import CONFIG_ENV, FILE_NAME, render_host_file

    target = Path(args.config or os.environ.get(CONFIG_ENV) or FILE_NAME).expanduser().absolute()
    if target.exists():
        raise CommandFailed(
            "CONFIG_EXISTS",
            f"{target} exists; refusing to overwrite a host config file",
            hint=f"edit {target} (keys in `stockade init --help`), or remove it first",
        )
    base = target.parent
    keys = args.new_trusted_keys
    if keys and not Path(keys).expanduser().is_file():
        raise CommandFailed(
            "KEYS_NOT_FOUND",
            f"trusted keys file {keys} not found; nothing was written",
            hint="name the stockade.keys/1 file of the signer's key "
            "(`stockade keygen --keys-file` writes one)",
        )
    text = render_host_file(
        state_dir=_relative(args.new_state_dir, base),
        lock=_relative(args.new_lock, base),
        trusted_keys=_relative(keys, base) if keys else None,
        require_signatures=bool(keys) and not args.allow_unsigned,
        unsafe_allow_unsigned=bool(keys) and args.allow_unsigned,
    )
    settings = _write_config(target, text)
    state = settings.state_dir or base / ".stockade"
    created = _make_state(state)
    waived = bool(settings.unsafe_allow_unsigned)
    lock = settings.lock
    show = not args.json
    tools, problem = _locked_tools(lock, settings.trusted_keys, waived, show=show) if lock else ([], None)
    steps = _next_commands(args, tools, settings.lock, problem)
    if args.json:
        print_json(
            {"ok": True, "config": str(target), "state_dir": str(state), "created": created, "next": steps}
        )
        return EXIT_OK
    print(f"wrote {target}")
    for line in text.splitlines():
        if not line.startswith("#") and "=" in line:
            print(f"  {line}")
    for item in created:
        print(item)
    print("next:")
    for step in steps:
        print(f"  {step}")
    return EXIT_OK


def _write_config(target: Path, text: str) -> HostFile:
    """Create ``target`` holding ``text`` and read it back; never leave a broken file.

    Paths are escaped by :func:`host.formats.hostfile.render_host_file` (control characters
    included); the file appears whole (:func:`host.files.create_exclusive`)
    and is removed again if it does not read back as a valid host config.

    Raises:
        CommandFailed: CONFIG_INVALID (a path that is not text, or a file that does not
            read back), CONFIG_EXISTS (created meanwhile), CONFIG_UNWRITABLE.
    """
    from host.errors import ConfigInvalid
    from host.files import create_exclusive
    from host.formats.hostfile import load_host_file

    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise CommandFailed(
            "CONFIG_INVALID",
            "a path given to init is not valid UTF-8 text; nothing was written",
            hint="rename it, or pass a path a TOML file can hold",
        ) from None
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        create_exclusive(target, data, mode=0o600)  # 0600 whatever the umask
    except FileExistsError:
        raise CommandFailed(
            "CONFIG_EXISTS", f"{target} exists; refusing to overwrite a host config file"
        ) from None
    except OSError as exc:
        raise CommandFailed("CONFIG_UNWRITABLE", f"cannot write {target}: {exc.strerror or exc}") from None
    try:
        return load_host_file(target)
    except ConfigInvalid as exc:
        target.unlink(missing_ok=True)
        raise CommandFailed("CONFIG_INVALID", f"{exc.message}; the file was removed again") from None


def _make_state(state: Path) -> list[str]:
    from host.policy.engine import FilePolicyEngine
    from host.secrets.store import generate_key_file

    done: list[str] = []
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    policy = state / "policy.json"
    if policy.exists():
        done.append(f"kept {policy}")
    else:
        FilePolicyEngine.initialize(policy)
        done.append(f"created {policy} (no roles yet: every call is denied until you grant one)")
    key = state / "master.key"
    if os.path.lexists(key) or "STOCKADE_MASTER_KEY" in os.environ:
        done.append(f"kept {key if os.path.lexists(key) else 'STOCKADE_MASTER_KEY'}")
    else:
        generate_key_file(key)
        done.append(f"created {key} (mode 0600; back it up: without it stored secrets cannot be read)")
    return done


def sample_input(schema: Any) -> Any:
    """A value the bounded schema accepts (for the printed ``stockade call`` line)."""
    if not isinstance(schema, dict):
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: sample_input(properties.get(name)) for name in schema.get("required", [])}
    if kind == "string":
        low, high = int(schema.get("minLength", 0)), int(schema.get("maxLength", 7))
        return "example"[:high] if low <= min(7, high) else "x" * low
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "array":
        return [sample_input(schema.get("items"))] * int(schema.get("minItems", 0))
    return False if kind == "boolean" else None


Locked = tuple[str, str, list[str], Any]


def _locked_tools(
    lock: Path, trusted_keys: Path | None, waived: bool, *, show: bool
) -> tuple[list[Locked], str | None]:
    """(tool, version, required secrets, sample input) of every locked tool, and why the
    lock could not be read (``None`` when it could, or when there is no lock yet).

    Each package is compiled into the artifact cache ``stockade serve`` loads from, so a
    server registered after ``init`` starts warm.
    """
    from host.errors import StockadeError
    from sdk.commands._warm import warm_packages

    if not lock.exists():
        return [], None
    try:
        loaded = verified_lock(
            lock, trusted_keys=trusted_keys, require_signatures=False, unsafe_allow_unsigned=waived
        )
    except StockadeError as exc:
        return [], f"{exc.code}: {exc.message}"
    warm_packages([(p.binding.package, p.module_bytes) for p in loaded.packages], show=show)
    found: list[Locked] = []
    for package in loaded.packages:
        http = package.manifest.http
        secrets = sorted({c.secret for c in http.credentials if not c.optional}) if http else []
        found.extend(
            (tool.name, tool.version, secrets, sample_input(tool.input_schema))
            for tool in package.manifest.tools
        )
    return found, None


def _next_commands(
    args: argparse.Namespace, tools: list[Locked], lock: Path | None, problem: str | None
) -> list[str]:
    project, subject = shlex.quote(args.project), shlex.quote(args.subject)
    if not tools:
        first = (
            f"stockade lock verify   # the lock does not verify yet: {problem}"
            if problem
            else f"stockade lock add BUNDLE_DIR --key KEY.pem   # pin a bundle in {lock or 'stockade.lock'}"
        )
        return [
            first,
            f"stockade policy grant-tool {project} {subject} TOOL@VERSION --role agent   # for each tool",
            f"stockade call TOOL@VERSION --project {project} --subject {subject} --input JSON",
        ]
    steps = ["stockade lock verify"]
    secrets: set[str] = set()
    for name, version, needed, _ in tools:
        steps.append(f"stockade policy grant-tool {project} {subject} {name}@{version} --role agent")
        secrets.update(needed)
    steps.extend(
        f"stockade secrets set {secret} --project {project} --subject {subject}   # value from stdin"
        for secret in sorted(secrets)
    )
    name, version, _, example = tools[0]
    data = shlex.quote(json.dumps(example))
    steps.append(f"stockade call {name}@{version} --project {project} --subject {subject} --input {data}")
    return steps
