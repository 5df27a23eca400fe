"""The child process that runs math-verify for `esbench.tasks.paper_verifiers`, one call at a time, each within a
deadline (that module's docstring says why: math-verify's own timeouts cannot bound a long C call or work off the
main thread). Apart from the verifiers because it is process plumbing, not part of what decides "correct": the
release's verifier fingerprint hashes the verifiers, and this module holds none of them.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path


class _Worker:
    """A child Python process that runs functions of `module`, one call at a time, each within a deadline.

    The child is started once per process and reused (a call costs a pipe round trip); one past its deadline is
    killed (SIGKILL: a C loop in sympy ignores signals) and a fresh one is started at once. Requests and replies are
    JSON lines, so nothing the child sends is unpickled; the child runs `module`'s `_worker_main`, which looks each
    function up by name there. A lock serialises callers from several threads; after a fork the child process gets a
    worker of its own (`os.register_at_fork`, in `module`)."""

    START_TIMEOUT_S = 120.0  # importing sympy and math-verify, on a machine busy with training

    def __init__(self, module: str) -> None:
        self.module = module
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready = False

    def _spawn(self) -> None:
        if not sys.executable:
            raise RuntimeError("cannot start the math-verify worker: sys.executable is empty")
        root = str(Path(__file__).resolve().parents[2])  # the esbench this process runs, ahead of any other
        code = f"import sys; sys.path.insert(0, {root!r}); import {self.module} as v; v._worker_main()"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.ready = False

    def _kill(self, restart: bool) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                assert f is not None  # both are pipes (`_spawn`)
                f.close()
        self.proc = None
        if restart:
            self._spawn()  # its imports overlap with the caller's work, not with the next deadline

    def _read_line(self, deadline: float) -> bytes | None:
        """One reply line, or None when the deadline passes or the child dies first."""
        assert self.proc is not None and self.proc.stdout is not None  # `call` started the child
        fd = self.proc.stdout.fileno()
        buf = b""
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            buf += chunk
        return buf

    def call(self, fn: Callable[..., object], args: tuple, timeout: float) -> tuple[str, object]:
        """("ok", fn(*args)) from the child; ("timeout", None) or ("crash", None) when it ran past `timeout` or died
        (it is replaced), ("error", None) when `fn` raised."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._kill(restart=True)
            if not self.ready:
                if self._read_line(time.monotonic() + self.START_TIMEOUT_S) != b"ready\n":
                    self._kill(restart=False)
                    raise RuntimeError("the math-verify worker did not start (see its stderr above)")
                self.ready = True
            assert self.proc is not None and self.proc.stdin is not None  # started above, stdin a pipe
            try:
                self.proc.stdin.write(json.dumps([fn.__name__, list(args), timeout]).encode() + b"\n")
                self.proc.stdin.flush()
            except OSError:
                self._kill(restart=True)
                return "crash", None
            line = self._read_line(time.monotonic() + timeout)
            if line is None:
                status = "timeout" if self.proc.poll() is None else "crash"
                self._kill(restart=True)
                return status, None
            reply = json.loads(line)
            return ("ok", reply[1]) if reply[0] == "ok" else ("error", None)
