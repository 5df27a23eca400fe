"""The red team's sandbox categories (issue 22), against the operating-system layer alone.

Most programs here run with the audit hook switched off (`hook=False`, a test-only switch of the guard) and with
`ctypes` in hand: that is what a program has once it reaches native code (a C FFI, an extension module it wrote,
the Tcl interpreter), which is how the red team walked around the hook. Each must be refused by bubblewrap,
seccomp or the kernel's limits, leave nothing on the host and nothing running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from esbench.tasks import sandbox
from esbench.tasks.mbpp_judge import run_mbpp_tests
from esbench.tasks.sandbox_confine import GUARD

NATIVE = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"


def raw(code: str, timeout: float = 8, hook: bool = False) -> tuple[bool, str, str]:
    """Run `code` in the confined sandbox; (ran without an exception, stdout, the error or stop reason)."""
    with sandbox._Sandbox(timeout, mode="bwrap", hook=hook) as box:
        try:
            ans = box.request({"op": "exec", "src": code, "file": "program.py"})
            return ans["ok"], box.stdout(), str(ans.get("error", ""))
        except sandbox._Stop as e:
            return False, box.stdout(), str(e)


@pytest.fixture(autouse=True)
def _nothing_survives():
    from tests.tasks.test_sandbox import children

    before = children()
    yield
    time.sleep(0.2)
    assert children() <= before, "a sandboxed process outlived the run"


def test_native_code_cannot_start_processes():
    ok, out, err = raw(
        NATIVE + "pid = libc.fork()\nprint('fork', pid, ctypes.get_errno())\n"
        "print('system', libc.system(b'echo RAN > /work/x'))\nprint(os.path.exists('/work/x'))"
    )
    assert ok, err
    lines = out.splitlines()
    assert lines[0] == "fork -1 1"  # EPERM from seccomp
    assert lines[1].startswith("system") and lines[2] == "False"
    ok, out, err = raw("import os\nprint(os.fork())")
    assert not ok and "Operation not permitted" in err


def test_native_code_cannot_write_outside_the_sandbox(repo):
    host_tmp = Path(tempfile.gettempdir()) / f"esbench-escape-{os.getpid()}"
    targets = [
        str(host_tmp),
        str(repo / "ESCAPED.txt"),
        str(Path(sys.prefix) / "ESCAPED.txt"),
        "/usr/ESCAPED.txt",
        str(Path(GUARD).parent / "ESCAPED.py"),
    ]
    code = (
        NATIVE
        + f"for t in {targets!r}:\n"
        + (
            "    fd = libc.open(t.encode(), os.O_WRONLY | os.O_CREAT, 0o644)\n"
            "    print(t, fd, libc.write(fd, b'x', 1) if fd >= 0 else ctypes.get_errno())\n"
        )
    )
    ok, out, err = raw(code)
    assert ok, err
    for t in targets:
        assert not Path(t).exists(), f"{t} was written from inside the sandbox"
    # the sandbox's own /tmp is private: a write there succeeds and vanishes with it
    assert str(host_tmp) in out


def test_symlink_swaps_reach_nothing_on_the_host():
    """The path-check race needs the hook to be the boundary; under the OS layer the host's /tmp and / are not
    reachable by any path, so a swapped symlink and a directory descriptor land inside the sandbox."""
    name = f"esbench-race-{os.getpid()}"
    code = (
        "import os, threading\nos.symlink('/tmp', 'link')\n"
        "d = os.open('link', os.O_RDONLY | os.O_DIRECTORY)\n"
        f"fd = os.open({name!r}, os.O_WRONLY | os.O_CREAT, dir_fd=d)\nos.write(fd, b'x')\n"
        "os.chdir('/')\nprint(sorted(os.listdir('/')))\n"
        "try:\n    open('/usr/" + name + "', 'w')\nexcept OSError as e:\n    print('usr', e.errno)\n"
    )
    for hook in (False, True):
        ok, out, err = raw(code, hook=hook)
        assert not (Path(tempfile.gettempdir()) / name).exists()
        assert not Path(f"/usr/{name}").exists()
        if not hook:
            assert ok, err
            assert "usr 30" in out  # EROFS
            assert "'etc'" not in out and "'home'" not in out


def test_network_is_unreachable_even_from_native_code():
    from tests.tasks.test_sandbox import host_listener

    server, port = host_listener(0.5)
    code = (
        f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "    print('connected')\nexcept OSError as e:\n    print('refused', e.errno)\n"
    )
    ok, out, err = raw(code)
    with pytest.raises(TimeoutError):
        server.accept()
    server.close()
    assert ok and "connected" not in out and "refused" in out


def test_nothing_outlives_the_run():
    """Forks are refused; a thread, a detached session or a sleeping child of any kind dies with the sandbox."""
    code = NATIVE + (
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=False).start()\n"
        "print('setsid', libc.setsid())\nprint('clone', libc.syscall(56, 0, 0, 0, 0, 0), ctypes.get_errno())\n"
    )
    ok, out, err = raw(code)
    assert ok, err
    assert "clone -1 1" in out  # a raw clone without CLONE_THREAD: EPERM


def test_a_stdout_flood_is_graded_within_the_time_limit_and_bounded_memory():
    """The grader keeps at most `max_output` bytes of output and kills the program past OUTPUT_LIMIT; the grader's
    own peak memory (in a fresh process, VmHWM) stays under 150 MiB."""
    script = (
        "import json, time\nfrom esbench.tasks.mbpp_judge import run_mbpp_tests\nt = time.perf_counter()\n"
        "r = run_mbpp_tests(\"import sys\\nwhile True:\\n    sys.stdout.write('x' * 65536)\\n\", ['assert 1'], "
        "timeout=5)\nhwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')][0].split()[1]\n"
        "print(json.dumps({'passed': r.passed, 'failure': r.failure, 'seconds': time.perf_counter() - t, "
        "'stdout': len(r.stdout), 'hwm_kib': int(hwm)}))\n"
    )
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "OMP_NUM_THREADS": "1"}
    res = json.loads(
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env, timeout=60
        ).stdout
    )
    assert not res["passed"] and res["failure"] == "output limit"
    assert res["seconds"] < 5 and res["stdout"] <= 64_000
    assert res["hwm_kib"] < 150 * 1024, res


def test_in_memory_file_bombs_are_refused():
    ok, out, err = raw("import os\nos.memfd_create('bomb')")
    assert not ok and "Operation not permitted" in err
    ok, out, err = raw(NATIVE + "print(libc.syscall(319, b'bomb', 0), ctypes.get_errno())")  # memfd_create
    assert ok and out.strip() == "-1 1"
    # tmpfs and /dev/shm are size-capped; files are capped by RLIMIT_FSIZE
    ok, out, err = raw("open('/dev/shm/x', 'wb').write(b'x' * (4 << 20))")
    assert not ok and ("No space left" in err or "File too large" in err), err
    ok, out, err = raw("for i in range(20):\n    open(f'f{i}', 'wb').write(b'x' * (15 << 20))")
    assert not ok and "No space left" in err, err


def test_extended_attributes_cannot_be_set():
    for path in ("/work/f", "/usr/bin/env"):
        ok, out, err = raw(f"open('/work/f', 'w').close()\nimport os\nos.setxattr({path!r}, 'user.x', b'1')")
        assert not ok and ("Operation not permitted" in err or "Read-only" in err), (path, err)
    ok, out, err = raw("open('/work/f', 'w').close()\nimport os\nos.setxattr('/work/f', 'user.x', b'1')", hook=True)
    assert not ok and "PermissionError" in err


def test_a_forged_answer_from_native_code_cannot_pass_assert_false():
    forge = (
        "import ctypes, os\nfor fd in range(3, 20):\n    try:\n"
        '        os.write(fd, b\'{"ok": true, "value": ["b", true]}\\n\' * 4)\n'
        "    except OSError:\n        pass\ndef add(a, b):\n    return a + b\n"
    )
    r = run_mbpp_tests(forge, ["assert add(1, 2) == 3", "assert False"])
    assert not r.passed


def test_extension_modules_load_only_from_the_interpreters_own_directory():
    """A module the program writes to the work dir (here: a copy of a lib-dynload module that is never preloaded)
    cannot be mapped executable; nor can it be exec'd. The interpreter's own modules still import."""
    code = (
        "import importlib.machinery, importlib.util, os, sys, glob\n"
        "src = glob.glob(os.path.join([p for p in sys.path if p.endswith('lib-dynload')][0], 'xxlimited.*.so'))[0]\n"
        "dst = '/work/evil' + os.path.basename(src)[len('xxlimited'):]\n"
        "open(dst, 'wb').write(open(src, 'rb').read())\nos.chmod(dst, 0o755)\n"
        "for path in (dst, src):\n"
        "    try:\n"
        "        loader = importlib.machinery.ExtensionFileLoader('xxlimited', path)\n"
        "        loader.create_module(importlib.util.spec_from_file_location('xxlimited', path, loader=loader))\n"
        "        print('loaded', path)\n"
        "    except ImportError as e:\n"
        "        print('refused', path, e)\n"
        "try:\n    os.execv(dst, [dst])\nexcept OSError as e:\n    print('exec', e.errno)\n"
        "import math, _decimal, _json, zlib, unicodedata\nprint('stdlib ok')\n"
    )
    for hook in (False, True):
        ok, out, err = raw(code, hook=hook)
        assert "loaded" not in out, (hook, out, err)
        if not hook:
            assert ok, err
            assert out.count("refused") == 2 and "exec 1" in out and "stdlib ok" in out, out
