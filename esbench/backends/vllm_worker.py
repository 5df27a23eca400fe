"""ES inside vLLM's workers: a worker extension (`LLM(worker_extension_cls=...)`) reached with `collective_rpc`.

The authors' artifact (yunpengba7/understanding-es) and es-at-scale (Qiu et al., arXiv 2509.24372) perturb the
weights inside each vLLM worker, so only seeds and rewards cross process boundaries. This module does the same with
esbench's own editor (`TensorEditor`), so a vLLM run perturbs exactly the weights an HF run perturbs:

- **Hugging Face names over vLLM's fused layout.** vLLM fuses q/k/v into `qkv_proj` and gate/up into `gate_up_proj`
  (the model's `packed_modules_mapping`) and pads the vocabulary. `hf_views` splits each fused parameter along its
  output dimension by the layer's `output_sizes` and cuts the vocabulary padding off, giving views that share
  storage with the engine's parameters under the names and shapes of the HF checkpoint. The editor draws each
  member's noise from (seed, HF name, HF shape), so the noise is the HF backend's noise, and writes through the
  views into the engine.
- **CPU repacking.** vLLM's CPU backend hands linear weights to oneDNN (or the SGL kernel) after loading and leaves
  an empty `(0,)` parameter behind; edits to a packed copy are impossible, and re-packing after every edit would
  copy the model twice per member. `unpack_cpu_linears` puts plain fused weights back, filled from the checkpoint
  folder through the same name map, and routes those layers (and the logits projection) to `torch.nn.functional.
  linear`, which reads the live weight. On CUDA the weights are plain tensors already and nothing is changed.
- **Checksums.** After every update the worker records a position-weighted integer checksum of each tensor's bits,
  and before the next update it checks the weights still match (in `paper-bf16`, whose restores leave a residual,
  after every restore and before every perturbation too), so an edit from outside the editor (a corrupted replica)
  fails loudly, naming the worker and the tensor.

Tensor parallelism is not supported here (one engine holds the whole model); the setup refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from esbench.es.weights import Precision, TensorEditor, WeightsDiverged
from esbench.es.weights import tensor_checksums as checksums
from esbench.es.weights import weights_digest as digest


def hf_views(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Hugging Face parameter name -> a view of the engine's parameter that holds it (see the module docstring)."""
    packed: Mapping[str, list[str]] = getattr(model, "packed_modules_mapping", {}) or {}
    seen: set[int] = set()
    out: dict[str, torch.Tensor] = {}
    for mod_name, mod in model.named_modules():
        leaf = mod_name.rsplit(".", 1)[-1]
        parent = mod_name[: len(mod_name) - len(leaf)]
        for pname, p in mod.named_parameters(recurse=False):
            if id(p) in seen:  # tied weights (lm_head = embed_tokens) are one tensor, as in HF
                continue
            seen.add(id(p))
            if getattr(mod, "tp_size", 1) != 1:
                raise NotImplementedError("esbench's vLLM worker extension needs tensor_parallel_size 1")
            data = p.data
            if leaf in packed and getattr(mod, "output_sizes", None):
                sizes = list(mod.output_sizes)
                if data.shape[0] != sum(sizes):
                    raise RuntimeError(f"{mod_name}.{pname}: shape {tuple(data.shape)} does not split into {sizes}")
                for sub, view in zip(packed[leaf], data.split(sizes, dim=0), strict=True):
                    out[f"{parent}{sub}.{pname}"] = view
            elif getattr(mod, "org_vocab_size", None) is not None and data.dim() >= 1:
                out[f"{mod_name}.{pname}"] = data[: mod.org_vocab_size]  # drop the vocabulary padding
            else:
                out[f"{mod_name}.{pname}"] = data
    return out


def read_checkpoint(folder: str | Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        state.update(load_file(str(f)))
    return state


def unpack_cpu_linears(model: torch.nn.Module, checkpoint: Mapping[str, torch.Tensor]) -> list[str]:
    """Give every repacked CPU linear layer a plain fused weight again, read from the checkpoint; returns their names.

    Layers whose weight vLLM kept (embeddings, the logits projection) still compute from a packed copy on CPU, so
    they are routed to `torch.nn.functional.linear` too.
    """
    packed: Mapping[str, list[str]] = getattr(model, "packed_modules_mapping", {}) or {}
    restored = []
    for mod_name, mod in model.named_modules():
        if not hasattr(mod, "cpu_linear"):
            continue
        w = getattr(mod, "weight", None)
        if w is not None and w.numel() == 0:
            leaf = mod_name.rsplit(".", 1)[-1]
            parent = mod_name[: len(mod_name) - len(leaf)]
            names = [f"{parent}{sub}.weight" for sub in packed[leaf]] if leaf in packed else [f"{mod_name}.weight"]
            missing = [n for n in names if n not in checkpoint]
            if missing:
                raise KeyError(f"cannot unpack {mod_name}: the checkpoint has no {missing}")
            full = torch.cat([checkpoint[n] for n in names], dim=0).to(getattr(mod, "params_dtype", w.dtype))
            mod.weight = torch.nn.Parameter(full.contiguous(), requires_grad=False)
            restored.append(mod_name)
        mod.cpu_linear = torch.nn.functional.linear
    return restored


class ESWorkerExtension:
    """Mixed into vLLM's worker class by `worker_extension_cls`; every method runs in each worker process."""

    def _esb_model(self) -> torch.nn.Module:
        model: torch.nn.Module = self.model_runner.model  # type: ignore[attr-defined]  # vLLM's worker, mixed in
        return model

    def esbench_setup(self, checkpoint_dir: str) -> dict[str, Any]:
        """Map HF names onto the engine (unpacking CPU linears first) and check every view against the checkpoint."""
        model = self._esb_model()
        checkpoint = read_checkpoint(checkpoint_dir)
        unpacked = []
        if next(model.parameters()).device.type == "cpu":
            unpacked = unpack_cpu_linears(model, checkpoint)
        self._esb_views = hf_views(model)
        self._esb_editor: tuple[int, TensorEditor] | None = None  # (key, editor): one at a time
        self._esb_sums: dict[str, int] | None = None
        names = set(self._esb_views)
        if names != set(checkpoint):
            only_engine, only_checkpoint = sorted(names - set(checkpoint)), sorted(set(checkpoint) - names)
            raise RuntimeError(
                f"vLLM's parameters do not map onto the checkpoint's names: engine-only {only_engine}, "
                f"checkpoint-only {only_checkpoint}"
            )
        wrong = [n for n, v in self._esb_views.items() if not torch.equal(v.cpu(), checkpoint[n].to(v.dtype))]
        if wrong:
            raise RuntimeError(f"vLLM's weights differ from the checkpoint after loading (relayout?): {wrong[:5]}")
        self._esb_record()
        return {"unpacked": unpacked, "tensors": len(names), "numel": sum(v.numel() for v in self._esb_views.values())}

    # -- checksums ----------------------------------------------------------------------------------------------
    def _esb_record(self) -> str:
        self._esb_sums = checksums(self._esb_views)
        return digest(self._esb_sums)

    def _esb_verify(self) -> None:
        if self._esb_sums is None:
            return
        now = checksums(self._esb_views)
        bad = [n for n in self._esb_sums if now[n] != self._esb_sums[n]]
        if bad:
            rank = getattr(self, "rank", 0)
            raise WeightsDiverged(
                f"vLLM worker rank {rank}: weights changed outside the ES editor since the last checksum: {bad[:5]}"
                f"{' …' if len(bad) > 5 else ''}"
            )

    def esbench_checksum(self) -> str:
        return digest(checksums(self._esb_views))

    # -- weights ------------------------------------------------------------------------------------------------
    def esbench_state(self) -> dict[str, torch.Tensor]:
        return {n: v.detach().to("cpu", copy=True) for n, v in self._esb_views.items()}

    @torch.no_grad()
    def esbench_load(self, state: Mapping[str, torch.Tensor]) -> str:
        for name, v in self._esb_views.items():
            v.copy_(state[name].to(device=v.device, dtype=v.dtype))
        return self._esb_record()

    # -- the ES editor ------------------------------------------------------------------------------------------
    def esbench_editor_new(self, key: int, precision: Precision, noise: str = "torch") -> int:
        """A new editor replaces the previous one: each holds an fp32 master of the whole model (28 GB for 7B), and
        no recipe or analysis uses two at once. `noise` is the driver's noise scheme (`esbench.es.noise`)."""
        self._esb_verify()
        self._esb_editor = None  # the old one's fp32 copies go first: two at once would not fit beside a 7B engine
        self._esb_editor = (key, TensorEditor(self._esb_views, precision, noise))
        return self._esb_editor[1].numel()

    def esbench_editor_drop(self, key: int | None = None) -> None:
        """Free the editor (its fp32 copies and simulated engines): at the end of training, and before this engine
        is stopped for a restart. With `key`, only if that editor is still the current one."""
        if key is None or (self._esb_editor is not None and self._esb_editor[0] == key):
            self._esb_editor = None

    def esbench_editor(self, key: int, op: str, *args: Any) -> Any:
        """Run one `WeightEditor` operation, checking the weights at rest before it and recording them after it.

        The weights are at rest after an update and after a restore. In `fp32-master` a restore copies the master
        back, so the state before the next update must equal the one recorded after the last update: one check and
        one record per update. In `paper-bf16` a restore leaves a residual, so each restore is recorded and each
        perturbation checked: two per member.
        """
        if self._esb_editor is None:
            raise RuntimeError("no ES editor on this engine: it was dropped before a restart (a cast)")
        if self._esb_editor[0] != key:
            raise RuntimeError("this ES editor was replaced by a newer one on the same engine")
        editor = self._esb_editor[1]
        exact = editor.precision == "fp32-master"
        if op == "update" or (op == "perturb" and not exact):
            self._esb_verify()
        result = getattr(editor, op)(*args)
        if op in ("update", "load_master_state", "swap_engine", "load_engines_state") or (
            op == "restore" and not exact
        ):
            if isinstance(result, dict):
                result = {**result, "checksum": self._esb_record()}
            else:
                self._esb_record()
        return result
