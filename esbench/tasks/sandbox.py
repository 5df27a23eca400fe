"""Run untrusted, model-written Python (MBPP completions) confined by the operating system, and grade it from outside.

Model-written code is hostile input: it is also the RL training reward, so a program that fools the grader
teaches the policy to fool it. The threat model and what each layer guarantees are in SECURITY.md.

Confinement (mode `bwrap`, the default and the only one the leaderboard accepts): each program runs under
bubblewrap (Debian/Ubuntu package `bubblewrap`; also what Flatpak uses, so it is on most GPU nodes), chosen
because it needs no daemon and no root (unprivileged user namespaces; as root it works too), works on a stock CI
runner and a GPU node alike, and is a single maintained binary from the distribution:

- a read-only view of the system (`/usr` and the interpreter's own prefix only: no `/etc`, `/home`, `/root`, no
  repository, no virtualenv), with every site-packages directory masked by an empty read-only tmpfs;
- a private writable work dir and `/tmp`, each a size-capped tmpfs that vanishes with the sandbox;
- new user, network (no interface but a downed loopback), PID, IPC, UTS and cgroup namespaces; `--die-with-parent`
  and the PID namespace mean nothing outlives the run: when the sandbox's init dies the kernel kills every process
  left inside, and the whole process group is SIGKILLed at the end whatever happened;
- a seccomp filter (libseccomp through `pyseccomp`): no new processes (fork, vfork, clone without CLONE_THREAD;
  clone3 answers ENOSYS so threads fall back to clone), no memfd (anonymous in-memory files), no extended
  attributes, no ptrace, keyrings, bpf, perf, userfaultfd, io_uring, mounts or new namespaces;
- kernel-counted limits (rlimits): address space (covers every mapping, threads included, as one process is all
  there can be), CPU seconds, file size, open files, no core dumps;
- the interpreter starts isolated: `python -I -S -B`, so `sys.path` is the standard library alone.

The verdict is computed by this (trusted) process, never taken from the program's process: see `mbpp_judge`. The
sandbox answers requests ("run these statements", "evaluate this call into the program") with plain data, and
stdout/stderr are drained concurrently with a byte cap (past `OUTPUT_LIMIT` the program is killed: a print loop
cannot make the grader hold gigabytes).

The weaker fallback (mode `audit`) exists only on request: `ESBENCH_SANDBOX=audit`. It runs the same guard with
rlimits and, where the kernel allows, `unshare` network and PID namespaces, but without the read-only file system
or seccomp: the audit hook in `sandbox_guard` is then the only file-system layer, and native code walks around a
hook. Every record names the mode (`provenance.sandbox`); `leaderboard verify` refuses code verdicts from any mode
but `bwrap`. Where bubblewrap cannot run and no fallback was requested, grading stops with `SandboxUnavailable`.
"""

from __future__ import annotations

import functools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Any

from esbench import untrusted
from esbench.tasks.sandbox_confine import (
    _UNSHARE,
    GUARD,
    _bwrap_argv,
    _interpreter,
    _limits,
    _native_lock_filter,
    _pipe_with,
    _seccomp_filter,
    _unshare_works,
    _user_tasks,
)

ENV_MODE = "ESBENCH_SANDBOX"
MODES = ("bwrap", "audit")
OUTPUT_LIMIT = 8 * 1024 * 1024  # bytes of stdout+stderr before the program is killed (kept: `max_output` of each)
MAX_REPLY = 8 * 1024 * 1024  # bytes of one answer line from the sandbox


class SandboxUnavailable(RuntimeError):
    """Grading model-written code was asked for where the confined mode cannot run, and no weaker mode was chosen."""


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None  # 0: every request answered ok; None: killed at the wall-clock timeout
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    tests_completed: bool | None = None  # MBPP grading: every test statement held, as judged by the parent
    failure: str | None = None  # why not: the first failed statement, an error, "timeout", "output limit", ...

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.tests_completed is not False


# ------------------------------------------------------------------------------------------------------------------
# modes


def requested_mode() -> str:
    want = os.environ.get(ENV_MODE, "").strip() or "bwrap"
    if want not in MODES:
        raise SandboxUnavailable(f"{ENV_MODE}={want!r}: expected one of {', '.join(MODES)}")
    return want


@functools.cache
def _bwrap_probe() -> str | None:
    """None when the confined sandbox starts and runs the interpreter here; else why not (one line)."""
    if sys.platform != "linux":
        return "bubblewrap needs Linux"
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed"
    try:
        _seccomp_filter()
    except Exception as e:  # noqa: BLE001 (libseccomp missing or refusing: said in the reason)
        return f"no seccomp filter: {type(e).__name__}: {e}"
    try:
        with _Sandbox(timeout=20, memory_mb=512, max_output=4000) as box:
            box.request({"op": "exec", "src": "pass"})
    except _Stop as e:
        return f"bwrap could not start the interpreter: {e}: {box.stderr()[-300:].strip()}"
    except OSError as e:
        return f"bwrap could not start: {e}"
    return None


def mode() -> str:
    """`bwrap` (confined) when it works here, `audit` when requested by ESBENCH_SANDBOX, else `unavailable`."""
    if requested_mode() == "audit":
        return "audit"
    return "bwrap" if _bwrap_probe() is None else "unavailable"


def describe() -> dict[str, Any]:
    """What every record's provenance says about code grading (`provenance.sandbox`): the mode in force and, when
    the confined mode is unavailable, why."""
    try:
        m = mode()
    except SandboxUnavailable as e:
        return {"mode": "invalid", "reason": str(e)}
    out: dict[str, Any] = {"mode": m}
    if m == "unavailable":
        out["reason"] = _bwrap_probe()
    if m == "bwrap":
        out["bwrap"] = _bwrap_version()
    return out


@functools.cache
def _bwrap_version() -> str | None:
    try:
        return subprocess.run(["bwrap", "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None


def require() -> str:
    """The mode to grade in; raises SandboxUnavailable (with the fix) when there is none."""
    m = mode()
    if m == "unavailable":
        raise SandboxUnavailable(
            f"grading model-written code needs bubblewrap confinement, which cannot run here ({_bwrap_probe()}). "
            "Install it (Debian/Ubuntu: apt-get install bubblewrap; the user-namespace sysctl must allow it; in a "
            "container, run it with user namespaces permitted), or accept the weaker audit-hook mode by name with "
            f"{ENV_MODE}=audit: it is recorded in every record and the leaderboard refuses its verdicts"
        )
    return m


# ------------------------------------------------------------------------------------------------------------------
# one sandboxed interpreter, driven by requests


class _Stop(Exception):
    """The sandbox can answer no more: timeout, output limit, an oversized or malformed answer, or it died."""


class _Sandbox:
    """A confined interpreter running `sandbox_guard`, with the pipes to it pumped under one deadline."""

    def __init__(
        self, timeout: float, memory_mb: int = 1024, max_output: int = 64_000, mode: str = "bwrap", hook: bool = True
    ):
        self.deadline = time.monotonic() + timeout
        self.max_output = max_output
        self.t0 = time.perf_counter()
        self.timed_out = False
        self.reason: str | None = None
        self._out, self._err, self._total = bytearray(), bytearray(), 0
        self._reply = bytearray()
        self._host_dir: str | None = None
        req_r, self._req_w = os.pipe()
        self._rep_r, rep_w = os.pipe()
        child_fds = [req_r, rep_w]
        cpu = max(1, int(timeout))
        # the guard loads these itself (see sandbox_guard._lock_native); in bwrap mode bubblewrap loaded the first
        filters = [_native_lock_filter()] if mode == "bwrap" else [_seccomp_filter(), _native_lock_filter()]
        lock_fd = _pipe_with(b"".join(len(b).to_bytes(4, "little") + b for b in filters))
        child_fds.append(lock_fd)
        guard_args = [str(req_r), str(rep_w), f"--filters={lock_fd}"] + ([] if hook else ["--no-hook"])
        if mode == "bwrap":
            sec_r = _pipe_with(_seccomp_filter())
            child_fds.append(sec_r)
            py = ["/esbench/guard.py"]
            cmd, cwd, env, nproc = _bwrap_argv(sec_r), None, {"PATH": "/usr/bin:/bin"}, None
        else:  # audit: the guard on the host, in a private temporary dir
            self._host_dir = tempfile.mkdtemp(prefix="esbench-sandbox-")
            work = os.path.join(self._host_dir, "work")
            os.mkdir(work)
            py = [str(GUARD)]
            cmd = _UNSHARE if _unshare_works() else []
            cwd, nproc = work, _user_tasks() + 16
            env = {"PATH": "/usr/bin:/bin", "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8"}
        argv = [*cmd, _interpreter(), "-I", "-S", "-B", "-u", *py, *guard_args]
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=child_fds,
                start_new_session=True,
                preexec_fn=_limits(cpu, memory_mb, nproc),
            )
        finally:
            for fd in child_fds:
                os.close(fd)
        # stdout=PIPE, stderr=PIPE: both exist (Popen types them Optional)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._stdout: IO[bytes] = self.proc.stdout
        self._stderr: IO[bytes] = self.proc.stderr
        self._sel = selectors.DefaultSelector()
        for fh in (self._stdout, self._stderr):
            os.set_blocking(fh.fileno(), False)
            self._sel.register(fh.fileno(), selectors.EVENT_READ)
        os.set_blocking(self._rep_r, False)
        os.set_blocking(self._req_w, False)
        self._sel.register(self._rep_r, selectors.EVENT_READ)

    def __enter__(self) -> _Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _pump(self, pending: bytes = b"") -> bytes:
        """Write `pending` to the request pipe while draining output; return the remaining unwritten bytes once
        written, or when nothing is pending, the next answer line."""
        while True:
            if not pending and b"\n" in self._reply:
                line, _, rest = bytes(self._reply).partition(b"\n")
                self._reply = bytearray(rest)
                return line
            if pending:
                try:
                    pending = pending[os.write(self._req_w, pending) :]
                except BlockingIOError:
                    pass
                except BrokenPipeError:
                    raise _Stop("the sandbox exited") from None
                if not pending:
                    return b""
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.timed_out = True
                raise _Stop("timeout")
            for key, _ in self._sel.select(min(left, 0.05) if pending else left):
                fd = key.fd
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    self._sel.unregister(fd)
                    if fd == self._rep_r:
                        raise _Stop("the sandbox exited")
                    continue
                if fd == self._rep_r:
                    self._reply += data
                    if len(self._reply) > MAX_REPLY:
                        raise _Stop("an answer over the size limit")
                    continue
                self._total += len(data)
                buf = self._out if fd == self._stdout.fileno() else self._err
                if len(buf) < self.max_output:
                    buf += data[: self.max_output - len(buf)]
                if self._total > OUTPUT_LIMIT:
                    raise _Stop("output limit")

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return the sandbox's answer, parsed strictly (raises _Stop)."""
        self._pump((json.dumps(req) + "\n").encode())
        line = self._pump()
        try:
            ans = untrusted.loads(line.decode("utf-8", errors="strict"), what="sandbox answer", max_depth=128)
        except (UnicodeDecodeError, untrusted.UntrustedInputError) as e:
            raise _Stop(f"a malformed answer ({e})") from None
        if not isinstance(ans, dict) or type(ans.get("ok")) is not bool:
            raise _Stop("a malformed answer")
        return ans

    def stdout(self) -> str:
        return self._out.decode(errors="replace")

    def stderr(self) -> str:
        return self._err.decode(errors="replace")

    def seconds(self) -> float:
        return time.perf_counter() - self.t0

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # bwrap's group; its PID namespace dies with it
        except (ProcessLookupError, PermissionError, AttributeError):
            pass
        if hasattr(self, "proc"):
            self.proc.wait()
            self._sel.close()
            self._stdout.close()
            self._stderr.close()
        for fd in (self._req_w, self._rep_r):
            try:
                os.close(fd)
            except OSError:
                pass
        if self._host_dir is not None:
            shutil.rmtree(self._host_dir, ignore_errors=True)


def session(timeout: float, memory_mb: int = 1024, max_output: int = 64_000) -> _Sandbox:
    """A sandboxed interpreter in the mode in force (raises SandboxUnavailable when there is none)."""
    return _Sandbox(timeout, memory_mb, max_output, mode=require())


def run_python(code: str, *, timeout: float = 10.0, memory_mb: int = 1024, max_output: int = 64_000) -> SandboxResult:
    """Run `code` as a script in a fresh sandbox; `passed` when it ran to its end without an exception."""
    box = session(timeout, memory_mb, max_output)
    failure = None
    try:
        ans = box.request({"op": "exec", "src": code, "file": "program.py"})
        failure = None if ans["ok"] else str(ans.get("error"))[:500]
    except _Stop as e:
        failure = str(e)
    finally:
        box.close()
    err = box.stderr() + ("" if failure is None else f"\n{failure}\n")
    return SandboxResult(
        returncode=None if box.timed_out else (0 if failure is None else 1),
        stdout=box.stdout(),
        stderr=err,
        timed_out=box.timed_out,
        seconds=box.seconds(),
        failure=failure,
    )
