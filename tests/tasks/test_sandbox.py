"""The sandbox confines model-written programs by the operating system and leaves nothing behind."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from esbench.tasks import sandbox
from esbench.tasks.sandbox import run_python


def _sandbox_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("esbench-sandbox-*")}


def children() -> set[int]:
    """Live descendants of this test process (from /proc), to show no sandboxed process survives."""
    me, out, frontier = os.getpid(), set(), {os.getpid()}
    procs = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                procs[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    while frontier:
        frontier = {pid for pid, ppid in procs.items() if ppid in frontier} - out
        out |= frontier
    out.discard(me)
    return out


@pytest.fixture(autouse=True)
def _nothing_left_behind():
    before_dirs, before_kids = _sandbox_dirs(), children()
    yield
    time.sleep(0.2)
    assert _sandbox_dirs() == before_dirs, "a sandbox working directory was left behind"
    assert children() <= before_kids, "a sandboxed process survived"


def test_the_confined_mode_runs_here():
    """CI installs bubblewrap (scripts/system-deps.sh): the default mode must be the confined one."""
    assert sandbox.mode() == "bwrap", sandbox.describe()
    assert sandbox.describe()["mode"] == "bwrap" and sandbox.describe()["bwrap"].startswith("bubblewrap")


def test_ordinary_program_runs_and_reports_failure():
    ok = run_python("print(sum(range(10)))")
    assert ok.passed and ok.stdout.strip() == "45"
    bad = run_python("assert 1 == 2")
    assert not bad.passed and "AssertionError" in bad.stderr


def test_writes_inside_the_working_directory_are_allowed():
    r = run_python("open('scratch.txt', 'w').write('x'); import os; os.remove('scratch.txt'); print('ok')")
    assert r.passed, r.stderr


def test_infinite_loop_is_killed_by_the_timeout():
    t0 = time.perf_counter()
    r = run_python("while True:\n    pass\n", timeout=2)
    assert not r.passed and r.timed_out
    assert time.perf_counter() - t0 < 10


def test_sleeping_program_is_killed_at_the_wall_clock_timeout():
    r = run_python("import time\ntime.sleep(60)", timeout=1.5)
    assert r.timed_out and r.returncode is None and r.seconds < 10


def test_memory_bomb_is_contained():
    r = run_python("x = bytearray(8 * 1024**3)\nprint('allocated')", timeout=10, memory_mb=512)
    assert not r.passed
    assert "allocated" not in r.stdout and "MemoryError" in r.stderr


def test_write_to_tmp_outside_its_directory_is_refused():
    target = Path(tempfile.gettempdir()) / f"esbench-escape-{os.getpid()}.txt"
    r = run_python(f"open({str(target)!r}, 'w').write('escaped')")
    assert not r.passed and "PermissionError" in r.stderr
    assert not target.exists()


def test_write_to_the_repository_is_refused(repo):
    target = repo / "ESCAPED_FROM_SANDBOX.txt"
    r = run_python(f"import os\nfd = os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)\nos.write(fd, b'x')")
    assert not r.passed
    assert not target.exists()
    r = run_python(f"import os\nos.remove({str(repo / 'pyproject.toml')!r})")
    assert not r.passed and (repo / "pyproject.toml").exists()


def host_listener(timeout: float) -> tuple[socket.socket, int]:
    """A TCP listener on the host's loopback, and its port: what a sandboxed program must not reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(timeout)
    return server, server.getsockname()[1]


def test_socket_connect_is_refused():
    server, port = host_listener(5)
    accepted = []
    t = threading.Thread(target=lambda: _accept(server, accepted), daemon=True)
    t.start()
    r = run_python(f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')")
    t.join(6)
    server.close()
    assert not r.passed and "connected" not in r.stdout
    assert not accepted, "the sandboxed program reached a socket on the host"


def _accept(server, accepted):
    try:
        conn, _ = server.accept()
        accepted.append(conn)
        conn.close()
    except OSError:
        pass


def test_the_sandbox_sees_no_network_and_no_host_files(repo):
    r = run_python(
        "import os, sys\nprint(open('/proc/net/dev').read())\n"
        f"print('SEEN', [p for p in ('/etc/passwd', '/home', {str(repo)!r}, {sys.prefix!r}) if os.path.exists(p)])\n"
        "print('PATH', sys.path)"
    )
    assert r.passed, r.stderr
    ifaces = [ln.split(":")[0].strip() for ln in r.stdout.splitlines()[2:] if ":" in ln and "|" not in ln]
    assert ifaces == ["lo"]
    assert "SEEN []" in r.stdout  # no /etc, no home, no repository, no virtualenv
    path = next(ln for ln in r.stdout.splitlines() if ln.startswith("PATH"))
    assert "site-packages" not in path and ".venv" not in path


def test_no_fallback_without_opting_in(monkeypatch):
    """Where bubblewrap cannot run, grading stops with the fix named, unless the weaker mode is chosen by name."""
    monkeypatch.setattr(sandbox, "_bwrap_probe", lambda: "bubblewrap (bwrap) is not installed")
    assert sandbox.mode() == "unavailable"
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap.*ESBENCH_SANDBOX=audit"):
        run_python("print(1)")
    assert sandbox.describe() == {"mode": "unavailable", "reason": "bubblewrap (bwrap) is not installed"}
    monkeypatch.setenv("ESBENCH_SANDBOX", "audit")
    assert sandbox.mode() == "audit" and sandbox.describe()["mode"] == "audit"
    r = run_python("print(6 * 7)")
    assert r.passed and r.stdout.strip() == "42"
    monkeypatch.setenv("ESBENCH_SANDBOX", "none")
    with pytest.raises(sandbox.SandboxUnavailable, match="expected one of bwrap, audit"):
        sandbox.mode()


def test_the_audit_mode_still_refuses_escapes(monkeypatch, tmp_path):
    monkeypatch.setenv("ESBENCH_SANDBOX", "audit")
    target = tmp_path / "escaped.txt"
    for code in (
        f"open({str(target)!r}, 'w').write('x')",
        "import os\nos.fork()",
        "import subprocess\nsubprocess.run(['true'])",
        "import ctypes",
    ):
        r = run_python(code, timeout=5)
        assert not r.passed and "PermissionError" in r.stderr, (code, r.stderr)
    assert not target.exists()
