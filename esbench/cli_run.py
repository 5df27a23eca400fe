"""The `esbench` commands that execute cells: `run` (a suite's pending cells, after the checks that refuse a run
before anything starts: missing artefacts, cells predicted not to fit the GPUs) and `run-cell` (one frozen cell.json,
what executors and containers call), with the log and environment setup they share.

Separate from cli.py (the argument parser) and cli_suite.py (the suite commands it builds on).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from pathlib import Path

from esbench.cli_suite import EXIT_INVALID, _load, _out_problem, _select
from esbench.records import cell_dir, read_record, status
from esbench.spec import Suite


def memory_refusals(cells, gpu_memory: list[int], workers: int, grpo_gpus: int = 1) -> str | None:
    """The cells predicted not to fit this machine's GPUs, as one message; None when all fit (or run on CPU).

    `esbench run` calls it before any cell starts. ESBENCH_MEMORY_CHECK=off skips it (a prediction that is wrong
    for a model it has not seen should not stop a run that would fit)."""
    if os.environ.get("ESBENCH_MEMORY_CHECK", "on") == "off" or not gpu_memory:
        return None
    from esbench.executors.container import cell_uses_gpu
    from esbench.memory import GiB
    from esbench.memory_plan import plan_cell

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


def _records(out: str, suite: Suite, cells):
    recs = []
    for c in cells:
        d = cell_dir(Path(out), suite.name, c.id)
        if status(d) == "done":
            recs.append(read_record(d))
    return recs


def cmd_run_cell(args) -> int:
    """One cell from its frozen `cell.json` into DIR: the seam that executors and container runtimes call."""
    from esbench.leases import CellBusy
    from esbench.records import CellDir
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
