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
import logging
import os
import socket
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)

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
    device_seconds: float = Field(ge=0)
    curve: list[dict[str, int]]  # {"update", "flops"} at each probe point


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
    compute: Compute | None = None  # trained cells; records written before it have none
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
    """The files of one cell folder (docs/architecture.md, "A cell folder"). Nothing else names them."""

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
    if directory.exists() and any(not p.name.startswith((".lock", ".lease")) for p in directory.iterdir()):
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


def _proc_stat(pid: int) -> tuple[str, int]:
    """(state, start time in clock ticks since boot) of `pid`, from /proc/<pid>/stat (fields 3 and 22)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": a comm may hold spaces and parentheses
    return fields[0], int(fields[19])


def _read_first_line(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def _this_host() -> dict[str, str | None]:
    """Where a lease's pid means something: the host name, its boot (a pid of an earlier boot is dead) and the pid
    namespace (a container's pids are not this host's)."""
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = None
    return {"host": socket.gethostname(), "boot": _read_first_line("/proc/sys/kernel/random/boot_id"), "pidns": pidns}


def holder_alive(pid: int, start: int | None) -> bool:
    """Whether process `pid` of this host is alive and is the one that started at `start` (clock ticks since boot).

    os.kill(pid, 0) alone succeeds on an unreaped zombie (a holder killed with -9 whose parent has not waited for it)
    and on an unrelated process that reused the pid. Where /proc is missing, it is the fallback all the same."""
    try:
        state, started = _proc_stat(pid)
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return False  # /proc works and has no such process
    except (OSError, ValueError, IndexError):
        pass
    else:
        return state not in ("Z", "X", "x") and (start is None or started == start)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


class Lease:
    """An expiring claim on a cell folder, held in `.lease` and renewed by a heartbeat thread every `ttl`/3.

    Who may take a held lease over:
    - a holder on this host (same host name, boot and pid namespace) is checked directly: once its process is gone,
      a zombie, or its pid reused by another process (the start time recorded in the lease differs), the lease is
      taken over at once. A live local holder is another run of the same cell right now: `CellBusy` at once, since
      waiting could only last as long as that whole run.
    - a holder elsewhere (another node on a shared file system, a container) can only be judged by its renewals: the
      new run prints once who holds it and until when, and waits up to the holder's ttl (or `wait` seconds). The
      lease is stale once it expired by this clock or was seen unchanged for its ttl (immune to clock skew); a
      holder still renewing it after the wait is alive, and the run fails with `CellBusy`.

    Race safety: a lease is created by link(2) of a complete temp file (atomic like O_EXCL, also on NFS, and never
    seen half-written). Contenders for one stale lease first take its claim file, `.lease.<key>.claim`, which is
    itself a Lease taken the same way (a claimer killed mid-takeover is a stale claim); only the claim's holder
    replaces the stale lease, by rename, after checking it is still the lease it judged stale. So exactly one
    contender wins, and one that judged an older lease stale backs off. The heartbeat stops if its lease was taken.
    """

    def __init__(self, path: Path, ttl: float = 120.0, wait: float | None = None):
        self.path, self.ttl, self.wait = Path(path), ttl, wait
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.token = f"{self.host}:{self.pid}:{uuid.uuid4().hex}"
        try:
            self.start: int | None = _proc_stat(self.pid)[1]
        except (OSError, ValueError, IndexError):
            self.start = None
        self._seen: dict[str, float] = {}  # digest of a foreign lease body -> when this process first saw it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> str:
        ids = {"token": self.token, "pid": self.pid, "start": self.start, **_this_host(), "ttl": self.ttl}
        return json.dumps({**ids, "expires": time.time() + self.ttl})

    @staticmethod
    def _held(path: Path) -> dict[str, Any] | None:
        """The lease at `path` with its `key` (names its claim) and `digest` (changes with each renewal); None if
        there is none."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            held = json.loads(raw)
        except ValueError:
            held = None
        held = held if isinstance(held, dict) else {}  # unreadable (an old version's half-written lease): stale
        key = str(held.get("token")) if "token" in held else raw.hex()
        digest = hashlib.sha256(raw).hexdigest()
        return {**held, "key": hashlib.sha256(key.encode()).hexdigest()[:16], "digest": digest}

    def _verdict(self, held: dict[str, Any]) -> str:
        """'stale' (take it over now), 'here' (a live process of this host holds it) or 'elsewhere' (wait)."""
        here = _this_host()
        try:
            pid, start, expires = int(held["pid"]), held.get("start"), float(held["expires"])
        except (KeyError, TypeError, ValueError):
            return "stale"
        if held.get("host") == here["host"]:
            if held.get("boot") and here["boot"] and held["boot"] != here["boot"]:
                return "stale"  # written before this host last booted
            if held.get("pidns") in (None, here["pidns"]):
                return "here" if holder_alive(pid, start) else "stale"
        if expires < time.time():
            return "stale"
        first = self._seen.setdefault(held["digest"], time.monotonic())
        return "stale" if time.monotonic() - first >= float(held.get("ttl", self.ttl)) else "elsewhere"

    def acquire(self, renew: bool = True) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = None
        while True:
            held = self._held(self.path)
            if held is None:
                if self._create():
                    break
                continue
            verdict = self._verdict(held)
            if verdict == "stale":
                if self._take_over(held):
                    break
                time.sleep(0.02)  # another contender is taking it over: look again
                continue
            who = f"pid {held['pid']} on {'this host' if verdict == 'here' else held.get('host')}"
            if verdict == "here":
                raise CellBusy(f"{self.path.parent} is being run by another esbench process ({who})")
            ttl = float(held.get("ttl", self.ttl))
            poll = min(5.0, max(0.02, ttl / 20))
            if deadline is None:
                wait = self.wait if self.wait is not None else ttl + poll
                deadline = time.monotonic() + wait
                if wait > 0:
                    until = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(held["expires"])))
                    note = (
                        f"{self.path.parent} is leased by {who} until {until}; "
                        f"waiting up to {wait:.0f} s for it to be released or to expire"
                    )
                    print(f"esbench: {note}", file=sys.stderr, flush=True)
                    log.warning(note)
            if time.monotonic() >= deadline:
                raise CellBusy(f"{self.path.parent} is being run by another esbench process ({who}, still renewed)")
            time.sleep(poll)
        if renew:
            self._thread = threading.Thread(target=self._renew, daemon=True)
            self._thread.start()

    def _create(self) -> bool:
        """Create the lease only if there is none: link(2) of a complete temp file (O_EXCL where links fail)."""
        tmp = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_text(self._body())
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w") as f:
                f.write(self._body())
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def _take_over(self, held: dict[str, Any]) -> bool:
        """Replace the stale lease `held` with ours, if this process wins its claim and it is still there."""
        claim = Lease(self.path.with_name(f"{self.path.name}.{held['key']}.claim"), ttl=self.ttl, wait=0)
        claim._seen = self._seen  # a claimer on another node is judged over successive attempts
        try:
            claim.acquire(renew=False)
        except CellBusy:
            return False
        try:
            now = self._held(self.path)
            if now is None or now["key"] != held["key"]:
                return False  # taken over or released since it was judged: look again
            atomic_write_text(self.path, self._body())  # a rename: the path is never absent for a creator to take
            return True
        finally:
            claim.release()

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            held = self._held(self.path)
            if held is None or held.get("token") != self.token:
                log.error("%s: lease lost (taken over by %s); no longer renewed", self.path, (held or {}).get("host"))
                return
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
