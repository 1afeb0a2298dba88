"""LLM zoo shapes, per-token stats (FLOPs convention), config.json parsing."""

from __future__ import annotations

import json
import time

import pytest

from cloudfit.errors import UsageError
from cloudfit.llm import stats, zoo


@pytest.mark.parametrize("name,billions", [("llama3-8b", 8.030), ("llama3-70b", 70.554), ("llama3-405b", 405.853),
                                           ("llama3-1b", 1.236), ("llama3-3b", 3.213), ("llama2-13b", 13.016)])
def test_llama_parameter_counts_match_the_published_models(name, billions):
    assert stats.parameters(zoo.get(name)) / 1e9 == pytest.approx(billions, abs=0.001)


def test_gpt_and_mpt_shapes_match_their_sources():
    # vTrain's CSV gives 3.6 / 18.4 / 39.1 / 175 billion; llm-foundry's table the exact MPT counts at seq 2048
    for name, b in (("gpt-3.6b", 3.6), ("gpt-18.4b", 18.4), ("gpt-39.1b", 39.1), ("gpt-175b", 175)):
        assert stats.parameters(zoo.get(name)) / 1e9 == pytest.approx(b, rel=0.015)
    assert stats.parameters(zoo.get("mpt-70b")) == pytest.approx(64862437376, rel=1e-3)
    assert stats.parameters(zoo.get("mpt-7b")) == pytest.approx(6658859008, rel=1e-3)


def test_flops_convention_matches_megatron_bridge_model_tflops():
    # Llama-3-8B at 8,192 tokens on DGX-H100: 14,451 tokens/s/GPU ↔ 744 model TFLOP/s/GPU (causal-half attention)
    st = stats.token_stats(zoo.get("llama3-8b"), 8192)
    assert 14451 * st.flops_per_token / 1e12 == pytest.approx(744, rel=0.01)
    st = stats.token_stats(zoo.get("llama3-405b"), 8192)
    assert 999 * st.flops_per_token / 1e12 == pytest.approx(2522, rel=0.01)


def test_checkpointing_never_raises_activation_bytes():
    for name in ("llama3-8b", "gpt-3.6b"):
        none, sel, full = stats.token_stats(zoo.get(name), 2048).act_bytes
        assert none >= sel >= full > 0


def test_meta_device_count_equals_the_analytic_count():
    for name in ("llama3-1b", "gpt-3.6b"):
        shape = zoo.get(name)
        assert stats.counted_parameters(shape) == stats.parameters(shape)


def test_405b_stats_only_profile_within_30_seconds():
    t0 = time.perf_counter()
    prof = stats.stats_profile(zoo.get("llama3-405b"), 8192)
    assert time.perf_counter() - t0 < 30
    assert prof["stats"]["parameters_counted_on_meta"] == prof["stats"]["parameters"]


def test_config_json_of_a_decoder(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 14336, "vocab_size": 128256, "hidden_act": "silu", "tie_word_embeddings": False,
           "max_position_embeddings": 131072}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    s = zoo.from_config(p, name="mine")
    assert stats.parameters(s) == stats.parameters(zoo.get("llama3-8b"))


@pytest.mark.parametrize("cfg", [
    # GPT-2-style config without an activation key: a GELU MLP of two matrices, tied, LayerNorm, learned positions
    {"model_type": "gpt2", "n_embd": 1024, "n_layer": 24, "n_head": 16, "vocab_size": 50272, "n_positions": 2048},
    # GPT-Neo names its heads num_heads and its layers num_layers (EleutherAI/gpt-neo-2.7B's config.json)
    {"architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo", "hidden_size": 1024, "num_layers": 24,
     "num_heads": 16, "intermediate_size": None, "activation_function": "gelu_new", "vocab_size": 50272,
     "max_position_embeddings": 2048},
])
def test_config_json_of_an_ungated_gpt(tmp_path, cfg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    s = zoo.from_config(p)
    assert (s.mlp, s.norm, s.tied_embeddings, s.learned_positions) == ("gelu", "layer", True, 2048)
    assert (s.hidden, s.layers, s.heads, s.ffn_hidden) == (1024, 24, 16, 4096)
    # 12·h² per layer + biases and norms, tied 50,272-word embedding, 2,048 learned positions: OPT-350M's ~355 M
    assert 3.3e8 < stats.parameters(s) < 3.7e8


@pytest.mark.parametrize("cfg,msg", [
    ({"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768}, "not a decoder"),
    ({"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "is_encoder_decoder": True}, "not a decoder"),
    ({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 8}, "mixture-of-experts"),
])
def test_config_json_that_is_not_a_dense_decoder_is_refused(tmp_path, cfg, msg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(UsageError, match=msg):
        zoo.from_config(p)


def test_unknown_model_names_the_known_ones():
    with pytest.raises(UsageError, match="llama3-8b"):
        zoo.get("llama9-1t")
