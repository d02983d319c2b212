"""Progress of a long loop on stderr: a live bar on a terminal, plain lines in a log file."""

from __future__ import annotations

import sys
import time


class TrainingProgress:
    """Progress over updates or steps (on stderr) with the current phase and the last figures.

    On a terminal it is a live bar; otherwise (a log file, CI, `nohup`) every phase change
    and every `plain_every`-th finished unit (and the last) is one plain line, so a long run's
    log shows where it is without a line per episode of a long evaluation.
    """

    def __init__(self, total: int, description: str, completed: int = 0, enabled: bool = True,
                 plain_every: int = 1):
        if plain_every < 1:
            raise ValueError(f"plain_every must be >= 1, got {plain_every}")
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(stderr=True)
        self._live = console.is_terminal
        self._enabled = enabled
        self._description, self._total, self._done = description, total, completed
        self._plain_every = plain_every
        self._started = time.perf_counter()
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[phase]}"), TextColumn("{task.fields[info]}"),
            console=console, disable=not (enabled and self._live),
        )
        self._task = self._progress.add_task(description, total=total, completed=completed, phase="", info="")

    def _line(self, text: str) -> None:
        if self._enabled and not self._live:
            elapsed = int(time.perf_counter() - self._started)
            print(f"{self._description} {self._done}/{self._total} {elapsed // 60}:{elapsed % 60:02d} {text}",
                  file=sys.stderr, flush=True)

    def phase(self, name: str) -> None:
        self._progress.update(self._task, phase=f"[{name}]")
        self._line(f"[{name}]")

    def advance(self, info: str) -> None:
        self._done += 1
        self._progress.update(self._task, advance=1, phase="", info=info)
        if self._done % self._plain_every == 0 or self._done == self._total:
            self._line(info)

    def __enter__(self) -> TrainingProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()
