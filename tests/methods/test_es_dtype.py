"""ES hands the model back at the dtype it got it in, with the fp32 shadow on the CPU.

paper-bf16 casts the model to bf16 to train. Afterwards the next stage of a sequence (GRPO in ES→GRPO) must see the
cell's own dtype, as a resumed sequence does (it reloads the stage's weights into the cell's model): on a bf16 cell
GRPO then trains with bf16 autocast like the GRPO cell, and an fp32 cell goes back to fp32 (an exact widening).
"""

from __future__ import annotations

import pytest
import torch

from esbench.backends.hf import HFBackend
from esbench.methods import TrainContext
from esbench.methods.es import ES, ESConfig
from esbench.models import load_model
from esbench.rewards import Reward
from esbench.tasks import get_task


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_paper_bf16_es_returns_the_model_at_its_own_dtype(tmp_path, tiny_model_dir, dtype):
    loaded = load_model(str(tiny_model_dir), dtype=dtype)
    backend = HFBackend(loaded.model, loaded.tokenizer, device="cpu", cpu_threads=1)
    task = get_task("tiny_arith")
    rows = task.rows("train", 4)
    ctx = TrainContext(
        seed=0,
        workdir=tmp_path,
        log_path=tmp_path / "train.jsonl",
        prompt=lambda r: task.prompt(r, loaded.tokenizer),
        backend=backend,
    )
    cfg = ESConfig(population=2, batch_size=2, max_new_tokens=8, precision="paper-bf16")
    result = ES().train(rows, Reward(task), 1, cfg, ctx)
    assert backend.dtype == getattr(torch, dtype)
    assert all(t.dtype == torch.float32 and t.device.type == "cpu" for t in result.ideal.values())
