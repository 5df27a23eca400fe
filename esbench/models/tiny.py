"""The embedded tiny model (`builtin:tiny`): built from code, offline, deterministically, and cached.

Why it exists: the paper studies models with *partial* skill, whose Pass@1 sits well below their Pass@K. A
1-2M-parameter Llama-config model pre-trained on the synthetic families in `esbench.tasks.synthetic`, with a
share of deliberately wrong worked solutions, has that property on CPU in about three minutes. The recipe follows
`../shared/reference/tiny_model_notes.md` (character-level tokenizer, hidden 192, 4 layers, noisy solutions,
held-out reversal and maximum families), and adds a second, rarer solution method (`solve_grouped`): the one
that alone reaches the right answer when a step goes negative. That gives the miniature the paper's coverage
question: does post-training keep the rare strategy (Pass@K) while it sharpens the common one (Pass@1)?

The cache key is a hash of `RECIPE` plus this builder's version, so editing the recipe rebuilds the model and
changes its weights hash in every record's provenance. A Qwen2 config is deliberately avoided: transformers 5
swaps in Qwen2's own tokenizer when such a checkpoint is reloaded.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import math
import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from esbench.tasks import synthetic

log = logging.getLogger(__name__)

BUILDER_VERSION = 1

RECIPE: dict[str, Any] = {
    "tokenizer": {"kind": "char-bpe-no-merges", "model_max_length": 128},
    "model": {
        "hidden_size": 192,
        "num_hidden_layers": 4,
        "intermediate_size": 384,
        "num_attention_heads": 6,  # head_dim 32: vLLM's CPU attention rejects 24
        "num_key_value_heads": 3,
        "max_position_embeddings": 128,
        "tie_word_embeddings": True,
    },
    "data": {
        "mix": {"arith": 0.6, "reverse": 0.2, "max": 0.2},
        "noise_rate": 0.2,
        # Two ways to do the sums, as a student has (see `training_text`). Left to right (80 %) is the practised
        # one, but a negative step result loses its minus sign 95 % of the time; grouping (20 %) sums the positive
        # and the negative terms apart and never loses a sign, but it is sloppier. Grouping is worse on average
        # and the only likely way to the right answer when a step goes negative: the rare strategy whose loss is
        # what the paper calls narrowed reasoning coverage (GRPO's Pass@16 below ES's).
        "sign_slip_rate": 0.95,
        "grouped_share": 0.2,
        "grouped_noise_rate": 0.3,
        "noise_offsets": [-10, -2, -1, 1, 2, 10],
    },
    "train": {
        "steps": 1000,
        "batch_size": 32,
        "lr": 2e-3,
        "betas": [0.9, 0.999],
        "warmup": 100,
        "weight_decay": 0.01,
        "seed": 0,
    },
    "threads": 2,
}

# Characters the synthetic families and their solutions can contain.
ALPHABET = "0123456789+-=?,#\n QRM"
SPECIALS = ["<pad>", "<s>", "</s>"]


def recipe_hash(recipe: dict[str, Any] | None = None) -> str:
    blob = json.dumps({"recipe": recipe or RECIPE, "builder": BUILDER_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_root() -> Path:
    """User cache directory (`$ESBENCH_CACHE`, else `$XDG_CACHE_HOME/esbench`, else `~/.cache/esbench`)."""
    if os.environ.get("ESBENCH_CACHE"):
        return Path(os.environ["ESBENCH_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "esbench"


def build_tokenizer(model_max_length: int):
    """Byte-level BPE trained locally with no merges: one token per character, ids stable on reload."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=len(SPECIALS) + len(ALPHABET), special_tokens=SPECIALS, show_progress=False
    )
    tok.train_from_iterator([ALPHABET], trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        padding_side="left",
        model_max_length=model_max_length,
    )


def solve(
    question: str, bad_step: int | None = None, offset: int = 0, slip: Callable[[int], bool] | None = None
) -> str:
    """A student's worked solution of an `arith` question.

    `bad_step` gets its result shifted by `offset` (a careless slip); `slip(result)` is asked at every step whose
    result is negative and, when it says so, the minus sign is dropped (a systematic misconception). Either error
    propagates through the later steps to the final answer.
    """
    expr = question.removeprefix("Q ").removesuffix("=?")
    terms = re.findall(r"[+-]?\d+", expr)
    value, lines = int(terms[0]), []
    for i, term in enumerate(terms[1:]):
        new = value + int(term) + (offset if i == bad_step else 0)
        if new < 0 and slip is not None and slip(new):
            new = -new
        lines.append(f"{value}{term[0]}{term[1:]}={new}")
        value = new
    return "\n".join(lines) + f"\n#### {value}"


def _terms(question: str) -> list[int]:
    return [int(t) for t in re.findall(r"[+-]?\d+", question.removeprefix("Q ").removesuffix("=?"))]


def solve_grouped(question: str, bad_line: int | None = None, offset: int = 0) -> str:
    """The other method: sum the positive terms (`+12+7=19`), then the negative ones (`-8-6=-14`), then combine.

    Its running values stay non-negative until the last line, whose sign it writes, so it never slips a sign;
    `bad_line` (0-2) gets its result shifted by `offset`, and the slip propagates to the answer.
    """
    terms = _terms(question)
    pos = [terms[0]] + [t for t in terms[1:] if t >= 0]
    neg = [t for t in terms[1:] if t < 0]
    value = sum(pos) + (offset if bad_line == 0 else 0)
    lines = ["+" + "+".join(map(str, pos)) + f"={value}"]
    if neg:
        total = sum(neg) + (offset if bad_line == 1 else 0)
        lines.append("".join(map(str, neg)) + f"={total}")
        new = value + total + (offset if bad_line == 2 else 0)
        lines.append(f"{value}-{-total}={new}" if total <= 0 else f"{value}+{total}={new}")
        value = new
    return "\n".join(lines) + f"\n#### {value}"


def training_text(row: dict[str, str], rng: random.Random, data: dict[str, Any]) -> str:
    """Pre-training target: arithmetic solutions come from an imperfect student with two methods.

    The draws' order is part of the recipe (it fixes the pre-training stream, hence the weights).
    """
    if not row["solution"]:
        return synthetic.target(row)
    if rng.random() < data["grouped_share"]:
        n_lines = 3 if min(_terms(row["question"])[1:]) < 0 else 1  # `-0` is grouped with the positives
        bad = rng.randrange(n_lines) if rng.random() < data["grouped_noise_rate"] else None
        return solve_grouped(row["question"], bad, rng.choice(data["noise_offsets"]))
    n_steps = row["solution"].count("\n") + 1
    bad = rng.randrange(n_steps) if rng.random() < data["noise_rate"] else None
    offset = rng.choice(data["noise_offsets"]) if bad is not None else 0
    return solve(row["question"], bad, offset, slip=lambda value: rng.random() < data["sign_slip_rate"])


def _batches(recipe: dict[str, Any], tokenizer, rng: random.Random):
    import torch

    data = recipe["data"]
    exclude = {fam: {r["question"] for r in synthetic.make_split(fam, "test", 2_000)} for fam in data["mix"]}
    streams = {fam: synthetic.stream(fam, synthetic.hash_seed(f"pretrain:{fam}"), exclude[fam]) for fam in data["mix"]}
    fams, weights = zip(*data["mix"].items(), strict=True)
    eos = tokenizer.eos_token_id
    while True:
        ids, labels = [], []
        for _ in range(recipe["train"]["batch_size"]):
            fam = rng.choices(fams, weights)[0]
            row = next(streams[fam])
            prompt = tokenizer(row["question"] + "\n", add_special_tokens=False)["input_ids"]
            answer = tokenizer(training_text(row, rng, data), add_special_tokens=False)["input_ids"] + [eos]
            ids.append(prompt + answer)
            labels.append([-100] * len(prompt) + answer)
        width = max(map(len, ids))
        pad = tokenizer.pad_token_id
        x = torch.tensor([s + [pad] * (width - len(s)) for s in ids])
        y = torch.tensor([s + [-100] * (width - len(s)) for s in labels])
        yield x, y, (x != pad).long()


def _lr(step: int, cfg: dict[str, Any]) -> float:
    """Linear warm-up, then cosine decay to zero."""
    if step < cfg["warmup"]:
        return cfg["lr"] * (step + 1) / cfg["warmup"]
    progress = (step - cfg["warmup"]) / max(1, cfg["steps"] - cfg["warmup"])
    return cfg["lr"] * 0.5 * (1 + math.cos(math.pi * progress))


def config(recipe: dict[str, Any] | None = None):
    """The model's `LlamaConfig`, as `pretrain` builds it, without building the model (the memory plan sizes it)."""
    from transformers import LlamaConfig

    recipe = recipe or RECIPE
    tokenizer = build_tokenizer(recipe["tokenizer"]["model_max_length"])
    return LlamaConfig(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **recipe["model"],
    )


def pretrain(recipe: dict[str, Any]):
    """Build tokenizer and model from `recipe` and pre-train it; returns (model, tokenizer, stats)."""
    import torch
    from transformers import LlamaForCausalLM

    cfg = recipe["train"]
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe["threads"])  # fixed thread count: same floating-point order everywhere
    try:
        torch.manual_seed(cfg["seed"])
        tokenizer = build_tokenizer(recipe["tokenizer"]["model_max_length"])
        model = LlamaForCausalLM(config(recipe))
        opt = torch.optim.AdamW(
            model.parameters(), lr=cfg["lr"], betas=tuple(cfg["betas"]), weight_decay=cfg["weight_decay"]
        )
        batches = _batches(recipe, tokenizer, random.Random(cfg["seed"]))
        start, losses = time.perf_counter(), []
        model.train()
        for step in range(cfg["steps"]):
            for group in opt.param_groups:
                group["lr"] = _lr(step, cfg)
            x, y, mask = next(batches)
            loss = model(input_ids=x, attention_mask=mask, labels=y).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
            if step % 100 == 99:
                log.info("tiny model pre-training step %d loss %.4f", step + 1, sum(losses[-100:]) / 100)
        model.eval()
        stats = {
            "seconds": round(time.perf_counter() - start, 1),
            "final_loss": round(sum(losses[-50:]) / 50, 4),
            "parameters": sum(p.numel() for p in model.parameters()),
        }
        return model, tokenizer, stats
    finally:
        torch.set_num_threads(threads)


def ensure_built(recipe: dict[str, Any] | None = None) -> Path:
    """Return the cache directory of the model built from `recipe`, building it first if needed.

    The build writes into a temporary sibling directory and renames it into place, so a killed build never
    leaves a half-written model behind.
    """
    recipe = recipe or RECIPE
    target = cache_root() / "models" / f"tiny-{recipe_hash(recipe)}"
    if (target / "esbench-recipe.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # One builder at a time: concurrent processes (parallel cells, test sessions) that find the cache empty wait for
    # the first build instead of each pre-training the same model on the same cores (N builds on 2 cores took an
    # hour). flock is released by the kernel when its holder dies, so a killed build never blocks the next one.
    with open(target.parent / f".{target.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "esbench-recipe.json").exists():
            return target
        return _build(recipe, target)


def _build(recipe: dict[str, Any], target: Path) -> Path:
    log.warning("building the embedded tiny model into %s (one-off, about two minutes)", target)
    model, tokenizer, stats = pretrain(recipe)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "esbench-recipe.json").write_text(
            json.dumps({"recipe": recipe, "builder": BUILDER_VERSION, "stats": stats}, indent=2)
        )
        try:
            os.rename(tmp, target)
        except OSError:  # another process finished the same build first
            if not (target / "esbench-recipe.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
