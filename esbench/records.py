"""Result records: `runs/<suite>/<cell-id>/record.json`, written last and atomically.

A cell is *done* exactly when record.json exists; *partial* when its folder holds anything else (a spec,
train.jsonl, checkpoints); *pending* otherwise. Every file esbench writes goes through `atomic_write_text`
(temp file in the same folder, fsync, rename, fsync of the folder), so a kill never leaves a half-written file.

This module is the typed boundary of a cell folder: `CellDir` names every file in one place and reads them back as
models (`Record`, and the rows of samples/*.jsonl, train.jsonl and events.jsonl), all through one JSON-lines reader
(`read_jsonl`). The cell's lease, which keeps two runners from writing one cell at once, is esbench/leases.py's.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

RECORD_SCHEMA = "esbench.record/1"
# The leaderboard release a record is comparable under (esbench.leaderboard.release freezes it in releases/).
RELEASE = "v1.8"


class BudgetUsed(BaseModel):
    model_config = ConfigDict(extra="forbid")

    updates: int = Field(ge=0)
    rollouts: int = Field(ge=0)
    generated_tokens: int = Field(ge=0)


class Compute(BaseModel):
    """A trained cell's compute (`esbench.metrics.compute.cell_compute`): App. G.2 FLOPs from the logged tokens
    (None where the method has no formula or its log has no token counts), and training's wall and device time."""

    model_config = ConfigDict(extra="allow")

    formula: str
    flops: int | None = Field(ge=0)
    parameters: int = Field(ge=0)
    tokens: dict[str, int | None]
    train_seconds: float = Field(ge=0)
    devices: int = Field(ge=1)
    device: str | None = None  # the device kind ("cuda", "cpu"); records written before it have none
    device_seconds: float = Field(ge=0)
    curve: list[dict[str, int]]  # {"update", "flops"} at each probe point


class TaskMetrics(BaseModel):
    """One task's numbers; every one is recomputable from `per_problem` and the samples."""

    model_config = ConfigDict(extra="allow")  # pass@k and maj@k for each k (`metric`)

    problems: int = Field(ge=0)
    n: int = Field(ge=0)
    per_problem: list[tuple[int, int]]
    format_rate: float
    greedy: float | None = None  # eval.greedy's pass
    entropy: float | None = None  # eval.entropy: nats per response token
    answer_entropy: float | None = None  # bits over answer clusters; records written before it have none
    entropy_per_problem: list[float | None] | None = None  # the paired evidence of claim C3

    def metric(self, name: str) -> float | None:
        """`pass@k` or `maj@k` (one extra field each k), None where this task was not measured at that k."""
        value = (self.model_extra or {}).get(name)
        return None if value is None else float(value)


class Record(BaseModel):
    """`record.json` (schema `esbench.record/1`), field by field in docs/architecture.md. The runner validates every
    record against this model before writing it; the analyses sections are optional, and other keys are extra."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    schema_: str = Field(alias="schema", pattern=r"^esbench\.record/\d+$")
    release: str
    cell: dict[str, Any]
    metrics: dict[str, TaskMetrics]
    samples_sha256: dict[str, str]
    held_out: list[str]
    train: dict[str, Any]
    budget_used: BudgetUsed
    compute: Compute | None = None  # trained cells; records written before it have none
    timings: dict[str, float]
    provenance: dict[str, Any]
    drift: dict[str, Any] | None = None  # esbench.analyses: parameter drift of trained (and checkpoint) cells
    diversity: dict[str, Any] | None = None  # esbench.analyses: the σ-population's JS diversity
    sparsity: list[dict[str, Any]] | None = None  # esbench.analyses: per-τ evaluations of the thresholded update

    def as_dict(self) -> dict[str, Any]:
        """The record as record.json holds it, for the modules that take records as plain data (`esbench.claims`)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class SampleRow(BaseModel):
    """One problem of samples/<task>.jsonl (`esbench.evaluation.score_samples`): its responses, each one's extracted
    answer (None: none found) and correctness. lm-eval's own pass@1 and any verifier errors are extra."""

    model_config = ConfigDict(extra="allow")

    doc_id: int
    doc: dict[str, Any]
    resps: list[str]
    answers: list[str | None]
    correct: list[bool]


class Probe(BaseModel):
    """The fixed training probe's measurement (`esbench.analyses`), in a train.jsonl row."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)  # format_rate, tokens

    entropy: float
    success: float
    pass_at_k: dict[str, float | None] = Field(default_factory=dict, alias="pass@k")  # {"1": ..., "4": ...}


class TrainRow(BaseModel):
    """One row of train.jsonl, at `update`: an update's numbers or a probe measurement. Every method logs its own
    keys (GRPO's loss and KL, ES's update norm, a sequence's stage); the common ones are typed, the rest are extra."""

    model_config = ConfigDict(extra="allow")

    update: int
    reward_mean: float | None = None
    tokens: int | None = None  # prompt + generated tokens of the update (App. G.2 FLOPs)
    tokens_generated: int | None = None
    probe: Probe | None = None


class EventRow(BaseModel):
    """One line of events.jsonl (`Events.emit`): what happened, when, and where; `stage`, `error` where given."""

    model_config = ConfigDict(extra="allow")

    t: float
    event: str  # started, stage, done, failed
    host: str
    pid: int
    stage: str | None = None


Row = TypeVar("Row", bound=BaseModel)


def method_key(spec: dict[str, Any]) -> str:
    """A cell spec's method as the paper's tables name it: `es`, `grpo`, ... or `sequence:es,grpo` for a composition
    (ES->GRPO). The one key the claims, the paper map and the artifact rule match a cell by, so they never disagree on
    what "ES" is."""
    m = spec["method"]
    if m["kind"] == "sequence":
        return "sequence:" + ",".join(s["kind"] for s in m["config"].get("stages", []))
    kind: str = m["kind"]
    return kind


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def cell_dir(out_root: Path, suite: str, cell_id: str) -> Path:
    return Path(out_root) / suite / cell_id


class CellDir:
    """The files of one cell folder (docs/architecture.md, "A cell folder"). Nothing else names them."""

    def __init__(self, path: Path):
        self.path = Path(path)

    cell_json = property(lambda self: self.path / "cell.json")  # the frozen cell spec
    train_log = property(lambda self: self.path / "train.jsonl")  # one row per update (and probe)
    samples = property(lambda self: self.path / "samples")  # per-sample evidence, one JSONL per task and pass
    record = property(lambda self: self.path / "record.json")  # written last: the cell is done when it exists
    work = property(lambda self: self.path / "work")  # method checkpoints; removed once the record is written
    lease = property(lambda self: self.path / ".lease")  # who is running the cell (`esbench.leases.Lease`)
    error_log = property(lambda self: self.path / "error.log")  # the traceback of a failed attempt
    lm_eval_log = property(lambda self: self.path / "lm_eval.log")
    log = property(lambda self: self.path / "esbench.log")  # library logs of `esbench run-cell`
    final_weights = property(lambda self: self.path / "final.safetensors")  # eval.save_weights
    sparsity = property(lambda self: self.path / "sparsity")  # per-τ evaluations (eval.sparsity)
    events = property(lambda self: self.path / "events.jsonl")  # progress, whichever executor ran the cell (`Events`)

    def status(self) -> str:
        return status(self.path)

    def read_record(self) -> Record:
        """record.json, validated: a record that is not one fails here, not in the middle of a report."""
        return Record.model_validate(json.loads(self.record.read_text()))

    def sample_rows(self, task: str) -> list[SampleRow]:
        """samples/<task>.jsonl: the sampled pass's evidence, one row a problem."""
        return _validated(SampleRow, read_jsonl(self.samples / f"{task}.jsonl"))

    def train_rows(self) -> list[TrainRow]:
        """train.jsonl; no rows where the cell has no training log."""
        return _validated(TrainRow, read_jsonl(self.train_log, missing_ok=True))

    def event_rows(self) -> list[EventRow]:
        """events.jsonl as a driver reads it while the cell runs (`Events.read`)."""
        return Events(self.events).read()


def status(directory: Path) -> str:
    if (directory / "record.json").exists():
        return "done"
    if directory.exists() and any(not p.name.startswith((".lock", ".lease")) for p in directory.iterdir()):
        return "partial"
    return "pending"


def jsonl_line(row: dict[str, Any]) -> str:
    """One row as esbench writes it to a JSON-lines file."""
    return json.dumps(row, sort_keys=True) + "\n"


def append_jsonl(path: Path, row: dict[str, Any]) -> None:
    """Append one line and fsync it: a kill loses at most the line being written, never an earlier one."""
    with open(path, "a") as f:
        f.write(jsonl_line(row))
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: Path, *, missing_ok: bool = False, live: bool = False) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file, blank lines skipped: the one reader of the .jsonl files esbench writes.

    `missing_ok`: a file that does not exist has no rows. `live`: another process may be appending to the file right
    now (a driver following a cell's events): a file that cannot be read has no rows, and a line that does not parse
    (the one being written) is skipped."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        if missing_ok or live:
            return []
        raise
    except OSError:
        if live:
            return []
        raise
    rows: list[dict[str, Any]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            if not live:
                raise
    return rows


def _validated(model: type[Row], rows: list[dict[str, Any]]) -> list[Row]:
    return [model.model_validate(r) for r in rows]


class Events:
    """A cell's progress as JSON lines in its folder: `started`, each `stage`, then `done` or `failed`, with time,
    host and pid. Every executor's runner writes them, so a driver follows a cell on another node by reading the
    file (the ray and slurm executors' progress bars do), and a resumed cell shows each attempt."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def emit(self, event: str, **fields: Any) -> None:
        row = {"t": round(time.time(), 3), "event": event, "host": socket.gethostname(), "pid": os.getpid()}
        append_jsonl(self.path, {**row, **fields})

    def read(self) -> list[EventRow]:
        return _validated(EventRow, read_jsonl(self.path, live=True))

    def attempt(self) -> tuple[int, str] | None:
        """The latest attempt, for a progress bar: (stages it has passed, what its newest event says)."""
        rows = self.read()
        starts = [i for i, r in enumerate(rows) if r.event == "started"]
        if not starts:
            return None
        last = rows[-1]
        return sum(r.event == "stage" for r in rows[starts[-1] :]), last.stage or last.event


# Releases whose records were evaluated with the cell seed itself; later ones use `eval_seed`.
CELL_SEED_EVAL_RELEASES = ("v1.0", "v1.1")


def eval_seed(seed: int, weights_sha256: str) -> int:
    """The evaluation sampler's seed: the cell seed bound to the weights being evaluated (since release v1.2).

    Two cells whose weights differ sample with unrelated random streams, so identical sampled outputs mean identical
    weights (the leaderboard's copied-evidence check relies on it); with one common seed, a small update samples
    exactly like base. A re-run of the same cell reproduces it bit for bit.
    """
    blob = hashlib.blake2b(f"esbench-eval:{seed}:{weights_sha256}".encode(), digest_size=8).digest()
    return int.from_bytes(blob, "little") & 0x7FFFFFFF  # numpy and lm-eval accept seeds below 2**32


def train_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """First/last reward means over train.jsonl, so a record shows whether training moved the reward."""
    rewards = [r["reward_mean"] for r in rows if "reward_mean" in r]
    probes = [r for r in rows if "probe" in r]
    out: dict[str, Any] = {"updates_logged": len(rewards)}
    if rewards:
        w = max(1, len(rewards) // 4)
        out.update(reward_first=sum(rewards[:w]) / w, reward_last=sum(rewards[-w:]) / w)
    if probes:
        first, last = probes[0], probes[-1]
        out["probe"] = {
            "first_update": first["update"],
            "last_update": last["update"],
            "entropy_first": first["probe"]["entropy"],
            "entropy_last": last["probe"]["entropy"],
            "success_first": first["probe"]["success"],
            "success_last": last["probe"]["success"],
        }
    return out


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Validate against `Record`, then write atomically: a malformed record is an error, never a file."""
    Record.model_validate(record)
    atomic_write_json(path, record)


def read_record(directory: Path) -> Record:
    return CellDir(directory).read_record()


def sha256_file(path: Path) -> str:
    """SHA-256 of a file, streamed (weights, samples and manifests can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
