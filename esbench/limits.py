"""Limits on what a suite or a method config may ask for (file-level limits: esbench.suite_yaml).

Each is far above any real suite (the paper's: 32 samples, 8192 tokens, a few hundred updates, datasets of
thousands of rows) and keeps a hostile one to an error naming the field, not a run that allocates without bound or
fails hours in. They live here, below both `esbench.spec` and `esbench.methods`, so that both can use them.
"""

MAX_CELLS = 10_000
"""Largest grid: models x methods x datasets x budgets x seeds multiply, so short lists could ask for billions."""
MAX_SEED = 2**32 - 1
"""Largest seed: numpy's `np.random.seed` takes 32-bit seeds (a larger one would fail after the model loaded)."""
MAX_UPDATES = 1_000_000
"""Largest budget in updates (also the largest probe interval)."""
MAX_EPOCHS = 1_000
"""Largest budget in epochs."""
MAX_ROWS = 10_000_000
"""Most training or evaluation problems (`datasets.*.size`, `eval.limit`, prompts of probes and diversity)."""
MAX_SAMPLES = 10_000
"""Most samples per problem (`eval.n`, probe and diversity samples, sparsity n) and diversity members."""
MAX_NEW_TOKENS = 1 << 20
"""Longest generation budget in tokens."""
MAX_TEMPERATURE = 100.0
"""Highest sampling temperature (evaluation and method configs)."""
MAX_COUNT = 1_000_000
"""Largest population, batch, group or prompt count in a method config."""
