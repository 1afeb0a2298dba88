"""Shapes of large decoder-only language models (the LLM zoo), and a user's own ``config.json``.

Pure Python: the predictor only needs the shape. ``build_meta`` builds the real ``transformers``
module on the meta device (no download, no weights) so that tests can check the counted parameters
against the analytic ones.

Shapes: Llama 3.1 8B / 70B / 405B and Llama 3.2 1B / 3B (their published ``config.json``: hidden,
layers, heads, KV heads, FFN width, vocabulary 128,256, rope θ 500,000, untied embeddings except the
1B/3B), Llama 2 13B; the GPT shapes of vTrain's measured sweep (Megatron GPT, vocabulary 51,200,
learned positions, GELU MLP of 4×hidden, biases); the MPT shapes of llm-foundry's benchmark table
(vocabulary 50,368, no biases, MLP 4×hidden, learned positions as the table's parameter counts show).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from cloudfit.errors import UsageError


@dataclass(frozen=True)
class LLMShape:
    """A dense decoder-only transformer. ``mlp`` is ``swiglu`` (three matrices) or ``gelu`` (two)."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    mlp: str = "swiglu"
    tied_embeddings: bool = False
    bias: bool = False
    norm: str = "rms"  # rms | layer
    learned_positions: int = 0  # rows of a learned position table (0 = rotary / ALiBi)
    max_seq_len: int = 131072
    family: str = "llama"

    def __post_init__(self) -> None:
        for f in ("hidden", "layers", "heads", "kv_heads", "ffn_hidden", "vocab"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise UsageError(f"model {self.name}: {f} must be a positive integer, got {v!r}")
        if self.hidden % self.heads:
            raise UsageError(f"model {self.name}: hidden {self.hidden} is not a multiple of {self.heads} heads")
        if self.heads % self.kv_heads:
            raise UsageError(f"model {self.name}: {self.heads} heads are not a multiple of {self.kv_heads} KV heads")
        if self.mlp not in ("swiglu", "gelu"):
            raise UsageError(f"model {self.name}: mlp must be swiglu or gelu, got {self.mlp!r}")

    def check_lora_rank(self, rank: int) -> None:
        """``UsageError`` unless ``rank`` is a LoRA rank this model can take: 1 … its hidden size (an adapter
        pair A·B of rank r on a d×d projection is a full-rank update at r = d; above it the extra rank is
        void). Checked whatever ``--finetune`` says: a rank of 0 is no adapter, never a setting."""
        if not isinstance(rank, int) or isinstance(rank, bool) or not 1 <= rank <= self.hidden:
            raise UsageError(f"--lora-rank must be between 1 and {self.name}'s hidden size {self.hidden:,}, "
                             f"got {rank!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _llama(name, hidden, layers, heads, kv, ffn, vocab=128256, tied=False, max_seq=131072):
    return LLMShape(name, hidden, layers, heads, kv, ffn, vocab, "swiglu", tied, False, "rms", 0, max_seq, "llama")


def _gpt(name, hidden, layers, heads, vocab=51200, positions=2048):
    return LLMShape(name, hidden, layers, heads, heads, 4 * hidden, vocab, "gelu", True, True, "layer",
                    positions, positions, "gpt")


def _mpt(name, hidden, layers, heads):
    return LLMShape(name, hidden, layers, heads, heads, 4 * hidden, 50368, "gelu", True, False, "layer",
                    2048, 65536, "mpt")


ZOO: dict[str, LLMShape] = {
    s.name: s
    for s in (
        _llama("llama3-1b", 2048, 16, 32, 8, 8192, tied=True),
        _llama("llama3-3b", 3072, 28, 24, 8, 8192, tied=True),
        _llama("llama3-8b", 4096, 32, 32, 8, 14336),
        _llama("llama3-70b", 8192, 80, 64, 8, 28672),
        _llama("llama3-405b", 16384, 126, 128, 8, 53248),
        _llama("llama2-13b", 5120, 40, 40, 40, 13824, vocab=32000, max_seq=4096),
        # vTrain's multi-node sweep (Megatron-DeepSpeed GPT; hidden, heads, layers from its CSV)
        _gpt("gpt-3.6b", 3072, 30, 32),
        _gpt("gpt-18.4b", 6144, 40, 48),
        _gpt("gpt-39.1b", 8192, 48, 64),
        _gpt("gpt-175b", 12288, 96, 96),
        # llm-foundry's MPT benchmark shapes (scripts/train/yamls/pretrain/mpt-*.yaml)
        _mpt("mpt-125m", 768, 12, 12),
        _mpt("mpt-350m", 1024, 24, 16),
        _mpt("mpt-760m", 1536, 24, 12),
        _mpt("mpt-1b", 2048, 24, 16),
        _mpt("mpt-3b", 2560, 32, 20),
        _mpt("mpt-7b", 4096, 32, 32),
        _mpt("mpt-13b", 5120, 40, 40),
        _mpt("mpt-30b", 7168, 48, 64),
        _mpt("mpt-70b", 8192, 80, 64),
    )
}

_ALIASES = {"llama-3-8b": "llama3-8b", "llama3.1-8b": "llama3-8b", "llama-3.1-8b": "llama3-8b",
            "llama-3-70b": "llama3-70b", "llama3.1-70b": "llama3-70b", "llama-3.1-70b": "llama3-70b",
            "llama-3-405b": "llama3-405b", "llama3.1-405b": "llama3-405b", "llama-3.1-405b": "llama3-405b",
            "llama3.2-1b": "llama3-1b", "llama3.2-3b": "llama3-3b", "llama-2-13b": "llama2-13b"}


def names() -> list[str]:
    return list(ZOO)


def is_llm(name: str) -> bool:
    key = name.strip().lower()
    return key in ZOO or key in _ALIASES


def get(name: str) -> LLMShape:
    """The zoo shape called ``name`` (case-insensitive; a few common spellings)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in ZOO:
        raise UsageError(f"unknown LLM {name!r} (known: {', '.join(ZOO)}; or give --config path/config.json)")
    return ZOO[key]


_DECODER_TYPES = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "olmo", "olmo2", "granite",
                  "gpt2", "gpt_neo", "gpt_neox", "gptj", "opt", "falcon", "mpt", "bloom", "stablelm", "starcoder2",
                  "cohere", "internlm2", "deepseek", "yi", "baichuan", "smollm3", "glm", "exaone"}
#: Families whose MLP is two matrices with a GELU/ReLU (not gated): a config that names no activation gets
#: theirs, not the SwiGLU of the Llama-like default.
_UNGATED_TYPES = {"gpt2", "gpt_neo", "gpt_neox", "gptj", "opt", "falcon", "mpt", "bloom", "gpt_bigcode"}
#: Families with a learned position table (the others rotate or use ALiBi).
_LEARNED_POSITION_TYPES = {"gpt2", "gpt_neo", "opt", "gpt_bigcode"}


def from_config(path: str | Path, *, name: str | None = None) -> LLMShape:
    """A shape from a Hugging Face ``config.json`` of a dense decoder (Llama-, GPT-2-, NeoX-style keys).

    Raises ``UsageError`` (one line) when the file is missing, is not JSON, or is not a decoder.
    """
    p = Path(path)
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except OSError:
        raise UsageError(f"{p}: cannot read the config file") from None
    except ValueError as e:
        raise UsageError(f"{p}: not valid JSON ({e.msg})") from None
    if not isinstance(cfg, dict):
        raise UsageError(f"{p}: not a Hugging Face config (expected a JSON object)")
    mtype = str(cfg.get("model_type", "")).lower()
    archs = [str(a) for a in cfg.get("architectures") or []]
    decoder = any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs) or mtype in _DECODER_TYPES
    if cfg.get("is_encoder_decoder") or not decoder:
        raise UsageError(f"{p}: not a decoder-only language model (model_type {mtype or '?'}, "
                         f"architectures {archs or '?'})")
    if cfg.get("num_local_experts") or cfg.get("n_routed_experts") or cfg.get("num_experts"):
        raise UsageError(f"{p}: mixture-of-experts models are not supported yet (dense decoders only)")

    def pick(*keys, default=None):
        for k in keys:
            if cfg.get(k) is not None:
                return cfg[k]
        if default is not None:
            return default
        raise UsageError(f"{p}: config has none of {', '.join(keys)}")

    hidden = int(pick("hidden_size", "n_embd", "d_model"))
    layers = int(pick("num_hidden_layers", "n_layer", "n_layers", "num_layers"))
    heads = int(pick("num_attention_heads", "n_head", "n_heads", "num_heads"))
    kv = int(pick("num_key_value_heads", "num_kv_heads", "multi_query_group_num", default=heads))
    act = str(pick("hidden_act", "activation_function", "hidden_activation",
                   default="gelu" if mtype in _UNGATED_TYPES else "silu")).lower()
    swiglu = act in ("silu", "swish", "swiglu") or mtype in ("llama", "mistral", "qwen2", "qwen3")
    ffn = int(pick("intermediate_size", "n_inner", "ffn_hidden_size", default=4 * hidden))
    vocab = int(pick("vocab_size"))
    max_pos = int(pick("max_position_embeddings", "n_positions", "max_seq_len", default=4096))
    learned = max_pos if mtype in _LEARNED_POSITION_TYPES else 0
    return LLMShape(
        name=name or cfg.get("_name_or_path") or p.parent.name or "custom",
        hidden=hidden, layers=layers, heads=heads, kv_heads=kv, ffn_hidden=ffn, vocab=vocab,
        mlp="swiglu" if swiglu else "gelu", tied_embeddings=bool(cfg.get("tie_word_embeddings", not swiglu)),
        bias=bool(cfg.get("attention_bias", cfg.get("bias", mtype in ("gpt2", "gpt_neo", "opt", "bloom", "falcon")))),
        norm="rms" if swiglu else "layer", learned_positions=learned, max_seq_len=max_pos,
        family=mtype or "custom")


def resolve(model: str | None = None, config: str | Path | None = None) -> LLMShape:
    """The shape a user named: a zoo entry (``model``) or a ``config.json`` (``config``)."""
    if config is not None:
        return from_config(config, name=model)
    if model is None:
        raise UsageError("give --model NAME or --config path/config.json")
    return get(model)


def hf_config(shape: LLMShape):
    """The ``transformers`` config of ``shape`` (Llama for swiglu shapes, GPT-2 for gelu ones). Lazy import."""
    if shape.mlp == "swiglu":
        from transformers import LlamaConfig

        return LlamaConfig(hidden_size=shape.hidden, num_hidden_layers=shape.layers,
                           num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                           intermediate_size=shape.ffn_hidden, vocab_size=shape.vocab,
                           tie_word_embeddings=shape.tied_embeddings, max_position_embeddings=shape.max_seq_len,
                           rope_theta=500000.0, attention_bias=shape.bias, mlp_bias=shape.bias)
    from transformers import GPT2Config

    return GPT2Config(n_embd=shape.hidden, n_layer=shape.layers, n_head=shape.heads, n_inner=shape.ffn_hidden,
                      vocab_size=shape.vocab, n_positions=max(shape.learned_positions, 1),
                      tie_word_embeddings=shape.tied_embeddings)


def build_meta(shape: LLMShape):
    """The ``transformers`` causal-LM module of ``shape`` on the meta device (no memory, no download)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(hf_config(shape))


def with_name(shape: LLMShape, name: str) -> LLMShape:
    return replace(shape, name=name)
