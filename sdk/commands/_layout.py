"""Review output that fits where it is read: a terminal, or an 80-column CI log.

:func:`emit` prints a titled section of rows. When the rows fit the console width
without wrapping, they are a table; below that, every row becomes a block of one field
per line, so no cell is ever folded into an unreadable narrow column. Every cell is
untrusted text: control characters are shown escaped and rich markup is neutralized.
Without a terminal, rich prints no colour codes (and callers show no spinners).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from sdk.commands._common import cell, safe_text

if TYPE_CHECKING:
    from rich.console import Console

MIN_TABLE_WIDTH: Final = 60  # columns; narrower consoles always get one field per line
_BORDER: Final = 3  # columns a rich table spends per column (padding and rule)


def natural_width(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> int:
    """The width a table needs to show every cell on one line."""
    widths = [len(column) for column in columns]
    for row in rows:
        for index, value in enumerate(row):
            longest = max((len(line) for line in safe_text(value).splitlines()), default=0)
            widths[index] = max(widths[index], longest)
    return sum(widths) + _BORDER * len(columns) + 1


def emit(
    console: Console,
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    empty: str = "none",
) -> None:
    """Print one section: a table if it fits ``console.width``, else one field per line;
    ``title: empty`` when there are no rows."""
    from rich.table import Table

    if not rows:
        console.print(f"{cell(title)}: {cell(empty)}", highlight=False)
        return
    if console.width >= MIN_TABLE_WIDTH and natural_width(columns, rows) <= console.width:
        table = Table(title=cell(title), title_justify="left")
        for column in columns:
            table.add_column(column, no_wrap=True)
        for row in rows:
            table.add_row(*(cell(value) for value in row))
        console.print(table)
        return
    console.print(cell(title), highlight=False)
    label = max(len(column) for column in columns[1:]) if len(columns) > 1 else 0
    for row in rows:
        console.print(f"  {cell(row[0])}", highlight=False, soft_wrap=True)
        for column, value in zip(columns[1:], row[1:], strict=True):
            console.print(f"    {cell(column):<{label}}  {cell(value)}", highlight=False, soft_wrap=True)
