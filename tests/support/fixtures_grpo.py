"""Session fixtures for the GRPO glue tests: a tiny random Llama (hidden 64, 2 layers, 4 heads) with the REAL
tokenizer of the default checkpoint (its chat template included), built once into a temp dir. No downloads.

About 3 s per GRPO step on a 2-core CPU, so unit tests can train for real.
"""

from __future__ import annotations

import pytest


def build_tiny_llama(tokenizer_dir, out_dir, seed: int = 0, hidden: int = 64, heads: int = 4):
    """A random LlamaConfig model saved with the tokenizer from ``tokenizer_dir`` (fp32). Returns ``out_dir``. vLLM's
    CPU attention takes head sizes of 32 and up: ``hidden=128, heads=2`` for a model an in-process engine runs."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


@pytest.fixture(scope="session")
def tiny_llama_dir(default_model_dir, tmp_path_factory):
    pytest.importorskip("trl", reason="trl (training extra) is not installed")
    return build_tiny_llama(default_model_dir, tmp_path_factory.mktemp("tiny-llama"))
