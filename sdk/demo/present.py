"""How the demo looks: numbered step headers, panels, result lines and the summary table.

Presentation only; :mod:`sdk.demo.run` decides what happens. Codes are never wrapped or
truncated (``no_wrap``), so the output can be searched for them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from host.types import CallResult

__all__ = ["Outcome", "Screen", "mask"]

_WIDTH_WHEN_PIPED: Final = 120  # columns when stdout is not a terminal (CI logs)
_OK: Final = "[bold green]✓[/]"
_FAIL: Final = "[bold red]✗[/]"


def mask(secret: str) -> str:
    """``****`` and the last four characters: enough to recognise, useless to steal."""
    return "****" + secret[-4:]


@dataclass(frozen=True)
class Outcome:
    """One row of the summary: what the step should show and what it showed."""

    step: str
    expected: str
    got: str
    ok: bool


class Screen:
    """The demo's console, with helpers for each kind of output.

    Args:
        console: where to print (a fresh one when None: 120 columns if not a terminal).
    """

    def __init__(self, console: Console | None = None) -> None:
        if console is None:
            console = Console(highlight=False)
            if not console.is_terminal:
                console = Console(highlight=False, width=_WIDTH_WHEN_PIPED)
        self.console = console

    def title(self, text: str, subtitle: str) -> None:
        """The banner at the start."""
        self.console.print(Panel(Text(subtitle), title=f"[bold]{escape(text)}[/]", border_style="cyan"))

    def step(self, number: str, text: str) -> None:
        """A numbered step header."""
        self.console.print()
        self.console.rule(f"[bold cyan]Step {number}[/]  {escape(text)}", align="left")

    def say(self, text: str) -> None:
        """A line of narration (rich markup allowed)."""
        self.console.print(text)

    def proposal(self, who: str, text: str) -> None:
        """``who → text``, the text printed as is (no markup)."""
        self.console.print(Text.assemble((f"{who} → ", "bold"), text))

    def warn_panel(self, title: str, lines: Iterable[str]) -> None:
        """A yellow panel for test-only settings the viewer must know about."""
        body = "\n".join(lines)
        self.console.print(Panel(body, title=f"[bold yellow]{escape(title)}[/]", border_style="yellow"))

    def panel(self, title: str, body: Any, *, style: str = "blue") -> None:
        """A titled panel around text or any rich renderable."""
        self.console.print(Panel(body, title=escape(title), border_style=style, expand=False))

    def json_panel(self, title: str, value: Any, *, style: str = "blue", limit: int = 1200) -> None:
        """A value as indented JSON (cut at ``limit`` characters)."""
        text = json.dumps(value, indent=2, ensure_ascii=False)
        if len(text) > limit:
            text = text[:limit] + "\n…"
        self.panel(title, Text(text), style=style)

    def result(self, label: str, result: CallResult) -> None:
        """One call's outcome on one line: ok with usage, or the code and message."""
        usage = result.usage
        spent = f"fuel {usage.fuel:,} · {usage.duration_ms:.0f} ms · {usage.http_requests} HTTP"
        if result.ok:
            self.console.print(f"  {escape(label)} → [bold green]ok[/]  [dim]({spent})[/]")
            return
        error = result.error
        code = error.code if error else "?"
        message = error.message if error else ""
        self.console.print(f"  {escape(label)} → [bold red]{code}[/]  [dim]({spent})[/]")
        self.console.print(Text(f"    {message}", style="red"), overflow="fold")

    def check(self, ok: bool, text: str) -> None:
        """A ✓/✗ line."""
        self.console.print(f"  {_OK if ok else _FAIL} {text}")

    def table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
        """A simple table; the first column never wraps."""
        table = Table(title=title, title_justify="left", show_lines=False)
        for index, column in enumerate(columns):
            table.add_column(column, no_wrap=index == 0, overflow="fold")
        for row in rows:
            table.add_row(*row)
        self.console.print(table)

    def summary(self, outcomes: Sequence[Outcome], elapsed_s: float) -> None:
        """The closing table: step, expected, got, ✓/✗."""
        table = Table(title="Summary", title_justify="left", show_lines=True)
        table.add_column("step", no_wrap=True)
        table.add_column("expected", ratio=3, overflow="fold")
        table.add_column("got", ratio=3, overflow="fold")
        table.add_column("", no_wrap=True, justify="center")
        for outcome in outcomes:
            table.add_row(escape(outcome.step), escape(outcome.expected), escape(outcome.got),
                          _OK if outcome.ok else _FAIL)
        passed = sum(o.ok for o in outcomes)
        verdict = (
            f"[bold green]all {passed} steps behaved as expected[/]"
            if passed == len(outcomes)
            else f"[bold red]{len(outcomes) - passed} of {len(outcomes)} steps did not behave as expected[/]"
        )
        self.console.print()
        self.console.print(Group(table, Text.from_markup(f"{verdict}  [dim]({elapsed_s:.1f} s)[/]")))
