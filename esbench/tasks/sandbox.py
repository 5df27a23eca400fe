"""Run untrusted, model-written Python (MBPP completions) with layered containment.

Model-written code is hostile input. Each run gets, from the outside in:

1. **Namespaces** (when the kernel allows unprivileged user namespaces, probed once): `unshare --user
   --map-root-user --net --pid --fork --kill-child`. The new network namespace has only a downed loopback, so no
   connection can leave; in the new PID namespace the program cannot see or signal its parent, and when its init
   exits the kernel kills every process left inside.
2. **rlimits** set in the child before exec: RLIMIT_CPU (CPU seconds), RLIMIT_AS (address space), RLIMIT_NPROC,
   RLIMIT_FSIZE and RLIMIT_CORE = 0. (RLIMIT_NPROC is not enforced for uid 0; the layers below cover forks.)
3. **A Python audit hook** (PEP 578) installed before the program runs: it refuses sockets, process creation
   (fork, exec, spawn, subprocess, system), signals to other processes (`os.kill`, `os.killpg`), ctypes, and any
   write, delete, rename, mkdir or chmod of a path outside the run's temporary directory.
4. **A wall-clock timeout**, and at the end the whole process group (`start_new_session=True`) is SIGKILLed and the
   temporary working directory removed, whatever happened.

`mode()` reports which network layer is active: `"netns"` (new network namespace) or `"audit"` (the audit hook
alone, on kernels that forbid user namespaces). Audit hooks alone are not a security boundary against native
code; that is why ctypes is refused and the namespace layer is preferred.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# The guard runs inside the child before the untrusted program. It must not import anything heavy.
_GUARD = r"""
import os, sys
ROOT = os.path.realpath(os.getcwd())
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_DENY = ("socket.", "subprocess.", "ctypes.", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn",
         "os.system", "os.kill", "os.killpg", "os.startfile", "pty.", "os.setuid", "os.setgid", "os.chroot",
         "os.add_dll_directory", "sys.remote_exec", "webbrowser.", "ftplib.", "smtplib.", "urllib.", "http.",
         "os.pidfd_open")
_PATH_EVENTS = {"os.remove": (0,), "os.unlink": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1),
                "os.replace": (0, 1), "os.chmod": (0,), "os.chown": (0,), "os.truncate": (0,), "os.utime": (0,),
                "os.symlink": (0, 1), "os.link": (0, 1), "shutil.rmtree": (0,), "shutil.copyfile": (1,),
                "shutil.move": (1,), "shutil.copytree": (1,), "os.mkfifo": (0,), "os.mknod": (0,)}

def _inside(path):
    if isinstance(path, int):
        return True  # an already-open descriptor: opening it was checked
    try:
        p = os.fsdecode(path)
    except TypeError:
        return False
    real = os.path.realpath(os.path.join(ROOT, p))
    return real == ROOT or real.startswith(ROOT + os.sep)

def _hook(event, args):
    if event.startswith(_DENY):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writing and path is not None and not _inside(path):
            raise PermissionError(f"sandbox: write outside the working directory: {path!r}")
    elif event in _PATH_EVENTS:
        for i in _PATH_EVENTS[event]:
            if i < len(args) and args[i] is not None and not _inside(args[i]):
                raise PermissionError(f"sandbox: {event} outside the working directory: {args[i]!r}")

sys.addaudithook(_hook)
del _hook
sys.argv = ["program.py"]
with open("program.py") as _f:
    _src = _f.read()
exec(compile(_src, "program.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None  # None when killed for the wall-clock timeout
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and not self.timed_out


_UNSHARE = ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child"]


@functools.cache
def mode() -> str:
    """`netns` when a new user+network+PID namespace can be created here, else `audit` (hook only)."""
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return "audit"
    try:
        r = subprocess.run([*_UNSHARE, "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "audit"
    return "netns" if r.returncode == 0 else "audit"


def _limits(cpu_s: int, memory_mb: int, max_procs: int, max_file_mb: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        mem = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_NPROC, (max_procs, max_procs))
        size = max_file_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_python(
    code: str,
    *,
    timeout: float = 10.0,
    memory_mb: int = 1024,
    max_procs: int = 64,
    max_file_mb: int = 16,
    max_output: int = 64_000,
) -> SandboxResult:
    """Run `code` as a script in a fresh sandbox and return its exit status and (truncated) output."""
    workdir = Path(tempfile.mkdtemp(prefix="esbench-sandbox-"))
    try:
        (workdir / "program.py").write_text(code)
        (workdir / "guard.py").write_text(_GUARD)
        cmd = [sys.executable, "-I", "-B", "guard.py"]
        if mode() == "netns":
            cmd = [*_UNSHARE, *cmd]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "TMPDIR": str(workdir), "LANG": "C.UTF-8"}
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_limits(max(1, int(timeout)), memory_mb, max_procs, max_file_mb),
        )
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            out, err = proc.communicate()
        finally:
            _kill_group(proc.pid)  # anything the program left running in its group dies with it
        return SandboxResult(
            returncode=None if timed_out else proc.returncode,
            stdout=out.decode(errors="replace")[:max_output],
            stderr=err.decode(errors="replace")[-max_output:],
            timed_out=timed_out,
            seconds=time.perf_counter() - t0,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_tests(code: str, tests: list[str], imports: list[str] | tuple[str, ...] = (), timeout: float = 10.0) -> bool:
    """MBPP protocol: the program passes when its code followed by every `assert` test exits with status 0."""
    program = "\n".join([*imports, code, "", *tests, ""])
    return run_python(program, timeout=timeout).passed
