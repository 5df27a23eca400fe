"""esbench: a reproducibility benchmark for LLM reasoning post-training (ES vs GRPO, arXiv 2608.27351)."""

__version__ = "0.1.0"
