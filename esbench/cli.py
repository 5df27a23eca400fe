"""The `esbench` command line: validate, plan, run, report, env, and the leaderboard.

The contract: README's command table and docs/architecture.md.

Heavy libraries (torch, transformers, lm-eval) are imported only by the commands that need them, so
`esbench validate` answers in about a second.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from esbench.cli_run import cmd_run, cmd_run_cell
from esbench.cli_suite import EXIT_INVALID, cmd_plan, cmd_prefetch, cmd_validate


def cmd_env(args) -> int:
    from esbench.provenance import environment

    print(json.dumps(environment(), indent=2))
    return 0


def cmd_doctor(args) -> int:
    from esbench.doctor import main as doctor

    return doctor(args.suite, args.device, args.json, hf_only=args.hf_only)


def cmd_report(args) -> int:
    from esbench.report import render_markdown, write_report

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"{run_dir}: no such run folder", file=sys.stderr)
        return EXIT_INVALID
    try:
        data, path = write_report(run_dir, Path(args.out) if args.out else None, iters=args.bootstrap)
    except FileNotFoundError as e:
        print(str(e), file=sys.stderr)
        return EXIT_INVALID
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        print(render_markdown(data))
        print(f"\nwrote {path} and {len(data['plots'])} plots to {path.parent}", file=sys.stderr)
    return 0


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def _add_execution_options(p) -> None:
    p.add_argument(
        "--es-workers",
        type=_positive_int,
        help="spread each ES update's population over W Ray actors, each a replica of the model "
        "(ESBENCH_ES_WORKERS; default 1: in the cell's process); for paper-bf16 with `engines: E`, W = E runs the "
        "engines as real ones (engine 0 in the cell's process, E-1 actors). Results do not depend on W",
    )
    p.add_argument(
        "--grpo-gpus",
        type=_positive_int,
        help="train each GRPO stage on G processes: FSDP2 over G GPUs of the node (on a CPU, G gloo processes) "
        "(ESBENCH_GRPO_GPUS; default 1). Recorded in provenance: rank-seeded sampling makes the numbers another "
        "machine's; `esbench plan --gpus N` says which cells need it",
    )


def build_parser() -> argparse.ArgumentParser:
    from esbench import __version__

    p = argparse.ArgumentParser(
        prog="esbench", description="Reproducibility benchmark for LLM reasoning post-training."
    )
    p.add_argument("--version", action="version", version=f"esbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    v = sub.add_parser("validate", help="check a suite file; exit 2 with file:line: field: message if invalid")
    v.add_argument("suite")
    v.set_defaults(fn=cmd_validate)

    pl = sub.add_parser("plan", help="list every cell of a suite with its status (done / partial / pending)")
    pl.add_argument("suite")
    pl.add_argument("--json", action="store_true")
    pl.add_argument("--out", default="runs", help="output root (default: runs/)")
    pl.add_argument("--only", help="glob over cell ids or names (model/dataset/method/bBUDGET/sSEED)")
    pl.add_argument(
        "--gpus", type=_positive_int, help="GPUs of the node to plan for: adds each cell's predicted GPU memory"
    )
    pl.add_argument("--gpu-memory", type=float, help="GiB of one GPU (e.g. 80 for an A100-80GB, 141 for an H200)")
    pl.add_argument("--markdown", action="store_true", help="the memory plan as a Markdown table (docs/memory-plan.md)")
    pl.set_defaults(fn=cmd_plan)

    r = sub.add_parser("run", help="train and evaluate pending cells; skip done ones, resume partial ones")
    r.add_argument("suite")
    r.add_argument("--out", default="runs", help="output root (default: runs/)")
    r.add_argument("--only", help="glob over cell ids or names (model/dataset/method/bBUDGET/sSEED)")
    r.add_argument(
        "--executor",
        default="local",
        choices=["local", "ray", "slurm"],
        help="where cells run: this machine (default), a Ray cluster (`pip install esbench[scale]`; "
        "ESBENCH_RAY_ADDRESS or a local instance) or Slurm through submitit (ESBENCH_SLURM_* settings)",
    )
    r.add_argument(
        "--jobs",
        type=_positive_int,
        default=1,
        help="cells run at once by the local executor, each an `esbench run-cell` process with cores/jobs threads "
        "(default 1: one after another, in this process)",
    )
    r.add_argument(
        "--runtime",
        default="local",
        choices=["local", "podman", "docker", "apptainer"],
        help="run each cell's `esbench run-cell` in a container image (--image), GPU passed through; the record "
        "carries the image digest the runtime reports (esbench/executors/container.py)",
    )
    r.add_argument("--image", help="the image for --runtime: name@sha256:digest, name:tag, or a .sif file")
    r.add_argument(
        "--mount", action="append", default=[], help="extra SRC[:DST][:ro] bind mount for --runtime (repeatable)"
    )
    _add_execution_options(r)
    r.add_argument(
        "--ray-address",
        help="the Ray cluster for `--executor ray` and `--es-workers` (ESBENCH_RAY_ADDRESS; 'auto' for the cluster "
        "this node belongs to); default: a private local instance",
    )
    r.set_defaults(fn=cmd_run)

    pf = sub.add_parser("prefetch", help="download a suite's models and datasets into the HF caches (login nodes)")
    pf.add_argument("suite")
    pf.add_argument("--only", help="glob over cell ids or names, as for `run`")
    pf.add_argument("--force", action="store_true", help="download again even what is cached")
    pf.set_defaults(fn=cmd_prefetch)

    rc = sub.add_parser("run-cell", help="run one cell from its frozen cell.json (what executors and containers call)")
    rc.add_argument("cell_json", help="a cell.json written by esbench (runs/<suite>/<id>/cell.json)")
    rc.add_argument("--out", required=True, help="the cell's folder (record.json, samples/, train.jsonl)")
    _add_execution_options(rc)
    rc.add_argument("--container-image", help=argparse.SUPPRESS)  # set by a container runtime on the host
    rc.add_argument("--container-digest", help=argparse.SUPPRESS)
    rc.set_defaults(fn=cmd_run_cell)

    rp = sub.add_parser("report", help="paper-layout tables and plots of a run folder (runs/<suite>)")
    rp.add_argument("run_dir")
    rp.add_argument("--out", help="where report.md, report.json and the PNGs go (default: RUN_DIR/report)")
    rp.add_argument("--json", action="store_true", help="print the report's numbers as JSON instead of Markdown")
    rp.add_argument("--bootstrap", type=int, default=2000, help="paired-bootstrap resamples (default 2000)")
    rp.set_defaults(fn=cmd_report)

    e = sub.add_parser("env", help="print this environment's provenance as JSON")
    e.set_defaults(fn=cmd_env)

    d = sub.add_parser("doctor", help="check this machine's GPU stack and every GPU path on the tiny model (~1 min)")
    d.add_argument("suite", nargs="?", help="also check that this suite's pinned models and datasets are cached")
    d.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="auto (CUDA when usable, else CPU: the CPU subset), cpu, or cuda (exit 1 at once without a usable GPU)",
    )
    d.add_argument("--json", metavar="PATH", help="also write the rows and the GPU facts as JSON to PATH")
    d.add_argument("--hf-only", action="store_true", help="skip the vLLM checks (a machine without vLLM)")
    d.set_defaults(fn=cmd_doctor)

    from esbench.leaderboard.commands import add_parsers as add_leaderboard_parsers

    add_leaderboard_parsers(sub)  # submit, leaderboard verify|build|release
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    raise SystemExit(main())
