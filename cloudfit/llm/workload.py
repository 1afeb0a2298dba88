"""A token workload for large models: what to train, counted in tokens (samples = tokens ÷ sequence length).

``LLMWorkload`` validates itself once; ``recommend``/``search`` (issue 17) turn it into samples for the planner
with ``.samples`` and price layouts with ``cloudfit.llm.predict``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from cloudfit.errors import UsageError
from cloudfit.llm.zoo import LLMShape, resolve

FINETUNE = ("full", "lora")


@dataclass(frozen=True)
class LLMWorkload:
    tokens: float
    seq_len: int
    model: str | None = None  # a zoo name, or the display name of ``config``
    config: str | None = None  # path of a Hugging Face config.json
    finetune: str = "full"
    lora_rank: int = 16
    precision: str = "bf16"

    def __post_init__(self) -> None:
        if not (isinstance(self.tokens, (int, float)) and math.isfinite(self.tokens) and self.tokens > 0):
            raise UsageError(f"--tokens must be positive, got {self.tokens!r}")
        if not isinstance(self.seq_len, int) or isinstance(self.seq_len, bool) or self.seq_len < 1:
            raise UsageError(f"--seq-len must be a positive integer, got {self.seq_len!r}")
        if self.finetune not in FINETUNE:
            raise UsageError(f"--finetune must be full or lora, got {self.finetune!r}")
        if self.precision not in ("bf16", "fp16", "fp8"):
            raise UsageError(f"--precision must be bf16, fp16 or fp8 for LLM training, got {self.precision!r}")
        if self.model is None and self.config is None:
            raise UsageError("give --model NAME or --config path/config.json")
        self.shape.check_lora_rank(self.lora_rank)  # resolves (and validates) the model once

    @cached_property
    def shape(self) -> LLMShape:
        return resolve(self.model, self.config)

    @property
    def samples(self) -> float:
        """Sequences to train: tokens ÷ sequence length."""
        return self.tokens / self.seq_len
