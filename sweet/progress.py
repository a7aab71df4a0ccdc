"""Progress of a stage's long loops, shown where the user looks: a terminal bar (tqdm) and every reporter the
caller plugged in (the Prefect task layer plugs a progress artifact, `sweet.monitor` the stage's MLflow metrics).

Stage code opens a `Bar` where it would open a tqdm bar and never knows who watches, so sweet/ stays free of
Prefect. Reporters belong to a context (`reporting`): code that plugged none reports to none. A bar takes the
reporters of the context it was opened in, so updates from another thread still reach them.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tqdm.auto import tqdm

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Progress:
    """Where one loop stands."""
    desc: str        # which loop: "collect", "evaluate sweet/multi_turn", "train"
    unit: str        # what it counts: "ep" (episodes), "turn", "step" (optimizer steps)
    done: int
    total: int
    finished: bool = False  # the loop is over (done may fall short of total: it stopped early)

    @property
    def percent(self) -> float:
        return 100.0 * min(self.done, self.total) / self.total if self.total > 0 else 100.0


class Reporter(Protocol):
    def report(self, progress: Progress) -> None: ...


_REPORTERS: contextvars.ContextVar[tuple[Reporter, ...]] = contextvars.ContextVar("sweet_progress", default=())


@contextlib.contextmanager
def reporting(*reporters: Reporter) -> Iterator[None]:
    """Bars opened inside this block also report to `reporters` (on top of any plugged in further out)."""
    token = _REPORTERS.set(_REPORTERS.get() + tuple(reporters))
    try:
        yield
    finally:
        _REPORTERS.reset(token)


class Bar:
    """A tqdm bar that also tells the reporters: at opening, after every update and at closing. The calls are
    tqdm's (`update`, `set_postfix_str`, `close`); `terminal=False` for a loop that has a bar of its own already
    (the Trainer's)."""

    def __init__(self, total: int, desc: str, unit: str = "it", initial: int = 0, terminal: bool = True):
        self.desc, self.unit, self.total, self.n = desc, unit, int(total), int(initial)
        self._reporters = list(_REPORTERS.get())
        self._tqdm = tqdm(total=total, desc=desc, unit=unit, initial=initial, disable=not terminal)
        self._closed = False
        self._emit()

    def update(self, n: int = 1) -> None:
        self.update_to(self.n + n)

    def update_to(self, n: int) -> None:
        if n != self.n:
            self._tqdm.update(n - self.n)
            self.n = n
            self._emit()

    def set_postfix_str(self, s: str) -> None:
        self._tqdm.set_postfix_str(s)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._tqdm.close()
            self._emit(finished=True)

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _emit(self, finished: bool = False) -> None:
        p = Progress(self.desc, self.unit, self.n, self.total, finished)
        for r in list(self._reporters):
            try:
                r.report(p)
            except Exception as e:  # noqa: BLE001 - progress is for watching: a failing reporter never stops a stage
                log.warning("progress reporter %s failed (%r); it gets no more updates of %r", type(r).__name__,
                            e, self.desc)
                self._reporters.remove(r)


def iterate(items: Iterable[T], desc: str, unit: str = "it", total: int | None = None) -> Iterator[T]:
    """`for x in iterate(items, ...)`: like `for x in tqdm(items, ...)`, each item counted once its body ran."""
    if total is None:
        total = len(items)  # type: ignore[arg-type]
    with Bar(total, desc, unit) as bar:
        for x in items:
            yield x
            bar.update()


def trainer_callback(desc: str = "train"):
    """A transformers `TrainerCallback` reporting optimizer steps (a resumed run starts at its checkpoint's step)
    on the main process; the Trainer draws its own terminal bar."""
    from transformers import TrainerCallback

    class StepProgress(TrainerCallback):
        bar: Bar | None = None

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                self.bar = Bar(state.max_steps, desc, "step", initial=state.global_step, terminal=False)

        def on_step_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.update_to(state.global_step)

        def on_train_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.close()
                self.bar = None

    return StepProgress()
