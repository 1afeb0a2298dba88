"""BERT and GPT-2 from Hugging Face ``transformers`` configs: random weights, nothing downloaded.

The configs spell out the published architectures (bert-base/large-uncased, gpt2, gpt2-medium) instead
of ``from_pretrained`` so building never touches the network; HF_HUB_OFFLINE is set defensively.
"""

from __future__ import annotations

import os

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

BERT = {
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "bert-large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
}
GPT2 = {
    "gpt2": dict(n_embd=768, n_layer=12, n_head=12),
    "gpt2-medium": dict(n_embd=1024, n_layer=24, n_head=16),
}


def bert_qa(size: str):
    """BertForQuestionAnswering (span start/end head, no pooler), vocab 30,522, 512 positions."""
    from transformers import BertConfig, BertForQuestionAnswering

    cfg = BertConfig(vocab_size=30522, max_position_embeddings=512, type_vocab_size=2, **BERT[size])
    cfg._attn_implementation = "sdpa"
    return BertForQuestionAnswering(cfg)


def gpt2_lm(size: str):
    """GPT2LMHeadModel (LM head tied to the token embedding), vocab 50,257, 1,024 positions."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=50257, n_positions=1024, **GPT2[size])
    cfg._attn_implementation = "sdpa"
    model = GPT2LMHeadModel(cfg)
    model.loss_type = "ForCausalLM"  # the class name matches no loss group; say it, or transformers warns
    return model


def qa_batch(batch_size: int, device, seq_len: int = 384, vocab_size: int = 30522):
    """A SQuAD-like batch: question (segment 0) + context (segment 1) and answer span positions."""
    ids = torch.randint(1000, vocab_size, (batch_size, seq_len), device=device)
    segments = torch.zeros(batch_size, seq_len, dtype=torch.long, device=device)
    segments[:, seq_len // 4:] = 1
    start = torch.randint(seq_len // 4, seq_len, (batch_size,), device=device)
    end = torch.clamp(start + 3, max=seq_len - 1)
    return {"input_ids": ids, "token_type_ids": segments, "start_positions": start, "end_positions": end}


def lm_batch(batch_size: int, device, seq_len: int = 1024, vocab_size: int = 50257):
    ids = torch.randint(0, vocab_size, (batch_size, seq_len), device=device)
    return {"input_ids": ids, "labels": ids}


def hf_loss(model, batch) -> torch.Tensor:
    """Hugging Face heads compute their own loss when given labels/positions."""
    return model(**batch).loss
