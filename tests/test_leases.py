"""The cell lease (`esbench.leases.Lease`): one runner per cell folder, on one machine or on nodes sharing a file
system, and a run killed with -9 is resumed at once, even while its process is an unreaped zombie.

(The end-to-end case, an ES cell killed with -9 mid-training and left a zombie, then re-run to a record identical to
an uninterrupted run, is tests/methods/test_es.py's kill test, which reuses that file's reference run.)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from esbench.leases import CellBusy, Lease, _proc_stat
from esbench.records import CellDir, atomic_write_text, status

HOLD = """\
import sys, time
from esbench.leases import Lease
Lease(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def _foreign(path: Path, host: str = "other-node", ttl: float = 120.0, expires_in: float = 60.0, **extra) -> dict:
    """A lease written (atomically, as every runner does) by another runner, on another node unless `host` says
    otherwise."""
    body = {"token": f"{host}:1:x", "host": host, "pid": 1, "ttl": ttl, "expires": time.time() + expires_in, **extra}
    atomic_write_text(path, json.dumps(body))
    return body


def _holder(path: Path) -> subprocess.Popen:
    """A child process that takes the lease and keeps it (its heartbeat running) until killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _acquire_timed(lease: Lease) -> float:
    t0 = time.monotonic()
    lease.acquire()
    return time.monotonic() - t0


def test_a_live_lease_refuses_a_second_runner_at_once_and_is_removed_on_release(tmp_path):
    cd = CellDir(tmp_path / "cell")
    with Lease(cd.lease):
        held = json.loads(cd.lease.read_text())
        assert held["expires"] > time.time() and held["pid"] == os.getpid()
        assert held["start"] == _proc_stat(os.getpid())[1], "the holder's start time guards against pid reuse"
        t0 = time.monotonic()
        with pytest.raises(CellBusy, match="another esbench process"):
            Lease(cd.lease).acquire()
        assert time.monotonic() - t0 < 1
    assert not cd.lease.exists()
    assert cd.status() == "pending", "a released lease alone does not make a cell partial"


def test_a_live_holder_in_another_process_on_this_host_fails_the_second_run_at_once(tmp_path):
    """Waiting could only last as long as that whole run: two runs of one cell must not interleave writes."""
    path = tmp_path / ".lease"
    proc = _holder(path)
    try:
        before = path.read_text()
        t0 = time.monotonic()
        with pytest.raises(CellBusy, match=f"pid {proc.pid} on this host"):
            Lease(path).acquire()
        assert time.monotonic() - t0 < 1
        assert json.loads(path.read_text())["token"] == json.loads(before)["token"], "the holder's lease is left alone"
    finally:
        proc.kill()
        proc.wait()


def test_a_zombie_holder_is_taken_over_at_once(tmp_path):
    """A holder killed with -9 whose parent has not reaped it: its pid still exists (os.kill(pid, 0) succeeds)."""
    path = tmp_path / ".lease"
    proc = _holder(path)
    try:
        os.kill(proc.pid, signal.SIGKILL)  # no wait(): the child stays a zombie
        deadline = time.monotonic() + 10
        while _proc_stat(proc.pid)[0] != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _proc_stat(proc.pid)[0] == "Z", "premise: the holder is a zombie"
        os.kill(proc.pid, 0)  # premise: a signal-0 probe still finds it
        lease = Lease(path)
        assert _acquire_timed(lease) < 1
        assert json.loads(path.read_text())["token"] == lease.token
        lease.release()
    finally:
        proc.wait()


def test_a_lease_of_a_dead_process_on_this_host_is_taken_over(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / ".lease"
    _foreign(path, host=socket.gethostname(), expires_in=1e9, pid=dead.pid)
    assert _acquire_timed(Lease(path)) < 1


def test_a_reused_pid_is_not_taken_for_the_holder(tmp_path):
    """The lease's pid now names another live process (this one): its start time differs from the recorded one."""
    path = tmp_path / ".lease"
    start = _proc_stat(os.getpid())[1]
    _foreign(path, host=socket.gethostname(), expires_in=1e9, pid=os.getpid(), start=start + 1)
    assert _acquire_timed(Lease(path)) < 1


def test_a_lease_from_before_this_hosts_last_boot_is_taken_over(tmp_path):
    path = tmp_path / ".lease"
    _foreign(path, host=socket.gethostname(), expires_in=1e9, boot="an-earlier-boot", pid=os.getpid())
    assert _acquire_timed(Lease(path)) < 1


def test_an_expired_lease_of_another_host_is_taken_over_at_once(tmp_path):
    path = tmp_path / ".lease"
    _foreign(path, expires_in=-1)
    with Lease(path) as lease:
        assert json.loads(path.read_text())["token"] == lease.token


def test_a_lease_of_another_host_is_waited_for_with_one_message_then_taken_over(tmp_path, capsys):
    """A requeued job lands while the killed job's lease (another node) has not yet expired: it waits, then resumes."""
    path = tmp_path / "cell" / ".lease"
    path.parent.mkdir()
    _foreign(path, ttl=1.0, expires_in=1.0)
    lease = Lease(path)
    waited = _acquire_timed(lease)
    assert 0.8 < waited < 5, waited
    assert json.loads(path.read_text())["token"] == lease.token
    lease.release()
    err = capsys.readouterr().err
    assert err.count("esbench:") == 1, err
    assert "leased by pid 1 on other-node until" in err and "waiting up to" in err and str(path.parent) in err


def test_a_lease_of_another_host_that_stopped_renewing_is_taken_over_despite_a_skewed_clock(tmp_path):
    """Its expiry reads an hour ahead (the holder's clock is fast), but it has not changed for its ttl."""
    path = tmp_path / ".lease"
    _foreign(path, ttl=1.0, expires_in=3600)
    assert 0.8 < _acquire_timed(Lease(path)) < 5


def test_a_lease_of_another_host_still_renewed_blocks_for_at_most_its_ttl(tmp_path):
    path = tmp_path / ".lease"
    stop = threading.Event()

    def renew():  # the other node's heartbeat
        while not stop.wait(0.1):
            _foreign(path, ttl=1.0, expires_in=1.0)

    _foreign(path, ttl=1.0, expires_in=1.0)
    beat = threading.Thread(target=renew, daemon=True)
    beat.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(CellBusy, match="other-node, still renewed"):
            Lease(path).acquire()
        assert 0.9 < time.monotonic() - t0 < 5
        with pytest.raises(CellBusy):
            Lease(path, wait=0).acquire()
    finally:
        stop.set()
        beat.join()
    assert json.loads(path.read_text())["token"] == "other-node:1:x", "the other holder's lease is left alone"


def test_the_lease_is_renewed_while_held_and_a_lost_lease_is_not_overwritten(tmp_path):
    path = tmp_path / ".lease"
    with Lease(path, ttl=0.3):
        first = json.loads(path.read_text())["expires"]
        time.sleep(0.5)
        assert json.loads(path.read_text())["expires"] > first
        _foreign(path)  # taken over meanwhile (this holder was judged dead)
        time.sleep(0.3)
        assert json.loads(path.read_text())["token"] == "other-node:1:x"
    assert json.loads(path.read_text())["token"] == "other-node:1:x", "release leaves another holder's lease"


def test_a_contender_that_judged_an_older_lease_stale_backs_off(tmp_path):
    """Contender A reads the stale lease; B takes it over first; A's takeover must not replace B's lease."""
    path = tmp_path / ".lease"
    _foreign(path, expires_in=-1)
    a = Lease(path)
    judged = a._held(path)
    assert a._verdict(judged) == "stale"
    b = Lease(path)
    b.acquire()
    assert not a._take_over(judged)
    assert json.loads(path.read_text())["token"] == b.token
    b.release()


def test_a_claim_left_by_a_contender_killed_mid_takeover_is_broken(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / "cell" / ".lease"
    path.parent.mkdir()
    _foreign(path, expires_in=-1)
    claim = path.with_name(f".lease.{Lease._held(path)['key']}.claim")
    _foreign(claim, host=socket.gethostname(), expires_in=1e9, pid=dead.pid)
    lease = Lease(path)
    assert _acquire_timed(lease) < 1
    assert json.loads(path.read_text())["token"] == lease.token
    assert sorted(p.name for p in path.parent.iterdir()) == [".lease"], "no claim or temp file is left"
    assert status(path.parent) == "pending"


def _slow_to_act(verdict):
    """`Lease._verdict` that pauses after judging a lease stale: every contender judges it before any acts."""

    def judged(self, held):
        v = verdict(self, held)
        if v == "stale":
            time.sleep(0.05)
        return v

    return judged


RACE = """\
import json, sys, time
from pathlib import Path
from esbench.leases import CellBusy, Lease
from test_leases import _slow_to_act
Lease._verdict = _slow_to_act(Lease._verdict)
path, go = Path(sys.argv[1]), Path(sys.argv[2])
while not go.exists():
    pass
try:
    lease = Lease(path, wait=0)
    lease.acquire()
except CellBusy:
    print("busy", flush=True)
else:
    time.sleep(1.0)  # hold it while the others look
    mine = json.loads(path.read_text())["token"] == lease.token
    print("won" if mine else "lost", flush=True)
    lease.release()
"""


def test_contenders_for_a_stale_lease_get_it_exactly_once(tmp_path):
    """Processes start together on a lease of a dead holder: one wins, the others see its live lease."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path, go = tmp_path / ".lease", tmp_path / "go"
    _foreign(path, host=socket.gethostname(), expires_in=1e9, pid=dead.pid)
    pythonpath = os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": pythonpath}
    procs = [
        subprocess.Popen([sys.executable, "-c", RACE, str(path), str(go)], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(4)
    ]
    time.sleep(2.0)  # let every contender import and spin
    go.touch()
    outs = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert outs == ["busy", "busy", "busy", "won"], outs


def _race_threads(path: Path, contenders: int) -> list[Lease]:
    """`contenders` threads acquire `path` at once; the leases that got it."""
    barrier, won = threading.Barrier(contenders), []

    def contend():
        lease = Lease(path, wait=0)
        barrier.wait()
        try:
            lease.acquire(renew=False)
        except CellBusy:
            return
        won.append(lease)

    threads = [threading.Thread(target=contend) for _ in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won


def test_threads_racing_for_stale_leases_get_each_exactly_once(tmp_path, monkeypatch):
    """(The old unlink-then-create takeover, with the same pause, had several winners in 10 rounds of 10.)"""
    monkeypatch.setattr(Lease, "_verdict", _slow_to_act(Lease._verdict))
    for round_ in range(10):
        path = tmp_path / f"{round_}.lease"
        _foreign(path, expires_in=-1)
        won = _race_threads(path, 6)
        assert len(won) == 1, (round_, len(won))
        assert json.loads(path.read_text())["token"] == won[0].token
