"""What ``sweeper run`` shows while it runs: the live view (a terminal), one plain line per event
(logs, CI) or nothing (``--quiet``), each fed the study's ``TrialEvent``s, and the log routing
that keeps the live view whole."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.logging import RichHandler
from rich.table import Table

from sweeper.study import TrialEvent, is_confirmation
from sweeper.words import Word

# the progress phases of a study's trial as the live view names them (the study's names: the
# server's start is "start"); ``sweeper.measure.PHASE_LABELS`` names the stored timing phases
LIVE_PHASE_WORDS = {
    "start": "starting the server",
    "ppl": "PPL records",
    "warm-up": "warm-up bridge",
    "tps warm-up": "TPS warm-up requests",
    "tps": "TPS requests",
    "fidelity": "fidelity prompts",
    "teardown": "stopping the server",
}


class TrialCount:
    """Where the study's budget stands: trials counted before this run, done in it, running.

    It counts the searched trials against ``--n-trials``; a trial itself is always
    named by its number in the study (``trial 12``), never by its place in the budget.
    """

    def __init__(self, n_trials: int | None, done_before: int = 0) -> None:
        self.n_trials = n_trials
        self.done_before = done_before
        self.done = 0  # finished in this run
        self.running = False
        self.confirming = False  # the running trial re-measures a configuration (a race)
        self.confirmations = 0  # confirmation trials finished in this run (outside the budget)

    def start(self, role: str) -> None:
        self.running = True
        self.confirming = is_confirmation(role)

    def finish(self) -> None:
        self.running = False
        if self.confirming:
            self.confirmations += 1
        else:
            self.done += 1

    @property
    def finished(self) -> int:
        return self.done_before + self.done

    def line(self) -> str:
        """``searching 3 of 8, 5 to go after it`` while a searched trial runs, ``8 of 8 searched,
        0 to go`` when none does."""
        total = "∞" if self.n_trials is None else str(self.n_trials)
        if self.running and self.confirming:
            return (
                f"race server {self.confirmations + 1} of this run (outside the budget), "
                f"{self.finished} of {total} searched"
            )
        if self.running:
            current = self.finished + 1
            togo = "" if self.n_trials is None else f", {max(0, self.n_trials - current)} to go after it"
            return f"searching {current} of {total}{togo}"
        togo = "" if self.n_trials is None else f", {max(0, self.n_trials - self.finished)} to go"
        return f"{self.finished} of {total} searched{togo}"


def describe_finished(event: TrialEvent) -> str:
    """One line for a finished trial: its params, TPS, PPL and verdict."""
    verdict = event.state or "?"
    if event.state == "complete":
        verdict = "feasible" if event.feasible else "rejected by the gate"
    if event.tps is not None:
        tps = f"{event.tps:.1f} tok/s"
    else:  # stopped before its TPS was measured (the PPL was over the cap), or failed
        tps = "TPS not measured" if event.state == "complete" else "-"
    ppl = f"PPL {event.ppl:.3f}" if event.ppl is not None else "PPL -"
    kind = " (confirmation)" if is_confirmation(event.role) else ""
    return f"trial {event.number}{kind} {dict(event.params)}: {tps}, {ppl}: {verdict}" + (
        f" ({event.error})" if event.error else ""
    )


def describe_phase(phase: str | None, done: int | None, total: int | None) -> str:
    """``PPL records 3/8``: the phase in words, with its progress where it counts."""
    label = LIVE_PHASE_WORDS.get(phase or "-", phase or "-")
    if total:
        return f"{label} {done or 0}/{total}"
    return label


class LiveView:
    """Trial n of N and the trials to go, the phase with its progress (PPL records,
    warm-up and TPS requests done of total), elapsed time and ETA, the best so far."""

    def __init__(self, console: Console, n_trials: int | None, done_before: int = 0) -> None:
        self.console = console
        self.count = TrialCount(n_trials, done_before)
        self.started = time.monotonic()
        self.trial_started = self.started
        self.durations: list[float] = []
        self.current: TrialEvent | None = None
        self.phase = "-"
        self.best: str = "none yet"
        self.claim: str = "-"
        self.live = Live(self.render(), console=console, refresh_per_second=2, transient=False)

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.update(self.render())
        self.live.__exit__(*exc)

    def __call__(self, event: TrialEvent) -> None:
        if event.kind == "started":
            self.current = event
            self.count.start(event.role)
            self.trial_started = time.monotonic()
            self.phase = "starting"
        elif event.kind in ("phase", "progress"):
            self.phase = describe_phase(event.phase, event.done, event.total)
        elif event.kind == "finished":
            self.count.finish()
            self.durations.append(time.monotonic() - self.trial_started)
            self.phase = "-"
            self.console.print(describe_finished(event), markup=False, highlight=False)
            if event.best_number is not None and event.best_tps is not None:
                self.best = f"trial {event.best_number}: {event.best_tps:.1f} tok/s"
            self.claim = event.claim or self.claim
        self.live.update(self.render(), refresh=event.kind != "progress")

    def render(self) -> Table:
        """The view's rows as they stand now."""
        elapsed = time.monotonic() - self.started
        table = Table.grid(padding=(0, 2))
        running = self.current if self.count.running else None  # the trial running now, if one is
        number = f"trial {running.number}: " if running is not None else ""
        table.add_row("trials", number + self.count.line())
        table.add_row("params", str(dict(running.params)) if running is not None else "-")
        table.add_row("phase", self.phase)
        table.add_row("elapsed", clock_text(elapsed))
        n_trials = self.count.n_trials
        if self.durations and n_trials:
            mean = sum(self.durations) / len(self.durations)
            left = max(0, n_trials - self.count.finished)
            table.add_row("ETA", clock_text(left * mean))
        table.add_row("best feasible", self.best)
        table.add_row("claim", self.claim)
        return table


class PlainView:
    """One plain line per event on stderr, for logs and CI (no cursor movement, no colour).

    Progress within a phase is written when the phase begins and when it is done."""

    def __init__(self, n_trials: int | None, done_before: int = 0, write: Any = None) -> None:
        self.count = TrialCount(n_trials, done_before)
        self.write = write or (lambda line: click.echo(line, err=True))

    def __enter__(self) -> PlainView:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.write(f"trials: {self.count.line()}")

    def __call__(self, event: TrialEvent) -> None:
        if event.kind == "started":
            self.count.start(event.role)
            self.write(f"trial {event.number} ({event.role}) {dict(event.params)}: {self.count.line()}")
        elif event.kind == "phase":
            self.write(f"trial {event.number}: {describe_phase(event.phase, event.done, event.total)}")
        elif event.kind == "progress" and event.total and event.done == event.total:
            self.write(f"trial {event.number}: {describe_phase(event.phase, event.done, event.total)}")
        elif event.kind == "finished":
            self.count.finish()
            line = describe_finished(event)
            if event.best_number is not None and event.best_tps is not None:
                line += f"; best feasible: trial {event.best_number} ({event.best_tps:.1f} tok/s)"
            self.write(f"{line}; {self.count.line()}")


class QuietView:
    """Nothing while the study runs (``--quiet``)."""

    def __enter__(self) -> QuietView:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def __call__(self, event: TrialEvent) -> None:
        pass


@contextlib.contextmanager
def log_through(console: Console | None, level: int | None) -> Iterator[None]:
    """Route log records through rich on ``console`` (the Live view stays whole at the
    bottom) and/or raise the level; the handlers are put back afterwards."""
    root = logging.getLogger()
    handlers, old_level = list(root.handlers), root.level
    if console is not None:
        handler = RichHandler(console=console, show_path=False, rich_tracebacks=False, markup=False)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        root.handlers = [handler]
    if level is not None:
        root.setLevel(max(level, old_level))
    try:
        yield
    finally:
        root.handlers = handlers
        root.setLevel(old_level)


def clock_text(seconds: float) -> str:
    """``1:02:03``."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class ViewMode(Word):
    """How ``sweeper run`` shows the study while it runs."""

    LIVE = "live"  # the live view, on a terminal
    PLAIN = "plain"  # one plain line per event (--plain, or stderr is not a terminal)
    QUIET = "quiet"  # nothing, and only warnings logged (--quiet)


def view_mode(*, quiet: bool, plain: bool, terminal: bool) -> ViewMode:
    """``--quiet`` or ``--plain`` as given; else live on a terminal, plain elsewhere."""
    if quiet:
        return ViewMode.QUIET
    if plain or not terminal:
        return ViewMode.PLAIN
    return ViewMode.LIVE


def logs_for(mode: ViewMode, console: Console) -> contextlib.AbstractContextManager[None]:
    """Where log lines go while the study runs: through rich under the live view, only warnings
    when quiet, as they are when plain."""
    if mode is ViewMode.LIVE:
        return log_through(console, None)
    if mode is ViewMode.QUIET:
        return log_through(None, logging.WARNING)
    return contextlib.nullcontext()


def open_view(
    mode: ViewMode, console: Console, n_trials: int | None, done_before: int
) -> LiveView | PlainView | QuietView:
    """The view of ``mode``, counting ``n_trials`` searched trials of which ``done_before`` ran before."""
    if mode is ViewMode.LIVE:
        return LiveView(console, n_trials, done_before)
    if mode is ViewMode.PLAIN:
        return PlainView(n_trials, done_before)
    return QuietView()
