"""Versioned format ids (``"stockade.<name>/<n>"``) live in one place (docs/architecture.md).

A format id written as a string literal in code (docstrings and comments do not count)
belongs under ``host/formats/``, where its model parses and writes it; everyone else
imports the constant (``MANIFEST_FORMAT``, ``PIN_FORMAT``, ``LOCK_FORMAT``, ...). A
second copy of an id is how two modules come to disagree on which version they write.

:data:`NOT_YET_MOVED` lists the modules that still define a format's model and id outside
``host/formats/`` (the remaining moves of the layout; the sdk's review formats are to join
one sdk module). It may only shrink: a new id elsewhere fails this test.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FORMAT_ID = re.compile(r"^stockade\.[a-z][a-z0-9-]*/\d+$")

HOME = "host/formats/"
NOT_YET_MOVED: dict[str, set[str]] = {
    "host/approvals.py": {"stockade.approvals/1"},
    # The OAuth token state is read and written by egress, which sits below formats (as
    # does the secrets store): these two move once formats' leaf modules sit below both.
    "host/egress/oauth.py": {"stockade.oauth-token/1"},
    "host/mcp/tokens.py": {"stockade.tokens/1"},
    "host/policy/engine.py": {"stockade.policy/1"},
    "host/policy/toolpolicy.py": {"stockade.toolcap/1", "stockade.toolpolicy/1", "stockade.toolpolicy/2"},
    "host/scopes.py": {"stockade.scopes/1"},
    "host/secrets/store.py": {"stockade.secrets/1"},
    "host/signing.py": {"stockade.keys/1"},
    "host/trust/lock.py": {"stockade.lock/1"},
    "host/trust/lockstate.py": {"stockade.lock-state/1", "stockade.lock-state/2"},
    "sdk/oci/artifact.py": {"stockade.signature/1"},
    "sdk/review/report.py": {"stockade.diff/1", "stockade.report/1"},
}
"""Module → the ids it still defines; each entry is one move left (model and id)."""


def format_ids(source: str) -> set[str]:
    """The format ids a module's code spells as string literals (docstrings excluded)."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and FORMAT_ID.match(node.value)
    }


def misplaced(repo: Path) -> dict[str, set[str]]:
    """Module → format ids spelled outside ``host/formats/`` and beyond :data:`NOT_YET_MOVED`."""
    found: dict[str, set[str]] = {}
    for root in ("host", "sdk"):
        for path in sorted((repo / root).rglob("*.py")):
            rel = path.relative_to(repo).as_posix()
            if rel.startswith(HOME) or rel.startswith("sdk/guest/"):
                continue
            extra = format_ids(path.read_text(encoding="utf-8")) - NOT_YET_MOVED.get(rel, set())
            if extra:
                found[rel] = extra
    return found


def test_format_ids_are_spelled_only_in_their_home() -> None:
    assert misplaced(REPO) == {}


def test_the_list_of_moves_left_only_shrinks() -> None:
    # An entry whose module no longer spells the id is a move done: drop it from the list.
    stale = {
        rel: ids - format_ids((REPO / rel).read_text(encoding="utf-8"))
        for rel, ids in NOT_YET_MOVED.items()
        if not (REPO / rel).exists() or ids - format_ids((REPO / rel).read_text(encoding="utf-8"))
    }
    assert stale == {}


def test_a_copied_id_is_found_and_a_docstring_is_not(tmp_path: Path) -> None:
    (tmp_path / "host" / "formats").mkdir(parents=True)
    (tmp_path / "sdk").mkdir()
    (tmp_path / "host" / "formats" / "lockfmt.py").write_text('LOCK = "stockade.lock/1"\n')
    (tmp_path / "sdk" / "writer.py").write_text(textwrap.dedent('''\
        """Writes ``"stockade.lock/1"`` documents."""
        def doc():
            """A ``stockade.lock/1`` document."""
            return {"format": "stockade.lock/1"}  # stockade.lock/1
    '''))
    assert misplaced(tmp_path) == {"sdk/writer.py": {"stockade.lock/1"}}
