"""Result records: `runs/<suite>/<cell-id>/record.json`, written last and atomically.

A cell is *done* exactly when record.json exists; *partial* when its folder holds anything else (a spec,
train.jsonl, checkpoints); *pending* otherwise. Every file esbench writes goes through `atomic_write_text`
(temp file in the same folder, fsync, rename, fsync of the folder), so a kill never leaves a half-written file.

`CellDir` names every file of a cell folder in one place; `Lease` keeps two runners (on one machine or on nodes
sharing a file system, where `flock` is unreliable) from writing the same cell at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

RECORD_SCHEMA = "esbench.record/1"
# The leaderboard release a record is comparable under (esbench.leaderboard.release freezes it in releases/).
RELEASE = "v1.4"


class BudgetUsed(BaseModel):
    model_config = ConfigDict(extra="forbid")

    updates: int = Field(ge=0)
    rollouts: int = Field(ge=0)
    generated_tokens: int = Field(ge=0)


class TaskMetrics(BaseModel):
    """One task's numbers; every one is recomputable from `per_problem` and the samples."""

    model_config = ConfigDict(extra="allow")  # pass@k and maj@k for each k, greedy, entropies

    problems: int = Field(ge=0)
    n: int = Field(ge=0)
    per_problem: list[tuple[int, int]]
    format_rate: float


class Record(BaseModel):
    """`record.json` (schema `esbench.record/1`), field by field in docs/architecture.md. The runner validates every
    record against this model before writing it; analyses sections (`drift`, `diversity`, `sparsity`) are extra."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    schema_: str = Field(alias="schema", pattern=r"^esbench\.record/\d+$")
    release: str
    cell: dict[str, Any]
    metrics: dict[str, TaskMetrics]
    samples_sha256: dict[str, str]
    held_out: list[str]
    train: dict[str, Any]
    budget_used: BudgetUsed
    timings: dict[str, float]
    provenance: dict[str, Any]


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
    """The files of one cell folder (DESIGN.md's record contract). Nothing else names them."""

    def __init__(self, path: Path):
        self.path = Path(path)

    cell_json = property(lambda self: self.path / "cell.json")  # the frozen cell spec
    train_log = property(lambda self: self.path / "train.jsonl")  # one row per update (and probe)
    samples = property(lambda self: self.path / "samples")  # per-sample evidence, one JSONL per task and pass
    record = property(lambda self: self.path / "record.json")  # written last: the cell is done when it exists
    work = property(lambda self: self.path / "work")  # method checkpoints; removed once the record is written
    lease = property(lambda self: self.path / ".lease")  # who is running the cell (`Lease`)
    error_log = property(lambda self: self.path / "error.log")  # the traceback of a failed attempt
    lm_eval_log = property(lambda self: self.path / "lm_eval.log")
    log = property(lambda self: self.path / "esbench.log")  # library logs of `esbench run-cell`
    final_weights = property(lambda self: self.path / "final.safetensors")  # eval.save_weights
    sparsity = property(lambda self: self.path / "sparsity")  # per-τ evaluations (eval.sparsity)
    events = property(lambda self: self.path / "events.jsonl")  # progress, whichever executor ran the cell (`Events`)

    def status(self) -> str:
        return status(self.path)


def status(directory: Path) -> str:
    if (directory / "record.json").exists():
        return "done"
    if directory.exists() and any(p.name not in (".lock", ".lease") for p in directory.iterdir()):
        return "partial"
    return "pending"


def append_jsonl(path: Path, row: dict[str, Any]) -> None:
    """Append one line and fsync it: a kill loses at most the line being written, never an earlier one."""
    with open(path, "a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


class Events:
    """A cell's progress as JSON lines in its folder: `started`, each `stage`, then `done` or `failed`, with time,
    host and pid. Every executor's runner writes them, so a driver follows a cell on another node by reading the
    file (the ray and slurm executors' progress bars do), and a resumed cell shows each attempt."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def emit(self, event: str, **fields: Any) -> None:
        row = {"t": round(time.time(), 3), "event": event, "host": socket.gethostname(), "pid": os.getpid()}
        append_jsonl(self.path, {**row, **fields})

    def read(self) -> list[dict[str, Any]]:
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:  # a line being written right now
                continue
        return out

    def attempt(self) -> tuple[int, str] | None:
        """The latest attempt, for a progress bar: (stages it has passed, what its newest event says)."""
        rows = self.read()
        starts = [i for i, r in enumerate(rows) if r["event"] == "started"]
        if not starts:
            return None
        last = rows[-1]
        return sum(r["event"] == "stage" for r in rows[starts[-1] :]), last.get("stage") or last["event"]


class CellBusy(RuntimeError):
    pass


class Lease:
    """An expiring claim on a cell folder, held in `.lease` and renewed by a heartbeat thread.

    Created with O_CREAT|O_EXCL (atomic on local and NFS file systems). A lease whose holder stopped renewing it for
    `ttl` seconds (killed, node lost), or whose holder process on this host is gone, is taken over; a live one
    makes the second runner fail with `CellBusy` instead of interleaving writes.
    """

    def __init__(self, path: Path, ttl: float = 120.0):
        self.path, self.ttl = Path(path), ttl
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.token = f"{self.host}:{self.pid}:{uuid.uuid4().hex}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> str:
        return json.dumps({"token": self.token, "host": self.host, "pid": self.pid, "expires": time.time() + self.ttl})

    def _stale(self) -> bool:
        try:
            held = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return True  # unreadable or half-written by a killed holder
        if held.get("expires", 0) < time.time():
            return True
        if held.get("host") == socket.gethostname():
            try:
                os.kill(int(held["pid"]), 0)
            except ProcessLookupError:
                return True
            except (PermissionError, KeyError, ValueError):
                pass
        return False

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not self._stale():
                    raise CellBusy(f"{self.path.parent} is being run by another esbench process") from None
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                f.write(self._body())
            self._thread = threading.Thread(target=self._renew, daemon=True)
            self._thread.start()
            return
        raise CellBusy(f"{self.path.parent}: could not take over a stale lease")

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            atomic_write_text(self.path, self._body())

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if json.loads(self.path.read_text()).get("token") == self.token:
                self.path.unlink()
        except (OSError, ValueError):
            pass

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


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


def read_record(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "record.json").read_text())


def sha256_file(path: Path) -> str:
    """SHA-256 of a file, streamed (weights, samples and manifests can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
