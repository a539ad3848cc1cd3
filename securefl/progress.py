"""Progress of long commands: a rich bar on a terminal, plain lines everywhere else.

:func:`make_progress` returns a :class:`rich.progress.Progress` when stderr is a terminal
and a :class:`PlainProgress` when it is piped or redirected (a log file, ``| tee``, CI).
Both take the same calls (``add_task``, ``update``, ``advance``, ``console.print``), so
the runner and the benchmarks do not care which one they drive.

A rich bar drawn into a file would show nothing until the end, so :class:`PlainProgress`
writes one line per event instead: every new task description (a job's setup, a
method's phase such as FedProp's warm-up or CrossClientLP, a benchmark's start; a
description that only drops the end of the previous one, as when a phase ends, is not
written) and every line printed through its console (the runner's per-round lines).
When nothing has been written for ``heartbeat`` seconds it writes a line saying what is still running, for
how long, and how far it got, so a piped run never goes silent for minutes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

HEARTBEAT_SECONDS = 30.0
"""Longest silence of a piped run before a "still running" line."""


def make_progress(console: Console | None = None, *, heartbeat: float = HEARTBEAT_SECONDS) -> Any:
    """The progress display of every long-running command (on stderr by default)."""
    console = console or Console(stderr=True)
    if not console.is_terminal:
        return PlainProgress(console, heartbeat=heartbeat)
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


@dataclass
class _Task:
    description: str
    total: float | None
    completed: float
    started: float


class _LineConsole:
    """What ``progress.console`` is for :class:`PlainProgress`: prints whole lines."""

    def __init__(self, owner: "PlainProgress") -> None:
        self._owner = owner

    def print(self, *objects: Any, **options: Any) -> None:
        self._owner.write(*objects, **options)

    @property
    def is_terminal(self) -> bool:
        return False


class PlainProgress:
    """Line-by-line stand-in for :class:`rich.progress.Progress` (see the module docstring).

    ``clock`` is injectable for tests.  Lines go to ``console`` (rich markup is rendered
    as plain text when it is not a terminal).
    """

    def __init__(
        self,
        console: Console,
        *,
        heartbeat: float = HEARTBEAT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._out = console
        self.console = _LineConsole(self)
        self.heartbeat = heartbeat
        self._clock = clock
        self._tasks: dict[int, _Task] = {}
        self._current: int | None = None
        self._lock = threading.RLock()
        self._last_line = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "PlainProgress":
        if self.heartbeat > 0:
            self._thread = threading.Thread(
                target=self._beat, name="securefl-heartbeat", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def write(self, *objects: Any, **options: Any) -> None:
        """Print one line (through rich, so markup is stripped) and reset the silence timer."""
        options.setdefault("soft_wrap", True)  # one event, one line, however long
        options.setdefault("highlight", False)
        with self._lock:
            self._out.print(*objects, **options)
            self._last_line = self._clock()

    def add_task(self, description: str, *, total: float | None = 100.0,
                 completed: float = 0, **_: Any) -> int:
        with self._lock:
            task = len(self._tasks)
            self._tasks[task] = _Task(description, total, completed, self._clock())
            self._current = task
            self.write(description)
            return task

    def update(self, task: int, *, description: str | None = None, completed: float | None = None,
               advance: float | None = None, total: float | None = None, **_: Any) -> None:
        with self._lock:
            state = self._tasks[task]
            if total is not None:
                state.total = total
            if completed is not None:
                state.completed = completed
            if advance is not None:
                state.completed += advance
            self._current = task
            if description is not None and description != state.description:
                news = not state.description.startswith(description)
                state.description = description
                state.started = self._clock()
                if news:  # back to a shorter description (the phase ended) is not news
                    self.write(description)

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def status_line(self) -> str | None:
        """What the heartbeat prints: the current task, its count and how long it has run."""
        with self._lock:
            if self._current is None:
                return None
            state = self._tasks[self._current]
            done = ""
            if state.total:
                done = (f", {state.completed:,.0f}/{state.total:,.0f}"
                        f" ({100 * state.completed / state.total:.0f} %)")
            seconds = self._clock() - state.started
            return f"{state.description}: still running ({seconds:.0f} s{done})"

    def beat(self) -> None:
        """Print the status line if nothing was printed for ``heartbeat`` seconds."""
        with self._lock:
            if self._clock() - self._last_line >= self.heartbeat:
                line = self.status_line()
                if line is not None:
                    self.write(line)

    def _beat(self) -> None:
        while not self._stop.wait(min(self.heartbeat, 5.0)):
            self.beat()
