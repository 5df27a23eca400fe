"""The cell lease: an expiring claim on a cell folder, so two runners (on one machine or on nodes sharing a file
system, where `flock` is unreliable) never write the same cell at once.

Separate from records.py, which names a cell folder's files and reads and writes them: the lease is process and host
bookkeeping (/proc, boot ids, pid namespaces, a heartbeat thread), needed only by whoever runs a cell.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from esbench.records import atomic_write_text

log = logging.getLogger(__name__)


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

    def __exit__(self, *exc: object) -> None:
        self.release()
