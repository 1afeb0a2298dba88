"""What a model family gives the runtime: its arguments, and a :class:`Job` (model, optimizer, step).

A family is a module with a ``FAMILY`` object having

* ``name`` (registry key), ``prog`` (the module run by torchrun, e.g. ``cloudfit.train``);
* ``parser()`` → a :class:`cloudfit.runtime.loop.Parser` with the family's flags and the shared
  checkpoint/progress/stop flags (:func:`cloudfit.runtime.control.add_shared_args`, with the family's
  defaults); ``check(args)`` → the parsed arguments checked (raises :class:`BadInput`) before any
  process group exists;
* ``build(args, ranks)`` → a :class:`Job`: the model built and parallelised, its optimizer, a step;
* ``smoke_args`` → arguments of a tiny, fast run, and ``smoke_steps`` → a step count that lasts a few
  seconds with them (the runtime contract test trains every family so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol


class BadInput(Exception):
    """A usage error: reported as one line on stderr, exit status 2."""


@dataclass
class Job:
    """One family's model on this rank, as the runtime drives it."""

    model: Any  # the (wrapped) module: DCP saves and loads it with get_state_dict / set_state_dict
    optimizer: Any
    step: Callable[[int], float]  # take optimizer step ``i`` (0-based): this rank's share of the step's mean loss
    samples_per_step: int  # over the whole job
    tokens_per_step: int | None = None  # token models: progress counts tokens too
    describe: dict[str, Any] = field(default_factory=dict)  # fixed progress fields (model, layout, …)
    marker: dict[str, Any] = field(default_factory=dict)  # fixed checkpoint-marker fields (model config, layout)
    check_resume: Callable[[dict[str, Any], Any], None] | None = None  # (saved marker, folder): BadInput if it does not fit
    eval_loss: Callable[[], float] | None = None  # a fixed-batch loss, equal at a save and the resume that loads it
    notes: list[str] = field(default_factory=list)  # shown in progress (rehearsal, re-sharding)
    line: dict[str, Any] = field(default_factory=dict)  # fixed fields of every metrics line (layout)


class Family(Protocol):
    name: str
    prog: str
    smoke_args: list[str]
    smoke_steps: int

    def parser(self) -> Any: ...

    def check(self, args: Any) -> Any: ...

    def build(self, args: Any, ranks: Any) -> Job: ...
