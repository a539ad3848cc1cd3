"""Plain progress lines for piped output: events as lines, a heartbeat after silence."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import Progress

from securefl.progress import PlainProgress, make_progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _plain(heartbeat: float = 30.0):
    buffer, clock = io.StringIO(), Clock()
    progress = PlainProgress(Console(file=buffer, width=40), heartbeat=heartbeat, clock=clock)
    return progress, buffer, clock


def test_make_progress_is_plain_unless_a_terminal():
    assert isinstance(make_progress(Console(file=io.StringIO())), PlainProgress)
    assert isinstance(make_progress(Console(file=io.StringIO(), force_terminal=True)), Progress)


def test_events_are_lines_and_phase_ends_are_silent():
    progress, buffer, _ = _plain()
    task = progress.add_task("fedprop (real): setup", total=30)
    progress.update(task, description="fedprop (real): setup: warm-up round 1/10")
    progress.update(task, description="fedprop (real)")  # the phase ended: not news
    progress.update(task, completed=1, description="fedprop (real)")
    progress.update(task, description="fedprop (real) round 2/30: CrossClientLP (real)")
    long_line = "fedprop (real) round 2/30: accuracy 88.44 %, pseudo-labels 90.10 %, 2.9 s"
    progress.console.print(long_line)
    assert buffer.getvalue().splitlines() == [
        "fedprop (real): setup",
        "fedprop (real): setup: warm-up round 1/10",
        "fedprop (real) round 2/30: CrossClientLP (real)",
        long_line,  # one line although wider than the 40-column console
    ]


def test_heartbeat_after_silence_only():
    progress, buffer, clock = _plain(heartbeat=30.0)
    task = progress.add_task("IKNP 4194304 OTs", total=4_194_304)
    progress.advance(task, 1_048_576)
    clock.now = 29.0
    progress.beat()
    assert buffer.getvalue().splitlines() == ["IKNP 4194304 OTs"]
    clock.now = 31.0
    progress.beat()
    clock.now = 40.0
    progress.beat()  # the heartbeat line itself resets the silence
    assert buffer.getvalue().splitlines()[1:] == [
        "IKNP 4194304 OTs: still running (31 s, 1,048,576/4,194,304 (25 %))"
    ]


def test_heartbeat_thread_writes_while_the_main_thread_is_busy():
    buffer = io.StringIO()
    with PlainProgress(Console(file=buffer), heartbeat=0.05) as progress:
        progress.add_task("a long phase", total=None)
        import time

        deadline = time.monotonic() + 10
        while "still running" not in buffer.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
    assert "a long phase: still running" in buffer.getvalue()
