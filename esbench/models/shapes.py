"""The architecture fields of the paper suites' models, so `esbench plan` sizes them on a machine that has neither
the hub nor the weights.

Each entry is the model's `config.json` at the revision the paper suites pin, reduced to the fields that set its
size (transformers builds the model from them on the meta device: `esbench.memory.shape_from_config`). A model in
the local Hugging Face cache or in a local folder is read from its own config.json instead; these are the fallback.
Values: the models' published config.json files (Qwen2.5 and DeepSeek-R1-Distill: `qwen2`; Llama 3.2: `llama`).
"""

from __future__ import annotations

from typing import Any

_QWEN2 = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu"}

KNOWN_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-0.5B-Instruct": {
        **_QWEN2,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": True,
    },
    "Qwen/Qwen2.5-1.5B-Instruct": {
        **_QWEN2,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": True,
    },
    "Qwen/Qwen2.5-3B-Instruct": {
        **_QWEN2,
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": True,
    },
    "Qwen/Qwen2.5-7B-Instruct": {
        **_QWEN2,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
    },
    "meta-llama/Llama-3.2-3B-Instruct": {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_act": "silu",
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "num_hidden_layers": 28,
        "num_attention_heads": 24,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": True,
    },
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": {
        **_QWEN2,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
    },
}
# The hard setting's released GRPO checkpoint is DeepSeek-R1-Distill-Qwen-1.5B trained (SofT-GRPO's eval scripts).
KNOWN_CONFIGS["zz1358m/SofT-GRPO-master"] = KNOWN_CONFIGS["deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"]
