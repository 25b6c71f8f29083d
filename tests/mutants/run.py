"""Hand-made mutants of the host's security checks, and whether the tests kill them.

A developer script, not a test: pytest does not collect it (no ``test_`` prefix) and CI
does not run it. Each mutant in :data:`MUTANTS` replaces one exact snippet of one module
(a comparison loosened, a field left unsigned, a check dropped) by a plausible mistake;
the tests it names should then fail. A mutant they do not kill marks a check no test pins.

Usage, from the repository root with the dev environment's Python::

    python tests/mutants/run.py                      # every mutant; a table at the end
    python tests/mutants/run.py --module host/call/prepare.py
    python tests/mutants/run.py --mutant 6-approval-expiry-inclusive
    python tests/mutants/run.py --list               # the table; is each snippet still found, does it compile
    python tests/mutants/run.py --json               # results as JSON on stdout

How it runs: the checkout is copied once to a temporary directory (without ``.git``,
bytecode and tool caches; symlinks such as ``.stockade-cache`` stay symlinks, so built
plugins are reused). First each distinct set of tests runs once unmutated there (a set
that fails already cannot judge a mutant: ``--no-baseline`` skips this). Then, one mutant
at a time, the module in the copy is rewritten, ``python -m pytest -x -q`` runs the
mutant's tests in the copy, and the module is restored in a ``finally`` and checked to be
byte-for-byte the original before the next mutant. The checkout itself is never written.
Bytecode is never written either (``PYTHONDONTWRITEBYTECODE``), so a mutant restored
within the same second cannot leave a stale ``.pyc`` behind.

Statuses: ``killed`` (the tests failed), ``survived`` (they passed), ``timeout`` (counted
as killed), ``error`` (the snippet is not in the module exactly once, the mutant does not
compile, the unmutated tests already fail, or pytest could not run), ``equivalent`` (a
mutant known to change no behaviour: listed, not run, not counted). The kill rate is
killed (with timeouts) over killed plus survived. Exit status: 0 when no mutant survived
and none was in error, 1 otherwise, 2 for a usage error.

Adding a mutant: one :class:`Mutant` row, its snippet copied exactly from the module (it
must occur once), the narrowest test paths that should kill it, then
``python tests/mutants/run.py --mutant ID``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NoReturn

REPO = Path(__file__).resolve().parents[2]

BROAD = ("tests/unit/host", "tests/security")
"""The kill set of mutants whose own tests live elsewhere: every host unit and security test."""

_IGNORED = shutil.ignore_patterns(
    ".git", "__pycache__", "*.pyc", ".pytest_cache", ".hypothesis", ".ruff_cache", ".mypy_cache", ".coverage*"
)


@dataclass(frozen=True)
class Mutant:
    """One hand-made mutant.

    Args:
        id: a short unique name, prefixed by the issue item it belongs to.
        item: the item of the mutation-testing issue that added its tests.
        module: the mutated file, relative to the repository root.
        snippet: the exact source text replaced (must occur once in ``module``).
        replacement: what replaces it.
        tests: pytest paths that should kill it.
        equivalent: True when the mutant changes no behaviour (not run, not counted).
        note: what the mistake would let through.
    """

    id: str
    item: int
    module: str
    snippet: str
    replacement: str
    tests: tuple[str, ...]
    equivalent: bool = False
    note: str = ""


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "1-wildcard-without-its-dot", 1, "host/egress/urls.py",
        'not url.host.endswith("." + self.host)', "not url.host.endswith(self.host)", BROAD,
        note="*.example.com matches evilexample.com",
    ),
    Mutant(
        "2-redact-lower-view", 2, "host/secrets/redact.py",
        "return s.lower() if s.isascii() else s.translate(_ASCII_LOWER)", "return s.lower()",
        ("tests/unit/host/test_redact.py",),
        note="a case-insensitive form after 20 x 'İ' keeps 20 characters of the secret in clear",
    ),
    Mutant(
        "2-redact-casefold-view", 2, "host/secrets/redact.py",
        "return s.lower() if s.isascii() else s.translate(_ASCII_LOWER)", "return s.casefold()",
        ("tests/unit/host/test_redact.py",),
        note="the same drift with 'ß', 'ẞ', 'ﬁ' before the form",
    ),
    Mutant(
        "3a-query-name-to-the-last-equals", 3, "host/egress/hygiene.py",
        'yield part.split("=", 1)[0]', 'yield part.rsplit("=", 1)[0]', BROAD,
        note="?sig=abc== is read as the parameter 'sig=abc=' and let through",
    ),
    Mutant(
        "3b-router-query-name-to-the-last-equals", 3, "host/egress/router.py",
        'names.add(_fold_query(part.split("=", 1)[0]))', 'names.add(_fold_query(part.rsplit("=", 1)[0]))',
        BROAD,
        note="a guest copy of an injected parameter with '=' in its value is not a conflict",
    ),
    Mutant(
        "4a-checkpoint-time-unsigned", 4, "host/audit/log.py",
        '            "time": time,\n', "", ("tests/security/test_audit_tamper.py",),
        note="the last checkpoint can be re-dated and re-hashed; `log verify --key` says intact",
    ),
    Mutant(
        "4b-checkpoint-reason-unsigned", 4, "host/audit/log.py",
        '            "reason": reason,\n        }', "        }", ("tests/security/test_audit_tamper.py",),
        note="a checkpoint's reason (e.g. close) can be rewritten",
    ),
    Mutant(
        "4d-checkpoint-head-unchecked", 4, "host/audit/log.py",
        'if head != record["prev"] or type(count) is not int', "if type(count) is not int",
        ("tests/security/test_audit_tamper.py",),
        note="key-less verify accepts a checkpoint whose head is not its predecessor",
    ),
    Mutant(
        "5a-base64-not-canonical", 5, "host/signing.py",
        'if len(raw) != size or base64.b64encode(raw).decode("ascii") != value:', "if len(raw) != size:",
        BROAD,
        note="a signature or public key respelled with its trailing bits set is accepted",
    ),
    Mutant(
        "5b-base64-padding-tolerant", 5, "host/signing.py",
        'base64.b64decode(value.encode("ascii"), validate=True)',
        'base64.b64decode(value.encode("ascii") + b"==", validate=False)', BROAD,
        equivalent=True,
        note="alone it changes nothing: the re-encode comparison still refuses the unpadded spelling",
    ),
    Mutant(
        "6-approval-expiry-inclusive", 6, "host/approvals.py",
        "ok &= approval.expires_at > reference", "ok &= approval.expires_at >= reference",
        ("tests/unit/host/test_plan_binding.py",),
        note="an approval is accepted at exactly its expiry instant",
    ),
    Mutant(
        "7-checkpoint-count-unchecked", 7, "host/audit/log.py",
        'type(count) is not int or count != record["seq"] - 1:', "type(count) is not int:",
        ("tests/security/test_audit_tamper.py",),
        note="key-less verify accepts a checkpoint whose count is off its place in the chain",
    ),
    Mutant(
        "8a-encoded-del-in-a-path", 8, "host/egress/urls.py",
        "if any(ord(c) < 0x20 or ord(c) == 0x7F for c in decoded):", "if any(ord(c) < 0x20 for c in decoded):",
        BROAD,
        note="/file%7F.json is let through",
    ),
    Mutant(
        "8b-port-with-one-leading-zero", 8, "host/egress/urls.py",
        'if len(text) > 1 and text.startswith("0"):', 'if len(text) > 2 and text.startswith("0"):', BROAD,
        note="https://a.example:01/ is accepted",
    ),
    Mutant(
        "8c-only-the-first-header-credential", 8, "host/egress/router.py",
        "out_headers.append((item.name, item.value))\n            continue",
        "out_headers.append((item.name, item.value))\n            break", BROAD,
        note="later header and query credentials are silently dropped",
    ),
    Mutant(
        "8d-optional-bearer-required", 8, "host/egress/router.py",
        '"Bearer ", "", bool(mapping.optional))', '"Bearer ", "", False)', BROAD,
        note="an optional bearer secret that is not staged fails the request",
    ),
    Mutant(
        "8d-optional-basic-required", 8, "host/egress/router.py",
        "str(location.username), bool(mapping.optional))", "str(location.username), False)", BROAD,
        note="an optional basic secret that is not staged fails the request",
    ),
    Mutant(
        "8d-optional-query-required", 8, "host/egress/router.py",
        'name, "", "",\n                     bool(mapping.optional))', 'name, "", "",\n                     False)',
        BROAD,
        note="an optional query secret that is not staged fails the request",
    ),
    Mutant(
        "8e-one-letter-label-refused", 8, "host/egress/urls.py",
        "below = url.host[: -len(self.host) - 1]", "below = url.host[: -len(self.host) - 2]", BROAD,
        note="a.example.com is refused under *.example.com",
    ),
    Mutant(
        "9a-only-tool-call-asked", 9, "host/call/prepare.py",
        "    permissions = required_permissions(tool)\n", "    permissions = required_permissions(tool)[:1]\n",
        ("tests/unit/host/test_plan_binding.py",),
        note="a principal granted tool.call:X runs X without its declared permissions",
    ),
    Mutant(
        "9a-declared-deny-ignored", 9, "host/call/prepare.py",
        "        if decision.verdict is Verdict.DENY:\n",
        '        if decision.verdict is Verdict.DENY and permission.startswith("tool.call:"):\n',
        ("tests/unit/host/test_plan_binding.py",),
        note="a deny of a declared permission is ignored",
    ),
    Mutant(
        "9b-approval-session-unbound", 9, "host/approvals.py",
        "    ok &= approval.session == plan.request.session\n", "",
        ("tests/unit/host/test_plan_binding.py",),
        note="an approval issued in session A is redeemed in session B",
    ),
)


@dataclass
class Result:
    """What happened to one mutant."""

    id: str
    item: int
    module: str
    status: str  # killed | survived | timeout | error | equivalent
    seconds: float = 0.0
    detail: str = ""


def _copy_tree(destination: Path) -> Path:
    root = destination / "tree"
    shutil.copytree(REPO, root, symlinks=True, ignore=_IGNORED)
    return root


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _pytest(root: Path, tests: Sequence[str], timeout: float) -> tuple[str, float, str]:
    """Run ``pytest -x -q`` on ``tests`` in ``root``: (status, seconds, last output line)."""
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    started = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=root, env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole session: pytest and what it started
        proc.communicate()
        return "timeout", time.monotonic() - started, f"over {timeout:.0f} s"
    seconds = time.monotonic() - started
    lines = [line for line in out.splitlines() if line.strip()]
    failed = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    last = (failed[0][:160] + " | " if failed else "") + (lines[-1] if lines else "")
    status = {0: "survived", 1: "killed"}.get(proc.returncode, "error")
    if status == "error":
        last = f"pytest exited {proc.returncode}: {last}"
    return status, seconds, last


def _check(mutant: Mutant, root: Path) -> str:
    """"ok" when the snippet occurs once in its module and the mutant compiles, else why not."""
    try:
        text = (root / mutant.module).read_text(encoding="utf-8")
    except OSError:
        return "no module"
    found = text.count(mutant.snippet)
    if found != 1:
        return f"found {found}x"
    try:
        compile(text.replace(mutant.snippet, mutant.replacement), mutant.module, "exec")
    except SyntaxError:
        return "no compile"
    return "ok"


@contextmanager
def _applied(path: Path, original: bytes, mutated: bytes) -> Iterator[None]:
    """``path`` holds ``mutated`` inside the block and exactly ``original`` after it."""
    if path.read_bytes() != original:
        raise RuntimeError(f"{path} is not its original before a mutant was applied")
    path.write_bytes(mutated)
    try:
        yield
    finally:
        path.write_bytes(original)
        if path.read_bytes() != original:
            raise RuntimeError(f"{path} could not be restored to its original bytes")


def _run_one(mutant: Mutant, root: Path, timeout: float) -> Result:
    result = Result(mutant.id, mutant.item, mutant.module, "error")
    if mutant.equivalent:
        result.status, result.detail = "equivalent", mutant.note
        return result
    path = root / mutant.module
    original = path.read_bytes()
    text = original.decode("utf-8")
    found = text.count(mutant.snippet)
    if found != 1:
        result.detail = f"snippet found {found} times in {mutant.module} (expected once): update the table"
        return result
    mutated = text.replace(mutant.snippet, mutant.replacement).encode("utf-8")
    try:  # a mutant that does not even compile would be "killed" by any test
        compile(mutated, mutant.module, "exec")
    except SyntaxError as exc:
        result.detail = f"the mutant does not compile: {exc.msg} (line {exc.lineno})"
        return result
    with _applied(path, original, mutated):
        result.status, seconds, result.detail = _pytest(root, mutant.tests, timeout)
        result.seconds = round(seconds, 2)
    return result


def _select(modules: Sequence[str], ids: Sequence[str]) -> list[Mutant]:
    if len({m.id for m in MUTANTS}) != len(MUTANTS):
        _usage("two mutants share an id")
    wanted_modules = {_module_path(name) for name in modules}
    chosen = [
        m for m in MUTANTS
        if (not wanted_modules or m.module in wanted_modules) and (not ids or m.id in ids)
    ]
    unknown = sorted(set(ids) - {m.id for m in MUTANTS})
    if unknown:
        _usage(f"unknown mutant {', '.join(unknown)} (see --list)")
    if not chosen:
        _usage("no mutant matches (see --list)")
    return chosen


def _usage(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _module_path(name: str) -> str:
    """``host/call/prepare.py``, ``host.call.prepare`` and ``./host/call/prepare.py`` all name the same module."""
    name = name.removeprefix("./")
    return name if name.endswith(".py") else name.replace(".", "/") + ".py"


def _baseline(mutants: Iterable[Mutant], root: Path, timeout: float, quiet: bool) -> dict[tuple[str, ...], str]:
    """Each distinct kill set run once unmutated: its failure message, or "" when it passes."""
    failing: dict[tuple[str, ...], str] = {}
    for tests in dict.fromkeys(m.tests for m in mutants if not m.equivalent):
        status, seconds, detail = _pytest(root, tests, timeout)
        if not quiet:
            print(f"baseline {' '.join(tests)}: {'ok' if status == 'survived' else status} ({seconds:.0f} s)")
        failing[tests] = "" if status == "survived" else f"the unmutated tests fail: {detail}"
    return failing


def _summary(results: Sequence[Result]) -> dict[str, object]:
    modules: dict[str, dict[str, int]] = {}
    for r in results:
        row = modules.setdefault(r.module, {"killed": 0, "survived": 0, "timeout": 0, "error": 0, "equivalent": 0})
        row[r.status] += 1
    killed = sum(1 for r in results if r.status in ("killed", "timeout"))
    survived = sum(1 for r in results if r.status == "survived")
    judged = killed + survived
    return {
        "modules": modules,
        "killed": killed,
        "survived": survived,
        "errors": sum(1 for r in results if r.status == "error"),
        "equivalent": sum(1 for r in results if r.status == "equivalent"),
        "kill_rate": round(killed / judged, 4) if judged else None,
    }


def _rate(killed: int, survived: int) -> str:
    judged = killed + survived
    return f"{100 * killed / judged:.0f}%" if judged else "-"


def _print_results(results: Sequence[Result], summary: dict[str, object]) -> None:
    width = max(len(r.id) for r in results)
    print(f"\n{'mutant':<{width}}  item  {'status':<10}  {'time':>6}  detail")
    for r in results:
        print(f"{r.id:<{width}}  {r.item:>4}  {r.status:<10}  {r.seconds:>5.0f}s  {r.detail}")
    modules = summary["modules"]
    assert isinstance(modules, dict)
    mwidth = max(len(name) for name in modules)
    print(f"\n{'module':<{mwidth}}  killed  survived  errors  equivalent  kill rate")
    for name, row in sorted(modules.items()):
        killed = row["killed"] + row["timeout"]
        print(
            f"{name:<{mwidth}}  {killed:>6}  {row['survived']:>8}  {row['error']:>6}  {row['equivalent']:>10}  "
            f"{_rate(killed, row['survived']):>9}"
        )
    killed, survived = int(str(summary["killed"])), int(str(summary["survived"]))
    print(
        f"\n{killed} killed, {survived} survived, {summary['errors']} errors, "
        f"{summary['equivalent']} equivalent: kill rate {_rate(killed, survived)}"
    )


def _list(mutants: Sequence[Mutant], as_json: bool) -> int:
    rows = [{**asdict(m), "tests": list(m.tests), "check": _check(m, REPO)} for m in mutants]
    if as_json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        width = max(len(m.id) for m in mutants)
        print(f"{'mutant':<{width}}  item  {'module':<24}  {'snippet':<10}  tests")
        for row, m in zip(rows, mutants, strict=True):
            state = "equivalent" if m.equivalent and row["check"] == "ok" else row["check"]
            print(f"{m.id:<{width}}  {m.item:>4}  {m.module:<24}  {state:<10}  {' '.join(m.tests)}")
            if m.note:
                print(f"{'':<{width}}        {m.note}")
    return 0 if all(row["check"] == "ok" for row in rows) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--module", action="append", default=[], metavar="PATH",
                        help="only mutants of this module (host/call/prepare.py or host.call.prepare); repeatable")
    parser.add_argument("--mutant", action="append", default=[], metavar="ID", help="only this mutant; repeatable")
    parser.add_argument("--list", action="store_true", help="list the mutants and check their snippets; run nothing")
    parser.add_argument("--json", action="store_true", help="print the results (or the list) as JSON")
    parser.add_argument("--timeout", type=float, default=1800.0, metavar="S", help="seconds per pytest run")
    parser.add_argument("--no-baseline", action="store_true", help="do not run the tests unmutated first")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy (its path is printed)")
    args = parser.parse_args(argv)
    mutants = _select(args.module, args.mutant)
    if args.list:
        return _list(mutants, args.json)
    quiet = args.json
    tmp = Path(tempfile.mkdtemp(prefix="stockade-mutants-"))
    try:
        root = _copy_tree(tmp)
        if not quiet:
            print(f"copy of the checkout: {root}")
        failing = {} if args.no_baseline else _baseline(mutants, root, args.timeout, quiet)
        results: list[Result] = []
        for mutant in mutants:
            if failing.get(mutant.tests) and not mutant.equivalent:
                results.append(Result(mutant.id, mutant.item, mutant.module, "error", 0.0, failing[mutant.tests]))
            else:
                results.append(_run_one(mutant, root, args.timeout))
            if not quiet:
                r = results[-1]
                print(f"{r.id}: {r.status} ({r.seconds:.0f} s)", flush=True)
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    summary = _summary(results)
    if args.json:
        print(json.dumps({"mutants": [asdict(r) for r in results], **summary}, indent=2, ensure_ascii=False))
    else:
        _print_results(results, summary)
    return 0 if summary["survived"] == 0 and summary["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
