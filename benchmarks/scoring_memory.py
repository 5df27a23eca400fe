"""Peak memory of teacher-forced scoring (token entropy + log-probs): the old full-batch way against esbench's
bounded scoring, side by side, across batch sizes and vocabularies, printed as JSON.

The old way (esbench before issue 21) ran up to 64 sequences through the whole model at once and took the fp32
log-softmax of their full-vocabulary logits: 2 × batch × length × vocabulary × 4 bytes, about 225 GB for the
paper's probe on Qwen. `HFBackend.token_entropy` now packs sequences by a token budget, runs the body alone and
puts only the response positions through the LM head, a logit budget at a time.

Each measurement runs in a fresh subprocess on a random-init Llama (nothing is downloaded) with responses of
`--length` tokens. On CPU the figure is the resident-set high-water mark (ru_maxrss) the scoring adds over the RSS
before it; on CUDA it is `torch.cuda.max_memory_allocated` over the memory allocated before. Old-way runs whose
logits alone would exceed `--old-limit-gib` are skipped and their predicted size reported.

    python benchmarks/scoring_memory.py
    python benchmarks/scoring_memory.py --model llama-0.5b --device cuda --dtype bfloat16 --vocab 151936 --length 2300
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CONFIGS, sync  # noqa: E402

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


class IdTokenizer:
    """'5 17 3' → [5, 17, 3]: exact lengths at any vocabulary size."""

    pad_token_id = 0

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [int(x) for x in text.split()]}


def old_scoring(model, prompts, responses, batch_size: int = 64) -> tuple[float, list[list[float]]]:
    """The pre-issue-21 algorithm: full logits of up to 64 right-padded sequences, then their fp32 log-softmax."""
    tok = IdTokenizer()
    total, count, lps = 0.0, 0, []
    for start in range(0, len(prompts), batch_size):
        seqs, spans = [], []
        for p, r in zip(prompts[start : start + batch_size], responses[start : start + batch_size], strict=True):
            p_ids, r_ids = tok(p)["input_ids"], tok(r)["input_ids"]
            seqs.append(p_ids + r_ids)
            spans.append((len(p_ids), r_ids))
        width = max(len(s) for s in seqs)
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for j, s in enumerate(seqs):
            ids[j, : len(s)] = torch.tensor(s)
            mask[j, : len(s)] = 1
        dev = next(model.parameters()).device
        logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        for j, (p_len, r_ids) in enumerate(spans):
            rows = logp[j, p_len - 1 : p_len - 1 + len(r_ids)]
            total += float(-(rows.exp() * rows).sum())
            count += len(r_ids)
            lps.append(rows.gather(-1, torch.tensor(r_ids, device=dev)[:, None])[:, 0].tolist())
    return total / count, lps


def measure(args) -> dict:
    import resource

    from transformers import LlamaConfig, LlamaForCausalLM

    from esbench.backends.hf import HFBackend

    torch.manual_seed(0)
    config = TINY if args.model == "tiny-random" else CONFIGS[args.model]
    config = dict(config, vocab_size=args.vocab, max_position_embeddings=args.length + 128, pad_token_id=0)
    model = LlamaForCausalLM(LlamaConfig(**config)).to(device=args.device, dtype=getattr(torch, args.dtype)).eval()
    g = torch.Generator().manual_seed(1)

    def text(n: int) -> str:
        return " ".join(map(str, torch.randint(1, args.vocab, (n,), generator=g).tolist()))

    prompts = [text(args.prompt_length) for _ in range(args.batch)]
    responses = [text(args.length - args.prompt_length) for _ in range(args.batch)]
    backend = HFBackend(model, IdTokenizer(), device=args.device)
    backend.token_entropy(prompts[:1], ["1 2"])  # warm-up outside the measurement
    cuda = args.device.startswith("cuda")
    if cuda:
        sync(args.device)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        with open("/proc/self/status") as f:
            base = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    start = time.perf_counter()
    with torch.no_grad():
        if args.way == "old":
            entropy, _ = old_scoring(model, prompts, responses)  # token_entropy, then token_logprobs: two passes
            old_scoring(model, prompts, responses)
        else:
            entropy = backend.token_entropy(prompts, responses)["entropy"]
            backend.token_logprobs(prompts, responses)
    sync(args.device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"peak_mib": round((peak - base) / 2**20, 1), "seconds": round(seconds, 3), "entropy": entropy}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-random", choices=["tiny-random", *CONFIGS])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--vocab", type=int, nargs="+", default=[32000, 151936])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 48])
    ap.add_argument("--length", type=int, default=900, help="tokens per sequence, prompt included")
    ap.add_argument("--prompt-length", type=int, default=50)
    ap.add_argument("--old-limit-gib", type=float, default=4.0, help="skip old-way runs whose logits exceed this")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--way", choices=["old", "new"], help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.way:
        args.vocab = args.vocab[0]
        print(json.dumps(measure(args)))
        return
    from esbench.backends.hf import HFBackend

    out = {
        "model": args.model,
        "device": args.device,
        "dtype": args.dtype,
        "length": args.length,
        "token_budget": HFBackend.score_tokens,
        "logit_budget": HFBackend.score_logits,
        "measure": "cuda max_memory_allocated" if args.device.startswith("cuda") else "ru_maxrss added by scoring",
        "rows": [],
    }
    common = ["--model", args.model, "--device", args.device, "--dtype", args.dtype, "--threads", str(args.threads)]
    common += ["--length", str(args.length), "--prompt-length", str(args.prompt_length)]
    for vocab in args.vocab:
        for batch in args.batches:
            row: dict = {"vocab": vocab, "batch": batch}
            old_gib = 2 * min(batch, 64) * args.length * vocab * 4 / 2**30  # logits + their log-softmax, fp32
            for way in ("old", "new"):
                if way == "old" and old_gib > args.old_limit_gib:
                    row["old"] = {"skipped": f"its fp32 logits and log-softmax alone need {old_gib:.1f} GiB"}
                    continue
                cmd = [sys.executable, __file__, *common, "--way", way, "--batch", str(batch), "--vocab", str(vocab)]
                proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
                row[way] = json.loads(proc.stdout.strip().splitlines()[-1])
            if "peak_mib" in row["old"]:
                row["old_peak_over_new"] = round(row["old"]["peak_mib"] / max(row["new"]["peak_mib"], 1e-9), 2)
                row["entropy_abs_diff"] = abs(row["old"]["entropy"] - row["new"]["entropy"])
            out["rows"].append(row)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
