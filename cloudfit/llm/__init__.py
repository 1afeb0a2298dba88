"""Large language models: zoo of decoder shapes, per-token stats, parallel layouts, memory and step-time
models, ``predict`` (pure Python + numpy; torch/transformers only for the optional meta-device check).

Entry points: ``cloudfit.llm.predict.predict`` (one layout or ``auto``), ``predict_layouts`` (vectorised over
layouts), ``candidate_layouts``/``best_layout``; ``cloudfit.llm.layout.parse``; ``cloudfit.llm.memory.estimate``;
``cloudfit.llm.zoo.get`` / ``from_config``; ``cloudfit.llm.stats.token_stats``.
"""
