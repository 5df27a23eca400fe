"""From verified submissions to leaderboard entries compared against the paper (the data behind both renderings).

An *entry* is one grid point of one submission (model × dataset × method × budget) over its seeds, with, per task,
each metric's mean and standard error in percentage points, recomputed by `verify` from the per-sample logs (the
records' own numbers are never displayed). Cells of the paper's grid map to paper rows through the release's
`paper_map`; any other cell (the tiny suite, a plug-in on a grid the paper has no row for) gets the status
"no paper reference" rather than a silent blank.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esbench import claims as paper_claims
from esbench.leaderboard.artifact import cell_verdict
from esbench.leaderboard.compare import compare, estimate, pooled_seed_sd, seed_sd_for
from esbench.leaderboard.verify import MANIFEST, Report, submission_evidence, submission_folders, verify
from esbench.records import method_key
from esbench.untrusted import UntrustedInputError, read_bytes

METRICS = ["pass@1", "pass@16", "pass@32", "maj@16", "maj@32", "greedy"]
NO_REF = "no paper reference"
STATUS_ORDER = {"fail": 0, "warn": 1, "reproduced": 2, NO_REF: 3}


@dataclass
class Entry:
    submission: str
    suite: str
    model: str
    model_path: str
    dataset: str
    method: str
    kind: str
    budget: Any
    seeds: list[int]
    grid: str
    cells: list[str]
    paper_model: str | None
    paper_method: str | None
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    provenance: list[dict[str, Any]] = field(default_factory=list)
    flops: float | None = None  # mean over seeds of the records' App. G.2 training FLOPs (`compute`); None if absent

    @property
    def key(self) -> str:
        return f"{self.submission}:{self.cells[0]}"

    def status(self) -> str:
        """The worst status over every compared metric of every task."""
        seen = [m["status"] for t in self.tasks.values() for m in t["metrics"].values() if m.get("status")]
        return min(seen, key=STATUS_ORDER.__getitem__) if seen else NO_REF  # every status set is one of these


@dataclass
class Board:
    release: dict[str, Any]
    entries: list[Entry]
    accepted: list[Report]
    rejected: list[Report]
    reference: list[dict[str, Any]]
    expected: dict[str, Any]
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)  # submission -> `esbench.claims.evaluate`


def submission_claims(accepted: list[Report]) -> dict[str, dict[str, Any]]:
    """The paper's claims C1-C6 on each verified submission's records. Their Pass@k evidence (`per_problem`) is what
    verify matched against the samples; entropy and drift (C3, C4) are record fields it cannot recompute (reported).
    """
    return {r.submission.get("name", r.path.name): paper_claims.evaluate([c.record for c in r.cells]) for r in accepted}


def flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested provenance as dotted keys (`model.weights_sha256`), lists joined, for the provenance drawer."""
    out: dict[str, Any] = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        elif isinstance(v, list):
            out[key] = ", ".join(map(str, v)) if v else "none"
        else:
            out[key] = v
    return out


def reference_value(
    board_ref: list[dict[str, Any]], tables: list[int], model: str, method: str, task: str, metric: str
):
    for v in board_ref:
        if (
            v["table"] in tables
            and v["model"] == model
            and v["method"] == method
            and v["column"] == task
            and v["metric"] == metric
        ):
            return v
    return None


def expected_value(expected: dict[str, Any], model: str, method: str, task: str, metric: str, budget: Any):
    """The authors' artifact figures (more digits than Table 2, plus greedy) for Qwen2.5-1.5B GSM8K base / ES."""
    if model != expected.get("model") or task != expected.get("task"):
        return None
    run = {"Base": "Base", "ES": "ES step 234"}.get(method)
    if run is None:
        return None
    figures = expected["runs"][run]
    key = {"pass@1": "mean@32", "pass@16": "pass@16", "pass@32": "pass@32", "greedy": "greedy_correct"}.get(metric)
    if key is None or key not in figures:
        return None
    value = figures[key] / expected["problems"] if key == "greedy_correct" else figures[key]
    return {
        "value": 100.0 * value,
        "source": {"table": "expected_results.json", "row": run, "column": key},
    }


def build_board(root: Path, release: dict[str, Any]) -> Board:
    ref_doc = json.loads((release["dir"] / release["reference"]["paper"]).read_text())
    expected = json.loads((release["dir"] / release["reference"]["expected_results"]).read_text())
    accepted: list[Report] = []
    rejected: list[Report] = []
    folders = submission_folders(root)
    peers = {p: submission_evidence(p) for p in folders}  # once, for every submission's check for copies
    for path in folders:
        report = _total(lambda path=path: verify(path, root, release["id"], peers), Report(path, release["id"]))
        (accepted if report.ok else rejected).append(report)
    frozen = json.loads((release["dir"] / release["cells"]).read_text())
    paper_grid = {_no_seed(c["spec"]) for suite in release["paper_map"]["suites"] for c in frozen.get(suite, [])}
    entries = []
    for report in list(accepted):
        got = _total(lambda report=report: _entries(report, release, ref_doc["values"], expected, paper_grid), report)
        if isinstance(got, Report):  # accepted by verify, but its entries cannot be built: reported, skipped
            accepted.remove(report)
            rejected.append(report)
        else:
            entries += got
    # the release's own method order (base, es, grpo, ...), plug-ins after, as the paper lays out its rows
    order = {(c["labels"]["suite"], c["labels"]["method"]): i for cells in frozen.values() for i, c in enumerate(cells)}
    entries.sort(key=lambda e: (e.submission, e.suite, e.model, order.get((e.suite, e.method), len(order)), e.method))
    claims = {}
    for report in list(accepted):
        got = _total(lambda report=report: submission_claims([report]), report)
        if isinstance(got, Report):
            accepted.remove(report)
            rejected.append(report)
            entries = [e for e in entries if e.submission != report.submission.get("name", report.path.name)]
        else:
            claims.update(got)
    return Board(release, entries, accepted, rejected, ref_doc["values"], expected, claims)


def _total(work, report: Report):
    """`work()`, or `report` with the failure as its reason: one submission that breaks a step no check foresaw
    is reported and skipped, and the board is still built for the others."""
    try:
        return work()
    except Exception as e:  # noqa: BLE001  (the point: nothing a submission holds may take the board down)
        report.add(f"cannot be put on the board ({type(e).__name__}: {str(e)[:200]})")
        print(f"esbench leaderboard build: {report.path.name!a}: {type(e).__name__}: {str(e)[:200]!a}", file=sys.stderr)
        return report


def _no_seed(spec: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in spec.items() if k != "seed"}, sort_keys=True)


def _entries(
    report: Report, release: dict[str, Any], ref: list[dict[str, Any]], expected: dict[str, Any], paper_grid: set[str]
) -> list[Entry]:
    pmap = release["paper_map"]
    groups: dict[str, list] = {}
    for c in report.cells:
        spec = c.record["cell"]["spec"]
        groups.setdefault(_no_seed(spec), []).append(c)
    try:
        manifest_sha = hashlib.sha256(read_bytes(report.path / MANIFEST)).hexdigest()
    except UntrustedInputError:
        manifest_sha = None
    out = []
    for cells in groups.values():
        cells.sort(key=lambda c: c.record["cell"]["spec"]["seed"])
        first = cells[0].record
        spec, labels = first["cell"]["spec"], first["cell"]["labels"]
        on_paper_grid = _no_seed(spec) in paper_grid
        paper_model = pmap["models"].get(spec["model"]["path"]) if on_paper_grid else None
        paper_method = pmap["methods"].get(method_key(spec)) if on_paper_grid else None
        e = Entry(
            submission=report.submission.get("name", report.path.name),
            suite=labels.get("suite", ""),
            model=labels.get("model", ""),
            model_path=spec["model"]["path"],
            dataset=labels.get("dataset", "-"),
            method=labels.get("method", ""),
            kind=method_key(spec),
            budget=spec["budget"],
            seeds=[c.record["cell"]["spec"]["seed"] for c in cells],
            grid=cells[0].grid,
            cells=[c.id for c in cells],
            paper_model=paper_model,
            paper_method=paper_method,
        )
        flops = [_finite((c.record.get("compute") or {}).get("flops")) for c in cells]
        known = [f for f in flops if f is not None]
        e.flops = _finite(sum(known) / len(known)) if len(known) == len(flops) else None
        for t in spec["eval"]["tasks"]:
            paper_task = pmap["tasks"].get(t)
            mapped = paper_model and paper_method and paper_task
            metrics = {}
            for m in METRICS:
                per_seed = [c.recomputed[t][m] for c in cells if m in c.recomputed.get(t, {})]
                if len(per_seed) != len(cells):
                    continue
                est = estimate(per_seed, cells[0].per_problem[t].get(m))
                row: dict[str, Any] = {
                    "mean": est.mean,
                    "se": est.se,
                    "se_source": est.se_source,
                    "per_seed": [100.0 * v for v in per_seed],
                }
                refv = None
                if paper_model and paper_method and paper_task:  # `mapped`, spelled out: narrows the three to str
                    refv = expected_value(expected, paper_model, paper_method, paper_task, m, spec["budget"])
                    refv = refv or reference_value(ref, pmap["tables"], paper_model, paper_method, paper_task, m)
                if refv is not None:
                    s_seed = seed_sd_for(release["rule"], m, t, method_key(spec), refv)
                    v = compare(est, refv["value"], m, release["rule"], refv.get("se"), s_seed)
                    row.update(
                        ref=refv["value"],
                        source=refv["source"],
                        status=v.status,
                        delta=v.delta,
                        band=v.band,
                        warn_band=v.warn_band,
                    )
                    if v.seed_sd:
                        row["seed_sd"] = v.seed_sd
                else:
                    row["status"] = NO_REF if not mapped else None
                metrics[m] = row
            e.tasks[t] = {
                "held_out": t in spec["eval"].get("held_out", []),
                "paper_task": paper_task,
                "metrics": metrics,
                "curve": {
                    str(k): 100.0 * sum(c.recomputed[t][f"pass@{k}"] for c in cells) / len(cells)
                    for k in spec["eval"]["k"]
                    if all(f"pass@{k}" in c.recomputed.get(t, {}) for c in cells)
                },
            }
            artifact = release["rule"].get("artifact")
            if artifact and t == artifact.get("task"):
                verdicts = [cell_verdict(artifact, c.record, c.recomputed, c.per_problem, c.id) for c in cells]
                if any(verdicts):
                    e.tasks[t]["artifact"] = [v.to_json() for v in verdicts if v is not None]
        for c in cells:
            prov = c.record["provenance"]
            e.provenance.append(
                flatten(
                    {
                        "cell": c.id,
                        "name": c.record["cell"]["name"],
                        "seed": c.record["cell"]["spec"]["seed"],
                        "release": c.record["release"],
                        "esbench": prov.get("esbench"),
                        "git_commit": prov.get("git_commit"),
                        "git_dirty": prov.get("git_dirty"),
                        "container_image_digest": prov.get("container_image_digest"),
                        "python": prov.get("python"),
                        "platform": prov.get("platform"),
                        "cuda": prov.get("cuda"),
                        "gpus": prov.get("gpus"),
                        "driver": prov.get("driver"),
                        "packages": prov.get("packages"),
                        "model": prov.get("model"),
                        "final_weights_sha256": prov.get("final_weights_sha256"),
                        "datasets": prov.get("datasets"),
                        "manifest_sha256": manifest_sha,
                        "method": c.record["cell"]["spec"]["method"],
                        "budget_used": c.record.get("budget_used"),
                        "timings": c.record.get("timings"),
                    }
                )
            )
        out.append(e)
    return out


def _finite(x: Any) -> float | None:
    """A record's number as a finite float; None for anything else (a string, an integer too large for a float)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    try:
        x = float(x)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def seed_sd_estimates(entries: list[Entry]) -> dict[str, float]:
    """Seed SDs (pp) for a release's `rule["seed_sd_pp"]`, from the multi-seed entries given: one value per
    `METHOD/TASK/METRIC`, pooled over the entries (models, budgets, submissions) that share it. Release code copies
    reference files rather than building them from records, so a maintainer calls this on the board of a multi-seed
    reference run and passes the result to `write_release(rule=...)`. Entries of one seed are skipped."""
    groups: dict[str, list[list[float]]] = {}
    for e in entries:
        if len(e.seeds) < 2:
            continue
        for t, td in e.tasks.items():
            for m, row in td["metrics"].items():
                groups.setdefault(f"{e.kind}/{t}/{m}", []).append(row["per_seed"])
    out = {key: pooled_seed_sd(g) for key, g in sorted(groups.items())}
    return {k: v for k, v in out.items() if v is not None}
