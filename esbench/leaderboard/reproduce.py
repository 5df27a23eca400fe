"""`esbench leaderboard reproduce PATH`: re-run a submission's cells from their frozen specs and compare.

`verify` proves that a submission is consistent with itself: every number follows from its samples. It cannot
prove that the samples came from the training run the cell claims; a forger who re-scores edited responses and
rewrites the record to match passes it. Re-running can. Each selected cell is run again with `run_cell`, from the
spec and seed in its `cell.json`, and the new record is set beside the submitted one:

- *identical*: the final weights hash and every per-sample log's SHA-256 agree. esbench's runs are deterministic
  on one platform and package set (the tiny suite's CPU runs are bit-identical), so this is what a genuine cell
  gives on the submitter's hardware class;
- otherwise each task's Pass@k is compared with the release's two-sided rule, the submitted value as the
  reference. Both runs answer the same problems, so the band uses the paired per-problem bootstrap SE of the
  difference (problem difficulty cancels, which the unpaired SEs would not allow). A metric beyond the warn band
  fails the cell; one between the bands makes it `warn`.

`--exact` fails any cell that is not identical: the check for CI on the same hardware, where a difference means
different code, data or samples. A plug-in method must be installed to be re-run.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esbench.leaderboard.compare import Estimate, bootstrap_se, compare
from esbench.leaderboard.verify_report import as_model
from esbench.metrics.passk import pass_at_k
from esbench.records import Record, read_record
from esbench.untrusted import load_json_object


@dataclass
class CellCheck:
    id: str
    name: str
    status: str  # "identical"; else "consistent" (within the rule), "warn" or "failed"
    weights_identical: bool = False
    samples_identical: bool = False
    metrics: list[dict[str, Any]] = field(default_factory=list)  # one row per task and Pass@k
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _pass_values(per_problem: Sequence[tuple[int, int]], k: int) -> list[float]:
    return [pass_at_k(n, c, k) for n, c in per_problem]


def compare_records(submitted: Record, rerun: Record, rule: dict[str, Any]) -> CellCheck:
    """Set a re-run's record beside the submitted one (both for the same cell spec)."""
    cell = submitted.cell
    check = CellCheck(cell["id"], cell["name"], "identical")
    old_w = submitted.provenance.get("final_weights_sha256")
    check.weights_identical = old_w is not None and old_w == rerun.provenance.get("final_weights_sha256")
    check.samples_identical = submitted.samples_sha256 == rerun.samples_sha256
    for t in cell["spec"]["eval"]["tasks"]:
        old_pp = submitted.metrics[t].per_problem
        new_pp = rerun.metrics[t].per_problem
        for k in cell["spec"]["eval"]["k"]:
            old, new = _pass_values(old_pp, k), _pass_values(new_pp, k)
            ref = 100 * sum(old) / len(old)
            diff = [b - a for a, b in zip(old, new, strict=True)]
            est = Estimate(100 * sum(new) / len(new), 100 * bootstrap_se(diff), None, 1, "paired bootstrap")
            verdict = compare(est, ref, f"pass@{k}", rule, se_ref=0.0)
            row = {
                "task": t,
                "metric": f"pass@{k}",
                "submitted": ref,
                "rerun": 100 * sum(new) / len(new),
                "status": verdict.status,
                "band": verdict.band,
            }
            check.metrics.append(row)
            if verdict.status == "fail":
                check.reasons.append(
                    f"{t} {row['metric']}: submitted {ref:.2f}, re-run {row['rerun']:.2f} "
                    f"(differs by more than the warn band {verdict.warn_band:.2f} pp)"
                )
    if not (check.weights_identical and check.samples_identical):
        warned = any(m["status"] == "warn" for m in check.metrics)
        check.status = "failed" if check.reasons else ("warn" if warned else "consistent")
    start_old = (submitted.provenance.get("model") or {}).get("state_sha256")
    start_new = (rerun.provenance.get("model") or {}).get("state_sha256")
    if start_old and start_new and start_old != start_new:
        # Not a verdict on the method: the embedded model is built from code, and another CPU's kernels build other
        # weights, so bit-identity is out of reach and only the rule applies. Said so the reader does not hunt a bug.
        check.reasons.append(
            f"the re-run started from other weights (model state {start_new[:12]} here, {start_old[:12]} submitted): "
            "the model was built or downloaded differently on this machine, so bit-identity cannot be expected"
        )
    return check


def reproduce(
    path: Path,
    out: Path,
    rule: dict[str, Any],
    only: list[str] | None = None,
    exact: bool = False,
    on_cell=None,
    runtime=None,
) -> list[CellCheck]:
    """Re-run the cells of the submission at `path` (those matching `only`) under `out`, and compare each.

    With a container `runtime` (`esbench.executors.container.ContainerRuntime`) each cell re-runs in its image."""
    from esbench.runner import run_cell
    from esbench.spec import Cell

    checks = []
    digest = runtime.digest() if runtime is not None else None  # one `image inspect` for the whole re-run
    for d in sorted((Path(path) / "cells").iterdir()):  # a submission's files: read by the strict reader
        submitted = as_model(Record, load_json_object(d / "record.json"))
        meta = load_json_object(d / "cell.json")
        cell = Cell(meta["spec"], meta["labels"])
        if only and not any(fnmatch.fnmatch(cell.name, g) or fnmatch.fnmatch(cell.id, g) for g in only):
            continue
        if on_cell:
            on_cell(cell)
        try:
            if runtime is None:
                run_cell(cell, Path(out) / cell.id)
                rerun = read_record(Path(out) / cell.id)
            else:
                assert digest is not None  # read above whenever there is a runtime
                rerun = _in_container(runtime, digest, cell, out)
        except Exception as e:  # a cell that cannot be re-run here (a plug-in not installed, no GPU) is a reason
            checks.append(CellCheck(cell.id, cell.name, "failed", reasons=[f"re-run failed: {type(e).__name__}: {e}"]))
            continue
        check = compare_records(submitted, rerun, rule)
        if exact and check.status != "identical":
            pairs = (("final weights", check.weights_identical), ("samples", check.samples_identical))
            check.reasons.append(f"not bit-identical: {' and '.join(w for w, same in pairs if not same)} differ")
            check.status = "failed"
        checks.append(check)
    return checks


def _in_container(runtime, digest: str, cell, out: Path) -> Record:
    from esbench.executors import Handle, write_cell
    from esbench.executors.local import cell_command, run_command

    h = Handle(cell, write_cell(cell, lambda c: Path(out) / c.id))
    run_command(cell_command(h, runtime, digest))
    return h.cd.read_record()
