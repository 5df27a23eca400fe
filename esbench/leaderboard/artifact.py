"""The artifact rule (ADR 0011): the authors' own acceptance test, judged beside the general two-sided rule.

The general rule's band is about ±1.9 pp for a single-seed GSM8K Pass@1; the authors' artifact accepts a re-run of
its base and ES-step-234 evaluations only when mean@32 is within ±0.5 pp and the greedy count is exact. Both
verdicts are shown: the general one says "consistent with the paper", this one "is the artifact's run".

From the first release whose rule data carries `identity` (issue 23), the rule judges like with like:
- A cell is *about* an artifact run when its identity paths (the model, the method, the train task) equal the run's.
  If any other required spec field, its updates or its problem count differ, the verdict is "not judged" and names
  each differing field: a cell trained otherwise is not the artifact's run.
- The tolerance of ±0.5 pp is the artifact's tolerance for *re-evaluating its own checkpoint* (its verify.py
  requires the checkpoint's weight hash). A run marked `training` (an esbench ES cell trains its own weights) is
  an independent training run. It is judged with a band that includes training-seed variance only when the rule
  names the seed SD and its source; with none, its numbers are shown as "reported", never pass or fail.

Everything here is a pure function of the release's rule data (`rule["artifact"]`, see
`release.ARTIFACT_RULE`), a cell's spec, its provenance and its recomputed numbers, so a later release can change
the figures, the match or the environment and old records keep the verdicts of the release they were made under.
A release without the key has no artifact rule.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from esbench.leaderboard.compare import bootstrap_se, t_quantile
from esbench.records import method_key

PASS, FAIL, NA = "pass", "fail", "not applicable"
REPORTED, NOT_JUDGED = "reported", "not judged"
_MISSING = object()
_TOL = 1e-9  # float slack on the tolerance edge: "within 0.5" includes 0.5


def _get(d: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return _MISSING
        d = d[part]
    return d


def spec_value(spec: dict[str, Any], path: str) -> Any:
    """The value at a dotted `path` of a cell spec (`_MISSING` when absent); `method` is the method key the paper
    map uses (`es`, `sequence:es,grpo`), so the two rules place a cell by the same reading of its method."""
    return method_key(spec) if path == "method" else _get(spec, path)


def match_run(artifact: dict[str, Any], spec: dict[str, Any], updates: Any, problems: int | None) -> str | None:
    """The artifact run a cell re-does (e.g. "Base", "ES step 234"), or None.

    A cell matches when every shared `match` path and its run's own `match` paths equal the rule's values, it
    evaluated the artifact's task on all its `problems`, and it spent the run's `updates` (the budget as the
    artifact counts it: 234 updates are 2 epochs of 64-prompt batches; verify has checked the count)."""
    if artifact.get("task") not in spec.get("eval", {}).get("tasks", []) or problems != artifact.get("problems"):
        return None
    absent = artifact.get("absent_means", {})  # a field older cell specs lack reads as the value it then had

    def value(k: str) -> Any:
        v = spec_value(spec, k)
        return absent.get(k, v) if v is _MISSING else v

    if any(value(k) != v for k, v in artifact.get("match", {}).items()):
        return None
    for name, run in artifact.get("runs", {}).items():
        if updates == run.get("updates") and all(value(k) == v for k, v in run.get("match", {}).items()):
            return name
    return None


def place(
    artifact: dict[str, Any], spec: dict[str, Any], updates: Any, problems: int | None
) -> tuple[str | None, list[str]]:
    """(the artifact run a cell is about, the required fields in which it differs from that run).

    A rule without `identity` (releases up to v1.4) places only exact matches, with no differences (`match_run`).
    With it, a cell that evaluates the artifact's task is about a run when the shared `identity` paths and the run's
    own `identity` paths equal the rule's values; every other `match` path, the updates and the problem count are
    then requirements, and each one that differs is listed as `path value (artifact value)`."""
    if "identity" not in artifact:
        return match_run(artifact, spec, updates, problems), []
    if artifact.get("task") not in spec.get("eval", {}).get("tasks", []):
        return None, []
    absent = artifact.get("absent_means", {})

    def value(k: str) -> Any:
        v = spec_value(spec, k)
        return absent.get(k, v) if v is _MISSING else v

    shared = artifact.get("match", {})
    if any(value(k) != shared[k] for k in artifact["identity"]):
        return None, []
    for name, run in artifact.get("runs", {}).items():
        want = {**shared, **run.get("match", {})}
        if any(value(k) != want[k] for k in run.get("identity", [])):
            continue
        differs = [f"{k} {_show(value(k))} (artifact {_show(v)})" for k, v in want.items() if value(k) != v]
        if updates != run.get("updates"):
            differs.append(f"updates {_show(updates)} (artifact {run.get('updates')})")
        if problems != artifact.get("problems"):
            differs.append(f"{artifact['task']} problems {_show(problems)} (artifact {artifact.get('problems')})")
        return name, differs
    return None, []


def version_matches(pinned: str, recorded: Any) -> bool:
    """Release-prefix match, local label ignored: "3.13" matches "3.13.5"; "2.10.0" matches "2.10.0+cu128" but
    not "2.10.1" or "2.1.0". The artifact pins a Python minor and exact package releases; a CUDA build label
    names the wheel, not the code."""
    if not isinstance(recorded, str) or not recorded:
        return False
    want = str(pinned).split(".")
    got = recorded.split("+", 1)[0].split(".")
    return got[: len(want)] == want


def environment_differences(environment: dict[str, Any], provenance: dict[str, Any]) -> list[str]:
    """Each provenance key whose value is not the artifact's, as `key recorded (artifact pinned)`; [] when the record
    shows the artifact's environment. An absent key differs: an environment a record does not show is unknown."""
    out = []
    for key, pinned in environment.get("versions", {}).items():
        got = _get(provenance, key)
        if not version_matches(pinned, got):
            out.append(f"{key} {_show(got)} (artifact {pinned})")
    for key, pinned in environment.get("equal", {}).items():
        got = _get(provenance, key)
        if got is _MISSING or got != pinned:
            out.append(f"{key} {_show(got)} (artifact {_show(pinned)})")
    return out


def _show(v: Any) -> str:
    """A provenance value as JSON spells it (absent, null, false), so a reader can grep the record for it."""
    if v is _MISSING:
        return "absent"
    return "null" if v is None else (str(v).lower() if isinstance(v, bool) else str(v))


@dataclass(frozen=True)
class Criterion:
    name: str  # "mean@32", "greedy"
    status: str  # pass | fail | not applicable
    value: float | int | None
    ref: float | int
    tolerance: float
    unit: str  # "pp" or "problems"
    environment: str  # where the criterion holds: "any" or "artifact"
    why: str = ""  # for "not applicable" and "reported": why it is not judged
    source: str = ""  # for a training run judged with a seed band: where the seed SD comes from

    @property
    def delta(self) -> float | None:
        return None if self.value is None else self.value - self.ref


@dataclass(frozen=True)
class ArtifactVerdict:
    run: str
    cell: str
    seed: Any
    status: str  # fail if any criterion fails; else pass if any passes; else reported; else not applicable
    criteria: list[Criterion] = field(default_factory=list)
    why: str = ""  # for "not judged": the required fields in which the cell differs from the artifact's run

    def to_json(self) -> dict[str, Any]:
        """The verdict as the board stores it; keys added after v1.4 only where set, so older boards stay as
        they were."""
        out = asdict(self)
        if not self.why:
            del out["why"]
        for c, row in zip(self.criteria, out["criteria"], strict=True):
            row["delta"] = c.delta
            if not c.source:
                del row["source"]
        return out


def seed_band(training: dict[str, Any], name: str, se_pp: float | None, tolerance: float) -> tuple[float, str] | None:
    """(half-width in pp, source) of the band an independent training run is judged with on criterion `name`, or
    None when the rule names no seed SD for it, or no source for that SD (then the value is only reported).

    band = max(tolerance, z · √(SE_run² + s_seed²)): the re-evaluation tolerance is the floor (a re-trained model
    cannot be held closer than a re-evaluated one), SE_run is the cell's per-problem bootstrap SE and s_seed the SD
    of one training seed's result around the mean over seeds (ADR 0011's definition)."""
    sd = (training.get("seed_sd_pp") or {}).get(name)
    source = training.get("seed_sd_source")
    if sd is None or not source:
        return None
    sd = float(sd)
    if not sd >= 0:
        raise ValueError(f"seed SD for {name} must be a number >= 0, got {sd}")
    return max(tolerance, t_quantile(None) * (float(se_pp or 0.0) ** 2 + sd**2) ** 0.5), str(source)


def judge(
    artifact: dict[str, Any],
    run: str,
    values: dict[str, float | int | None],
    provenance: dict[str, Any],
    cell: str = "",
    seed: Any = None,
    se: dict[str, float | None] | None = None,
) -> ArtifactVerdict:
    """Judge one matched cell. `values` holds each criterion's number in its unit (mean@32 in pp, greedy as a count
    of problems; None when the cell did not measure it), `se` its per-problem bootstrap SE in the same unit. A
    criterion bound to the artifact environment is "not applicable" when the provenance shows another one, with
    the differing keys in `why`. A run marked `training` is judged with `seed_band`, or reported."""
    differs = environment_differences(artifact.get("environment", {}), provenance)
    reference = artifact["runs"][run]["reference"]
    never = artifact["runs"][run].get("not_applicable", {})  # criteria esbench cannot meet by construction, and why
    training = artifact["runs"][run].get("training")  # an independent training run: no re-evaluation tolerance
    criteria = []
    for name, c in artifact.get("criteria", {}).items():
        if name not in reference:
            continue
        where, value = c.get("environment", "any"), values.get(name)
        common = {"name": name, "value": value, "ref": reference[name], "tolerance": float(c["tolerance"])}
        common.update(unit=c["unit"], environment=where)
        if name in never:
            criteria.append(Criterion(status=NA, why=never[name], **common))
        elif where != "any" and differs:
            criteria.append(Criterion(status=NA, why="environment differs: " + ", ".join(differs), **common))
        elif value is None:
            criteria.append(Criterion(status=NA, why=f"the cell did not measure {c['metric']}", **common))
        elif training is not None:
            band = seed_band(training, name, (se or {}).get(name), common["tolerance"])
            if band is None:
                criteria.append(Criterion(status=REPORTED, why=training["why"], **common))
            else:
                common["tolerance"] = band[0]
                ok = abs(value - reference[name]) <= band[0] + _TOL
                criteria.append(Criterion(status=PASS if ok else FAIL, source=band[1], **common))
        else:
            ok = abs(value - reference[name]) <= common["tolerance"] + _TOL
            criteria.append(Criterion(status=PASS if ok else FAIL, **common))
    return ArtifactVerdict(run, cell, seed, summary([{"status": c.status} for c in criteria]), criteria)


def cell_verdict(
    artifact: dict[str, Any] | None,
    record: dict[str, Any],
    recomputed: dict[str, dict[str, Any]],
    per_problem: dict[str, dict[str, list[float]]],
    cell: str = "",
) -> ArtifactVerdict | None:
    """The artifact verdict of one verified cell from the numbers verify recomputed, or None when the release has
    no artifact rule or the cell is not one of the artifact's runs."""
    if not artifact:
        return None
    task = artifact["task"]
    spec = record["cell"]["spec"]
    pp = per_problem.get(task, {})
    criteria = artifact.get("criteria", {})
    first = next(iter(pp.values()), None)
    updates = (record.get("budget_used") or {}).get("updates")
    if updates is None and spec.get("dataset") is None:
        updates = 0  # verify accepts an untrained cell's updates as 0 or null
    run, differs = place(artifact, spec, updates, None if first is None else len(first))
    if run is None:
        return None
    if differs:
        return ArtifactVerdict(
            run, cell, spec.get("seed"), NOT_JUDGED, [], "differs from the artifact's run: " + ", ".join(differs)
        )
    values: dict[str, float | int | None] = {}
    se: dict[str, float | None] = {}
    for name, c in criteria.items():
        if c["unit"] == "problems":  # a count: exact, from the per-problem outcomes
            values[name] = round(sum(pp[c["metric"]])) if c["metric"] in pp else None
        else:
            got = recomputed.get(task, {}).get(c["metric"])
            values[name] = None if got is None else 100.0 * got
            se[name] = 100.0 * bootstrap_se(pp[c["metric"]]) if pp.get(c["metric"]) else None
    return judge(artifact, run, values, record.get("provenance") or {}, cell, spec.get("seed"), se)


def summary(verdicts: list[dict[str, Any]]) -> str:
    """The worst status over an entry's matched seeds: fail, pass, reported, not applicable, not judged."""
    statuses = {v["status"] for v in verdicts}
    for status in (FAIL, PASS, REPORTED, NA):
        if status in statuses:
            return status
    return NOT_JUDGED if statuses else NA


def describe(v: dict[str, Any], problems: int | None = None) -> str:
    """One line per verdict for the board: `pass: mean@32 70.30 (+0.03, ±0.5 pp) ✓; greedy 988 (= 988) ✓`."""
    if v["status"] == NOT_JUDGED:
        return f"{NOT_JUDGED}: {v.get('why', '')}"
    parts = []
    for c in v["criteria"]:
        mark = {PASS: "✓", FAIL: "✗", REPORTED: REPORTED}.get(c["status"], "n/a")
        if c["value"] is None:
            shown = f"{c['name']} —"
        elif c["status"] == REPORTED:
            shown = f"{c['name']} {c['value']:.2f} ({c['delta']:+.2f} vs ref {c['ref']:.4f} pp, not judged)"
        elif c.get("source"):
            shown = (
                f"{c['name']} {c['value']:.2f} ({c['delta']:+.2f}, ref {c['ref']:.4f} ± {c['tolerance']:.2f} pp "
                f"with training-seed SD from {c['source']})"
            )
        elif c["unit"] == "pp":
            shown = f"{c['name']} {c['value']:.2f} ({c['delta']:+.2f}, ref {c['ref']:.4f} ± {c['tolerance']:g} pp)"
        else:
            of = f"/{problems}" if problems else ""
            tol = f"± {c['tolerance']:g}" if c["tolerance"] else "exact"
            shown = f"{c['name']} {c['value']}{of} (ref {c['ref']}{of}, {tol})"
        parts.append(f"{shown} {mark}" + (f" ({c['why']})" if c["status"] in (NA, REPORTED) and c["why"] else ""))
    return f"{v['status']}: " + "; ".join(parts)
