"""`checkpoint`: evaluate released weights instead of training; trains nothing.

Paper: arXiv 2608.27351, Table 3: the hard setting's GRPO row is the released SofT-GRPO checkpoint (Zheng & Lee,
arXiv 2509.20317), which the authors did not train. A suite reproduces that row the same way:

    methods:
      grpo: {method: checkpoint, path: zz1358m/SofT-GRPO-master, subfolder: ..., revision: <commit>}
      grpo-es: {sequence: [grpo, es]}     # ES starting from those weights

The runner loads `path`/`revision`/`subfolder` in place of the cell's model (same `load_model`, so provenance records
the checkpoint's revision or weights hash). As the first stage of a sequence it supplies the starting weights.

`base` names the model the checkpoint was trained from (path and pinned revision): the record's `drift` is then the
checkpoint against it, both at the cell model's dtype, as for a trained cell (paper Table 4's DeepSeek GRPO row is
SofT-GRPO against DeepSeek-R1-Distill-Qwen-1.5B). Without `base` a checkpoint cell has no drift.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from esbench.methods import Method, TrainResult
from esbench.models import ModelPath


class CheckpointBase(BaseModel):
    """The model a checkpoint was trained from: its drift (paper Table 4) is measured against these weights."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: ModelPath = Field(description="Hugging Face id or local directory of the starting model.")
    revision: str | None = Field(None, description="Hub commit to pin (required for a hub id).")
    subfolder: str | None = Field(None, description="Folder inside the repository holding config and weights.")

    @model_validator(mode="after")
    def _pinned(self) -> CheckpointBase:
        if self.revision is None and not _local(self.path):
            raise ValueError(f"base {self.path!r} is a hub id: pin its `revision` (drift is against exact weights)")
        return self


def _local(path: str) -> bool:
    return path.startswith(("builtin:", "pkg:")) or os.path.isdir(os.path.expanduser(path))


class CheckpointConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: ModelPath = Field(description="Hugging Face id or local directory of the released weights.")
    revision: str | None = Field(None, description="Hub commit to pin.")
    subfolder: str | None = Field(None, description="Folder inside the repository holding config and weights.")
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(None, description="Default: the cell model's.")
    base: CheckpointBase | None = Field(
        None, description="The model these weights were trained from; the cell's drift is measured against it."
    )


class Checkpoint(Method):
    trains = False
    loads_weights = True  # the runner loads this config's weights as the cell's model
    Config = CheckpointConfig

    def train(self, train_data, reward, budget, config, ctx):
        return TrainResult()
