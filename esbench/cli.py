"""The `esbench` command line: validate, plan, run, report, env, and the leaderboard.

The contract: README's command table and docs/architecture.md.

Heavy libraries (torch, transformers, lm-eval) are imported only by the commands that need them, so
`esbench validate` answers in about a second.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from esbench.records import cell_dir, read_record, status
from esbench.spec import Suite, SuiteError, load_suite

EXIT_INVALID = 2


def _load(path: str) -> Suite:
    try:
        return load_suite(path)
    except SuiteError as e:
        print(f"invalid suite:\n{e.render()}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None


def _select(suite: Suite, only: str | None):
    cells = suite.cells()
    if only:
        cells = [c for c in cells if fnmatch.fnmatch(c.id, only) or fnmatch.fnmatch(c.name, only)]
        if not cells:
            print(f"--only {only!r} matches no cell of suite {suite.name!r}", file=sys.stderr)
            raise SystemExit(EXIT_INVALID)
    return cells


def _out_problem(command: str, *folders: Path) -> str | None:
    """An `--out` (or a folder under it) that exists but is not a folder: refused before anything is written."""
    from esbench.suite_yaml import printable

    for folder in folders:
        if os.path.lexists(folder) and not folder.is_dir():
            return printable(f"esbench {command}: --out {folder}: exists and is not a folder")
    return None


def cmd_validate(args) -> int:
    suite = _load(args.suite)
    print(f"{args.suite}: valid suite {suite.name!r} with {len(suite.cells())} cells")
    return 0


def cmd_plan(args) -> int:
    suite = _load(args.suite)
    if problem := _out_problem("plan", Path(args.out), Path(args.out) / suite.name):
        print(problem, file=sys.stderr)
        return EXIT_INVALID
    memory = _memory_plans(args, _select(suite, args.only))
    if isinstance(memory, int):
        return memory
    if args.markdown:
        from esbench.memory import GiB, plan_markdown

        if memory is None:
            print("esbench plan: --markdown prints the memory plan: give --gpus and --gpu-memory", file=sys.stderr)
            return EXIT_INVALID
        first = next(iter(memory.values()), None)
        gpus = args.gpus or (first.gpus if first else 1)
        print(plan_markdown(suite.name, list(memory.values()), gpus, (args.gpu_memory or 0) * GiB))
        return 0
    rows = []
    for c in _select(suite, args.only):
        s = c.spec
        row = {
            "id": c.id,
            "model": c.labels["model"],
            "dataset": c.labels["dataset"],
            "method": c.labels["method"],
            "budget": s["budget"],
            "seed": s["seed"],
            "status": status(cell_dir(args.out, suite.name, c.id)),
        }
        if memory is not None:
            plan = memory[c.id].row()
            if args.json:
                row["memory"] = plan
            else:
                row.update(
                    {
                        "GPUs": plan["gpus"],
                        "GiB/GPU": f"{plan['peak_gib_per_gpu']:g}" if plan["fits"] is not None else "?",
                        "fits": {True: "yes", False: "NO", None: "?"}[plan["fits"]],
                        "why / fix": "; ".join(x for x in [plan["reason"], plan["fix"], *plan["notes"]] if x),
                    }
                )
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{suite.name}: {len(rows)} cells")
    for col in rows[0] if rows else []:
        table.add_column(col)
    for r in rows:
        table.add_row(*(str(v) for v in r.values()))
    Console().print(table)
    return 0


def _memory_plans(args, cells) -> dict[str, Any] | int | None:
    """`esbench plan --gpus N --gpu-memory GiB`: each cell's memory plan (`esbench.memory`), or None without them.
    One of the two given alone takes the other from this machine's GPUs; with none here it is an error (exit 2)."""
    if args.gpus is None and args.gpu_memory is None:
        return None
    from esbench.gpu import visible_memory
    from esbench.memory import GiB, plan_cell

    local = visible_memory()
    gpus = args.gpus if args.gpus is not None else len(local)
    memory = args.gpu_memory * GiB if args.gpu_memory is not None else (min(local) if local else 0)
    if not gpus or not memory:
        print("esbench plan: give both --gpus and --gpu-memory (no GPU here to read them from)", file=sys.stderr)
        return EXIT_INVALID
    return {c.id: plan_cell(c, gpus, memory) for c in cells}


def memory_refusals(cells, gpu_memory: list[int], workers: int, grpo_gpus: int = 1) -> str | None:
    """The cells predicted not to fit this machine's GPUs, as one message; None when all fit (or run on CPU).

    `esbench run` calls it before any cell starts. ESBENCH_MEMORY_CHECK=off skips it (a prediction that is wrong
    for a model it has not seen should not stop a run that would fit)."""
    if os.environ.get("ESBENCH_MEMORY_CHECK", "on") == "off" or not gpu_memory:
        return None
    from esbench.executors.container import cell_uses_gpu
    from esbench.memory import GiB, plan_cell

    bad = []
    for c in cells:
        if not cell_uses_gpu(c.spec):
            continue
        plan = plan_cell(c, len(gpu_memory), min(gpu_memory), workers=workers, grpo_gpus=grpo_gpus)
        if plan.fits is False:
            bad.append(f"  {c.name}: {plan.reason}" + (f"; fix: {plan.fix}" if plan.fix else ""))
    if not bad:
        return None
    head = (
        f"esbench run: {len(bad)} cell(s) predicted not to fit {len(gpu_memory)} GPU(s) of "
        f"{min(gpu_memory) / GiB:.0f} GiB (`esbench plan SUITE --gpus N --gpu-memory GiB` shows each resident set); "
        "no cell was started:"
    )
    return "\n".join([head, *bad, "ESBENCH_MEMORY_CHECK=off runs them anyway."])


def _setup_logging(log_file: Path) -> None:
    """Library chatter and Python warnings go to the run's log file; the terminal keeps progress and tables."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
        h.close()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    warnings.simplefilter("default")
    for name in ("lm-eval", "lm_eval", "transformers", "datasets", "accelerate"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True


def _execution_env(args) -> None:
    """Execution options that never change results travel as environment variables: child processes (`--jobs`),
    Slurm jobs (sbatch exports the environment) and Ray tasks (`executors.remote.execution_env`) all see them."""
    if getattr(args, "es_workers", None):
        os.environ["ESBENCH_ES_WORKERS"] = str(args.es_workers)
    if getattr(args, "grpo_gpus", None):
        os.environ["ESBENCH_GRPO_GPUS"] = str(args.grpo_gpus)
    if getattr(args, "ray_address", None):
        os.environ["ESBENCH_RAY_ADDRESS"] = args.ray_address


def cmd_run(args) -> int:
    suite = _load(args.suite)
    cells = _select(suite, args.only)
    if problem := _out_problem("run", Path(args.out), Path(args.out) / suite.name):
        print(problem, file=sys.stderr)
        return EXIT_INVALID
    _execution_env(args)
    # library progress bars (lm-eval requests, weight loading) would drown the rich progress display
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from rich.console import Console

    from esbench.executors import get_executor
    from esbench.summary import claims_table, summary_table

    console = Console()
    root = Path(args.out) / suite.name
    pending = [c for c in cells if status(cell_dir(args.out, suite.name, c.id)) != "done"]
    absent = _missing_artefacts(pending)
    if absent:  # before any cell starts or any folder is written
        print(absent, file=sys.stderr)
        return 2
    from esbench.gpu import visible_memory
    from esbench.runner import es_workers, grpo_gpus

    refused = memory_refusals(pending, visible_memory(), es_workers(), grpo_gpus())
    if refused:  # before anything loads: the memory plan says these cells would run out of GPU memory
        print(refused, file=sys.stderr)
        return 2
    _setup_logging(root / "esbench.log")
    if not pending:
        console.print(f"all {len(cells)} cells of {suite.name!r} are done; nothing to run")
    else:
        console.print(f"{suite.name}: {len(pending)} of {len(cells)} cells to run (output: {root})")
        dir_of = lambda c: cell_dir(args.out, suite.name, c.id)  # noqa: E731
        options = {}
        if args.runtime != "local":
            from esbench.executors.container import ContainerRuntime

            if args.executor != "local":
                print("esbench run: --runtime works with the local executor (ray/slurm: not yet)", file=sys.stderr)
                return 2
            try:
                options["runtime"] = ContainerRuntime.from_options(args.runtime, args.image, args.mount)
            except ValueError as e:
                print(f"esbench run: {e}", file=sys.stderr)
                return 2
        failed = get_executor(args.executor)(pending, dir_of, console, jobs=args.jobs, **options)
        if failed:
            records = _records(args.out, suite, cells)
            console.print(summary_table(suite.name, records))
            console.print(claims_table(records))
            for c, err in failed:
                console.print(f"[red]cell {c.id} ({c.name}) failed:[/red] {err}")
            console.print(f"details: {root / 'esbench.log'}")
            return 1
    records = _records(args.out, suite, cells)
    console.print(summary_table(suite.name, records))
    console.print(claims_table(records))  # the paper's claims C1-C6 with their CIs and verdicts
    return 0


def _missing_artefacts(cells) -> str | None:
    """One message listing every model and dataset the cells need that is neither cached nor on the hub."""
    from esbench.prefetch import artefacts, missing

    gone = missing(artefacts(cells))
    if not gone:
        return None
    lines = [f"esbench run: {len(gone)} artefact(s) missing; no cell was started:"]
    lines += [f"  {a.describe()}: {why}" for a, why in gone]
    lines.append("Fetch them where the hub is reachable (`esbench prefetch SUITE`, with the same HF_HOME), then rerun.")
    return "\n".join(lines)


def cmd_prefetch(args) -> int:
    """Download every model and dataset of a suite into the Hugging Face caches (run it where the hub is reachable)."""
    from esbench.prefetch import artefacts, cached, fetch

    suite = _load(args.suite)
    arts = artefacts(_select(suite, args.only))
    if not arts:
        print(f"{suite.name}: nothing to fetch (built-in or local models, local or generated data)")
        return 0
    failed = 0
    for a in arts:
        if cached(a) and not args.force:
            print(f"cached   {a.describe()}")
            continue
        try:
            folder = fetch(a)
        except Exception as e:  # report every artefact, then fail
            failed += 1
            print(f"FAILED   {a.describe()}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        print(f"fetched  {a.describe()} -> {folder}")
    print(f"{suite.name}: {len(arts) - failed} of {len(arts)} artefacts in the cache")
    return 1 if failed else 0


def _records(out: str, suite: Suite, cells):
    recs = []
    for c in cells:
        d = cell_dir(out, suite.name, c.id)
        if status(d) == "done":
            recs.append(read_record(d))
    return recs


def cmd_run_cell(args) -> int:
    """One cell from its frozen `cell.json` into DIR: the seam that executors and container runtimes call."""
    from esbench.records import CellBusy, CellDir
    from esbench.runner import check_cell_dir, run_cell
    from esbench.spec import load_cell_json
    from esbench.suite_yaml import printable

    _execution_env(args)
    if args.container_digest:
        from esbench import provenance

        provenance.CONTAINER.update(image=args.container_image, digest=args.container_digest)
    cell_json, out = Path(args.cell_json), Path(args.out)
    # cell.json is untrusted input: bounded strict reading and the suite's validation, then a folder that is this
    # cell's (or new), all before any model loads or any file is written
    try:
        cell = load_cell_json(cell_json)
        check_cell_dir(cell, out)
    except (OSError, ValueError) as e:  # UntrustedInputError, CellError and ForeignCellDir are ValueErrors
        print(f"esbench run-cell: {printable(str(e))}", file=sys.stderr)
        return EXIT_INVALID
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    _setup_logging(CellDir(out).log)
    try:
        record = run_cell(cell, out, on_stage=lambda s: print(f"{cell.name}: {s}", flush=True))
    except CellBusy as e:
        print(f"esbench run-cell: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"id": record["cell"]["id"], "record": str(out / "record.json")}))
    return 0


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
