"""Cell folders: the lease that keeps two runners apart (also across hosts sharing a file system), and records that
are validated before they are written."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from pydantic import ValidationError

from esbench.records import RELEASE, CellBusy, CellDir, Lease, write_record


def test_a_live_lease_refuses_a_second_runner_and_is_removed_on_release(tmp_path):
    cd = CellDir(tmp_path / "cell")
    with Lease(cd.lease):
        held = json.loads(cd.lease.read_text())
        assert held["expires"] > time.time() and held["pid"] > 0
        with pytest.raises(CellBusy, match="another esbench process"):
            Lease(cd.lease).acquire()
    assert not cd.lease.exists()
    assert cd.status() == "pending", "a released lease alone does not make a cell partial"


def test_an_expired_lease_is_taken_over(tmp_path):
    """A holder on another node that stopped renewing (killed, node lost): its lease expires."""
    path = tmp_path / ".lease"
    path.write_text(json.dumps({"token": "x", "host": "other-node", "pid": 1, "expires": time.time() - 1}))
    with Lease(path) as lease:
        assert json.loads(path.read_text())["token"] == lease.token


def test_a_lease_of_a_dead_process_on_this_host_is_taken_over(tmp_path):
    import socket

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / ".lease"
    path.write_text(json.dumps({"token": "x", "host": socket.gethostname(), "pid": dead.pid, "expires": 1e12}))
    with Lease(path):
        pass


def test_a_live_lease_on_another_host_is_respected(tmp_path):
    path = tmp_path / ".lease"
    path.write_text(json.dumps({"token": "x", "host": "other-node", "pid": 1, "expires": time.time() + 60}))
    with pytest.raises(CellBusy):
        Lease(path).acquire()
    assert json.loads(path.read_text())["token"] == "x", "the other holder's lease is left alone"


def test_the_lease_is_renewed_while_held(tmp_path):
    path = tmp_path / ".lease"
    with Lease(path, ttl=0.3):
        first = json.loads(path.read_text())["expires"]
        time.sleep(0.5)
        assert json.loads(path.read_text())["expires"] > first


def test_a_malformed_record_is_never_written(tmp_path):
    good = {
        "schema": "esbench.record/1",
        "release": RELEASE,
        "cell": {},
        "metrics": {"t": {"problems": 1, "n": 2, "per_problem": [[2, 1]], "format_rate": 1.0, "pass@1": 0.5}},
        "samples_sha256": {},
        "held_out": [],
        "train": {},
        "budget_used": {"updates": 0, "rollouts": 0, "generated_tokens": 0},
        "timings": {"total_s": 1.0},
        "provenance": {},
    }
    write_record(tmp_path / "ok.json", good)
    assert json.loads((tmp_path / "ok.json").read_text())["metrics"]["t"]["pass@1"] == 0.5
    bad = {**good, "budget_used": {"updates": -1, "rollouts": 0, "generated_tokens": 0}}
    with pytest.raises(ValidationError):
        write_record(tmp_path / "bad.json", bad)
    assert not (tmp_path / "bad.json").exists()
