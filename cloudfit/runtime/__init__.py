"""cloudfit's training runtime: the loop every model family shares, written once.

A family (``cloudfit.train``: CNNs and the zoo with DDP; ``cloudfit.train_llm``: Llama-style decoders
with FSDP2/TP/PP/CP) builds its model, parallelises it and runs a step (:class:`~cloudfit.runtime.family.Job`);
the runtime does the rest — rank and world set-up (:mod:`.ranks`), resume from the newest DCP
checkpoint, signed and verified (:mod:`.checkpoint`, :mod:`.integrity`), the checkpoint cadence and
the stop signals (:mod:`.control`), progress and metrics lines (:mod:`.progress`), the exit codes
(:mod:`.loop`).

Adding a family: one module with a ``FAMILY`` object (:class:`~cloudfit.runtime.family.Family`) whose
``__main__`` calls ``cloudfit.runtime.main(FAMILY)``, and one entry in :data:`FAMILIES`. The runtime
contract test (``tests/runtime/test_contract.py``) then trains it on real gloo ranks: loss goes down,
a rank killed with SIGKILL resumes with no step lost or doubled, a stop request ends it
(``tests/runtime/test_signals.py``: SIGTERM and SIGINT, in one process and under torchrun).

Importing this package imports no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Family name → the module that holds its ``FAMILY`` (and that torchrun runs with ``-m``).
FAMILIES: dict[str, str] = {
    "cnn": "cloudfit.train",
    "llm": "cloudfit.train_llm",
}


def load_family(name: str) -> Any:
    """The registered family ``name`` (its module's ``FAMILY``)."""
    return importlib.import_module(FAMILIES[name]).FAMILY


def main(fam: Any, argv: list[str] | None = None) -> int:
    """Run ``fam``'s trainer with ``argv`` (see :mod:`cloudfit.runtime.loop`)."""
    from cloudfit.runtime.loop import main as run

    return run(fam, argv)
