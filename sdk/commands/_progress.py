"""Progress for the author commands (build, test, dev, watch): honest, with elapsed time.

On a terminal a rich bar shows the current stage and the elapsed time. Otherwise (CI
logs, pipes) one plain line is printed on stderr when the stage changes, and at most
every :data:`LINE_EVERY_S` seconds while it lasts, each with the elapsed time, so a
first JavaScript build says it is installing the toolchain even in a log file.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

from host.errors import ManifestInvalid
from sdk.commands._common import cell, safe_text, stderr_console

if TYPE_CHECKING:  # host.runtime imports wasmtime: `stockade build` never needs it
    from host.runtime import ProgressEvent

__all__ = [
    "LINE_EVERY_S",
    "TEMPORARY_BUNDLE_NOTE",
    "BuildReport",
    "CompileReport",
    "author_progress",
    "problems_listed",
]

BuildReport = Callable[[str, float], None]
CompileReport = Callable[["ProgressEvent"], None]
LINE_EVERY_S: Final = 10.0  # s between repeated plain lines of one long stage
# `stockade test` and `dev` build into a temporary directory (docs/authors.md): say so.
TEMPORARY_BUNDLE_NOTE: Final = (
    "the bundle was built in a temporary directory; dist/ is unchanged: `stockade build` (or "
    "`stockade lock add .`) before locking"
)
_COUNTER: Final = re.compile(r"\s*\([^()]*\)$")  # "componentize-py (12 s)" -> "componentize-py"
_COMPILE_VERBS: Final = {
    "cached": "loaded compiled {name} from the cache",
    # measured: 6.4 s (Python template) and 8.4 s (examples/js-deps) on 2 idle cores
    "compiling": "compiling {name} (first time only; 5-20 s on 2 idle cores, longer on a busy machine)",
    "compiled": "compiled {name}",
}


@contextmanager
def author_progress(*, enabled: bool = True) -> Iterator[tuple[BuildReport, CompileReport]]:
    """``(on_build, on_compile)`` callbacks drawing a bar or printing plain lines.

    Args:
        enabled: False gives callbacks that print nothing (``--json``).
    """
    if not enabled:
        yield (lambda stage, fraction: None), (lambda event: None)
        return
    console = stderr_console()
    started = time.monotonic()
    if console.is_terminal:
        # rich.progress only where a bar is drawn (~0.1 s of import time otherwise spent).
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task("starting", total=1.0)

            def on_build(stage: str, fraction: float) -> None:
                bar.update(task, description=cell(stage), completed=fraction)

            def on_compile(event: ProgressEvent) -> None:
                done = 0.5 if event.stage == "compiling" else 1.0
                text = _COMPILE_VERBS[event.stage].format(name=event.name)
                bar.update(task, description=cell(text), completed=done)

            yield on_build, on_compile
        return
    last: dict[str, float] = {}

    def line(text: str) -> None:
        key = _COUNTER.sub("", text)
        now = time.monotonic()
        if key in last and now - last[key] < LINE_EVERY_S:
            return
        last.clear()
        last[key] = now
        console.print(f"[{now - started:5.1f} s] {cell(text)}", soft_wrap=True, highlight=False)

    yield (lambda stage, fraction: line(stage)), (
        lambda event: line(_COMPILE_VERBS[event.stage].format(name=event.name))
    )


@contextmanager
def problems_listed(*, enabled: bool = True) -> Iterator[None]:
    """List a multi-line ManifestInvalid's problems on stderr, one per line, then re-raise
    it with its first line as the message (the CLI prints messages on one line)."""
    try:
        yield
    except ManifestInvalid as exc:
        lines = exc.message.splitlines()
        if not enabled or len(lines) < 2:
            raise
        console = stderr_console()
        for line in lines[1:]:
            console.print(safe_text(line), markup=False, highlight=False, soft_wrap=True)
        details = dict(exc.details)
        raise ManifestInvalid(f"{lines[0].rstrip(':')} (listed above)", hint=exc.hint, **details) from None
