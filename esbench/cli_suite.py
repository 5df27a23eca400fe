"""The `esbench` commands that read a suite without running it (validate, plan, prefetch), and what every suite
command shares: loading the suite (exit 2 with every problem) and selecting its cells with `--only`.

Separate from cli.py (the argument parser) and cli_run.py (the commands that execute cells) so each reads on its
own; this module is the lowest of the three. Heavy libraries are imported inside the commands that need them.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
from pathlib import Path
from typing import Any

from esbench.records import cell_dir, status
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
        from esbench.memory import GiB
        from esbench.memory_plan import plan_markdown

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
    from esbench.memory import GiB
    from esbench.memory_plan import plan_cell

    local = visible_memory()
    gpus = args.gpus if args.gpus is not None else len(local)
    memory = args.gpu_memory * GiB if args.gpu_memory is not None else (min(local) if local else 0)
    if not gpus or not memory:
        print("esbench plan: give both --gpus and --gpu-memory (no GPU here to read them from)", file=sys.stderr)
        return EXIT_INVALID
    return {c.id: plan_cell(c, gpus, memory) for c in cells}


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
