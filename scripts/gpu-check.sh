#!/usr/bin/env bash
# A short GPU check (at most 8 minutes on one H200) that needs only torch and transformers beyond esbench itself.
#
#   scripts/gpu-check.sh --wheelhouse DIR      # on the GPU box (no network needed when DIR holds the wheels)
#   scripts/gpu-check.sh --build-wheelhouse DIR [--python-version 3.12]   # here, where PyPI is reachable
#   ESBENCH_GPU_CHECK_DEVICE=cpu scripts/gpu-check.sh --skip-install      # the same steps on CPU, tiny settings
#
# It keeps the machine's own torch and transformers: esbench is installed with `pip install --no-deps -e .`, then
# only the distributions esbench's HF path imports that the machine lacks, from the wheelhouse (`--no-index
# --find-links`), each with --no-deps. `--build-wheelhouse` writes that list (requirements.txt: what this checkout's
# environment has installed, minus torch, transformers and everything they depend on) and downloads the wheels for the
# GPU box's Python. The steps, each under `timeout`:
#   doctor      `esbench doctor --device cuda --hf-only` (the box has no vLLM): driver, torch, HF paths, noise, memory
#   cells       the tiny suite's base, ES and GRPO cells with `device: cuda`, shrunk (a derived suite in a tmp dir)
#   es_overhead `benchmarks/es_overhead.py --model llama-0.5b --dtype bfloat16` (ES update vs plain roll-outs)
#   noise       tests/es/test_noise.py's CUDA test (table noise and arithmetic equal on CPU and CUDA)
# It prints one JSON object (each step's status, seconds and key numbers) and exits 1 if any step failed.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
DEVICE=${ESBENCH_GPU_CHECK_DEVICE:-cuda}
WHEELS=${ESBENCH_WHEELS:-}
SKIP_INSTALL=0
BUILD=""
PYVER=${ESBENCH_WHEELS_PYTHON:-3.12}
ONLY=" ${ESBENCH_GPU_CHECK_STEPS:-doctor cells es_overhead noise} "  # a subset, space-separated (tests run a few)
# what the HF path imports beyond torch and transformers (a base, an ES and a GRPO cell, doctor --hf-only, the CUDA
# test), taken with their whole dependency closures: lm-eval imports sacrebleu at import time, datasets pyarrow and
# pandas. About 50 wheels and 150 MB; math-verify only for the paper's math tasks.
TOP="pydantic pyyaml rich lm-eval datasets trl accelerate math-verify pytest"

usage() { sed -n 2,17p "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --wheelhouse) WHEELS=$2; shift 2 ;;
    --build-wheelhouse) BUILD=$2; shift 2 ;;
    --python-version) PYVER=$2; shift 2 ;;
    --skip-install) SKIP_INSTALL=1; shift ;;
    --requirements) requirements_only=1; shift ;;
    --dry-run) DEVICE=cpu; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
case "$DEVICE" in cpu|cuda) ;; *) echo "gpu-check: ESBENCH_GPU_CHECK_DEVICE must be cpu or cuda" >&2; exit 2 ;; esac

# The distributions to bring: the closure of $TOP in this environment, minus torch's and transformers' closures.
requirements() {
  "$PY" - "$TOP" <<'EOF'
import re
import sys
from importlib import metadata

def name(req):
    return re.split(r"[\s;<>=!~\[(]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")

def closure(roots):
    seen, todo = {}, [name(r) for r in roots]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        try:
            dist = metadata.distribution(n)
        except metadata.PackageNotFoundError:
            continue
        seen[n] = dist.version
        todo += [name(r) for r in dist.requires or [] if "extra ==" not in r]
    return seen

have = closure(["torch", "transformers"])
need = closure(sys.argv[1].split())
need["setuptools"] = metadata.version("setuptools")  # builds the editable esbench (--no-build-isolation)
for n, v in sorted(need.items()):
    if n not in have or n == "setuptools":
        print(f"{n}=={v}")
EOF
}

if [ "${requirements_only:-0}" = 1 ]; then requirements; exit $?; fi
if [ -n "$BUILD" ]; then
  mkdir -p "$BUILD"
  requirements > "$BUILD/requirements.txt" || exit 1
  echo "gpu-check: $(wc -l < "$BUILD/requirements.txt") distributions for Python $PYVER -> $BUILD" >&2
  plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
  plat+=(--platform linux_x86_64 --platform any)
  ok=0
  while read -r req; do  # one at a time: a wheel-less (sdist-only) distribution is reported, not fatal
    if "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" "${plat[@]}" -d "$BUILD" \
      "$req" 2>/dev/null || "$PY" -m pip wheel -q --no-deps -w "$BUILD" "$req" 2>/dev/null; then
      ok=$((ok + 1))
    else
      echo "gpu-check: no wheel for $req" >&2
    fi
  done < "$BUILD/requirements.txt"
  echo "gpu-check: $ok wheels in $BUILD ($(du -sh "$BUILD" | cut -f1))" >&2
  exit 0
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/esbench-gpu-check.XXXXXX")
if [ "${ESBENCH_GPU_CHECK_KEEP:-0}" = 1 ]; then echo "gpu-check: logs in $WORK" >&2; else trap 'rm -rf "$WORK"' EXIT; fi
STEPS="$WORK/steps.tsv"
: > "$STEPS"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TQDM_DISABLE=1 HF_HOME="${HF_HOME:-$WORK/hf}"
export HOME="${HOME:-$WORK}"  # a container user without a home directory: caches need a writable place

# step NAME SECONDS CMD...: run CMD under `timeout`, its output in $WORK/NAME.log, status and time in $STEPS
step() {
  local name=$1 limit=$2 start rc
  shift 2
  if [ "$name" != install ] && [[ $ONLY != *" $name "* ]]; then return 0; fi
  start=$(date +%s%N)
  timeout --kill-after=10 "$limit" "$@" > "$WORK/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((($(date +%s%N) - start) / 1000000))" >> "$STEPS"
  echo "gpu-check: $name: exit $rc" >&2
  return 0
}

install() {
  local reqs missing
  reqs=${WHEELS:+$WHEELS/requirements.txt}
  if [ -z "$reqs" ] || [ ! -f "$reqs" ]; then reqs="$WORK/requirements.txt"; requirements > "$reqs"; fi
  missing=$("$PY" - "$reqs" <<'EOF'
import sys
from importlib import metadata
for line in open(sys.argv[1]):
    req = line.strip()
    if req:
        try:
            metadata.distribution(req.split("==")[0])
        except metadata.PackageNotFoundError:
            print(req)
EOF
)
  echo "gpu-check: installing ${missing:-nothing} and esbench (--no-deps)" >&2
  local from=()
  [ -n "$WHEELS" ] && from=(--no-index --find-links "$WHEELS")
  if [ -n "$missing" ]; then
    # shellcheck disable=SC2086  # one word per requirement
    "$PY" -m pip install -q --no-deps "${from[@]}" $missing || return 1
  fi
  # no build isolation: offline, pip could not fetch setuptools into an isolated build environment
  "$PY" -m pip install -q --no-deps --no-build-isolation -e "$REPO"
}

if [ "$SKIP_INSTALL" = 1 ]; then
  printf 'install\t0\t0\n' >> "$STEPS"
else
  step install 300 install
fi

# shrunk settings: a GPU does the tiny suite in minutes; the CPU mode only proves the steps run
if [ "$DEVICE" = cuda ]; then
  SCALE="budget=4 limit=20 n=8 population=8 batch=16"
  BENCH=(--model llama-0.5b --device cuda --dtype bfloat16 --population 8 --batch 16 --max-new-tokens 32 --repeats 2)
  T_DOCTOR=120 T_CELLS=200 T_BENCH=180 T_NOISE=60
else
  SCALE="budget=1 limit=3 n=2 population=2 batch=4"
  BENCH=(--model tiny --device cpu --population 2 --batch 4 --max-new-tokens 8 --repeats 1 --noise table)
  T_DOCTOR=240 T_CELLS=300 T_BENCH=240 T_NOISE=120
fi

step doctor "$T_DOCTOR" "$PY" -m esbench.cli doctor --device "$DEVICE" --hf-only --json "$WORK/doctor.json"

"$PY" - "$REPO/suites/tiny.yaml" "$WORK/suite.yaml" "$DEVICE" $SCALE <<'EOF'
import sys
import yaml
src, dst, device, *scale = sys.argv[1:]
s = dict(kv.split("=") for kv in scale)
suite = yaml.safe_load(open(src))
suite["name"] = f"tiny-gpu-check-{device}"
suite["methods"] = {k: suite["methods"][k] for k in ("base", "es", "grpo")}
es, grpo = suite["methods"]["es"], suite["methods"]["grpo"]
es.update(population=int(s["population"]), batch_size=int(s["batch"]))
prompts = max(1, int(s["batch"]) // 4)
grpo.update(prompts_per_rollout=prompts, ppo_minibatch_prompts=prompts, num_generations=4, micro_batch=prompts * 4)
suite["budgets"] = [int(s["budget"])]
ev = suite["eval"]
ev.update(limit=int(s["limit"]), n=int(s["n"]), k=[1, int(s["n"])])
ev.pop("probe", None)
suite["backend"] = {"kind": "hf", "device": device}
yaml.safe_dump(suite, open(dst, "w"), sort_keys=False)
EOF
step cells "$T_CELLS" "$PY" -m esbench.cli run "$WORK/suite.yaml" --out "$WORK/runs"

step es_overhead "$T_BENCH" "$PY" "$REPO/benchmarks/es_overhead.py" "${BENCH[@]}"

step noise "$T_NOISE" "$PY" -m pytest -q -p no:cacheprovider -rs --rootdir "$REPO" \
  "$REPO/tests/es/test_noise.py::test_cpu_and_cuda_give_the_same_table_noise_and_the_same_perturbed_weights"

"$PY" - "$WORK" "$DEVICE" <<'EOF'
import json
import re
import sys
from pathlib import Path

work, device = Path(sys.argv[1]), sys.argv[2]

def tail(name, n=5):
    p = work / f"{name}.log"
    return p.read_text(errors="replace").strip().splitlines()[-n:] if p.exists() else []

def last_json(text):
    """The last top-level JSON object a step printed (benchmarks print theirs last, indented)."""
    starts = [m.start() for m in re.finditer(r"(?m)^\{", text)]
    for s in reversed(starts):
        try:
            return json.loads(text[s:])
        except ValueError:
            continue
    return None

steps = {}
for line in (work / "steps.tsv").read_text().splitlines():
    name, rc, ms = line.split("\t")
    rc = int(rc)
    status = "ok" if rc == 0 else "timeout" if rc in (124, 137) else "fail"
    steps[name] = {"status": status, "exit": rc, "seconds": round(int(ms) / 1000, 1)}

facts = {}
try:
    import torch
    import transformers
    facts = {"python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda,
             "transformers": transformers.__version__,
             "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
except Exception as e:  # the summary is printed whatever broke
    facts = {"error": f"{type(e).__name__}: {e}"}

if "doctor" in steps and (work / "doctor.json").exists():
    d = json.loads((work / "doctor.json").read_text())
    rows = d.get("rows", [])
    steps["doctor"]["rows"] = {r["check"]: r["result"] for r in rows}
    steps["doctor"]["failed"] = {r["check"]: r["detail"] for r in rows if r["result"] == "fail"}
    facts["gpu_facts"] = d.get("gpu")
if "cells" in steps:
    cells = {}
    for rec in sorted((work / "runs").glob("*/*/record.json")):
        r = json.loads(rec.read_text())
        arith = r.get("metrics", {}).get("tiny_arith", {})
        cells[r["cell"].get("name", rec.parent.name)] = {
            "pass@1": arith.get("pass@1"),
            "greedy": arith.get("greedy"),
            "device": (r.get("provenance", {}).get("backend") or {}).get("device"),
        }
    steps["cells"]["records"] = cells
    if len(cells) != 3 and steps["cells"]["status"] == "ok":
        steps["cells"]["status"] = "fail"
if "es_overhead" in steps:
    bench = last_json((work / "es_overhead.log").read_text(errors="replace")) or {}
    keys = ("update_over_generation", "perturb_restore_over_copy", "perturb_restore_gbps", "peak_es_over_inference")
    steps["es_overhead"].update(
        {k: bench.get(k) for k in ("model", "device", "dtype", "parameters", "generation_s", "copy_gbps")},
        noise={n: {k: v.get(k) for k in keys} for n, v in (bench.get("noise") or {}).items()},
    )
if "noise" in steps:
    text = (work / "noise.log").read_text(errors="replace")
    if re.search(r"\b1 skipped\b", text) and steps["noise"]["status"] == "ok":
        steps["noise"]["status"] = "skip" if device == "cpu" else "fail"  # on a GPU box the CUDA test must run
        steps["noise"]["reason"] = "needs a CUDA GPU" if device == "cpu" else "skipped on a GPU box: torch sees no GPU"
for name, s in steps.items():
    if s["status"] in ("fail", "timeout"):
        s["log_tail"] = tail(name)

ok = all(s["status"] in ("ok", "skip") for s in steps.values())
print(json.dumps({"device": device, "ok": ok, **facts, "steps": steps}, indent=1, default=str))
sys.exit(0 if ok else 1)
EOF
