"""How the sandbox's child is launched and confined: the bubblewrap command line, the seccomp filters, the rlimits.

The trusted parent, `esbench.tasks.sandbox` (whose docstring gives the threat model and what each layer guarantees),
starts the child with these and drives its requests. They are apart from that request loop so that the confinement,
what a review of the sandbox reads first, is one file.
"""

from __future__ import annotations

import errno
import functools
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

GUARD = Path(__file__).with_name("sandbox_guard.py")
TMPFS_MB = 64  # size of the sandbox's /work and /tmp each
_SANDBOX_WORK = "/work"
_UNSHARE = ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child"]


@functools.cache
def _seccomp_filter() -> bytes:
    """The BPF program bubblewrap loads before it execs the interpreter (see `esbench.tasks.sandbox`'s docstring)."""
    import pyseccomp as sc

    f = sc.SyscallFilter(sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    for name in (
        "fork",
        "vfork",
        "memfd_create",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "keyctl",
        "add_key",
        "request_key",
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "unshare",
        "setns",
        "kexec_load",
        "init_module",
        "finit_module",
        "delete_module",
        "setxattr",
        "lsetxattr",
        "fsetxattr",
        "removexattr",
        "lremovexattr",
        "fremovexattr",
        "open_by_handle_at",
        "name_to_handle_at",
        "personality",
        "acct",
        "swapon",
        "swapoff",
        "reboot",
        "syslog",
    ):
        try:
            f.add_rule(deny, name)
        except (OSError, RuntimeError, ValueError):  # not a syscall on this architecture (arm64 has no fork)
            pass
    clone_thread = 0x00010000
    f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, clone_thread, 0))  # a new process, not a thread
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")  # flags behind a pointer: glibc falls back to clone
    return _export(f)


@functools.cache
def _native_lock_filter() -> bytes:
    """The program the guard loads itself once the interpreter's own extension modules are mapped: no new
    executable mapping (mmap/mprotect with PROT_EXEC), no exec. No code can be added to the process after it."""
    import pyseccomp as sc

    f = sc.SyscallFilter(sc.ALLOW)
    prot_exec = 0x4
    for name in ("mmap", "mprotect", "pkey_mprotect"):
        f.add_rule(sc.ERRNO(errno.EACCES), name, sc.Arg(2, sc.MASKED_EQ, prot_exec, prot_exec))
    for name in ("execve", "execveat"):
        f.add_rule(sc.ERRNO(errno.EPERM), name)
    return _export(f)


def _export(f: Any) -> bytes:
    r, w = os.pipe()
    try:
        with os.fdopen(w, "wb", closefd=False) as fh:
            f.export_bpf(fh)
        os.close(w)
        w = -1
        return _read_all(r)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _site_dirs() -> list[str]:
    """Every site-packages/dist-packages directory the interpreter could be pointed at, to mask."""
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    found = {sysconfig.get_path(k, vars=base) for k in ("purelib", "platlib")}
    for root in ("/usr/lib", "/usr/local/lib", "/usr/lib64"):
        for p in Path(root).glob("python3*/*-packages"):
            found.add(str(p))
    found.add("/usr/lib/python3/dist-packages")
    return sorted(p for p in found if os.path.isdir(p))


def _interpreter() -> str:
    return os.path.realpath(sys.executable)


def _bwrap_argv(seccomp_fd: int) -> list[str]:
    argv = [
        "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--uid",
        "65534",
        "--gid",
        "65534",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
    ]
    bound: list[str] = []
    for d in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
            bound.append(d)
    for extra in (os.path.realpath(sys.base_prefix), os.path.dirname(_interpreter())):
        if not any(extra == b or extra.startswith(b + "/") for b in bound):
            argv += ["--ro-bind", extra, extra]
            bound.append(extra)
    for site in _site_dirs():
        if any(site.startswith(b + "/") for b in bound):
            argv += ["--tmpfs", site, "--remount-ro", site]
    argv += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(1 << 20),
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--size",
        str(TMPFS_MB << 20),
        "--tmpfs",
        "/tmp",
        "--size",
        str(TMPFS_MB << 20),
        "--tmpfs",
        _SANDBOX_WORK,
        "--ro-bind",
        str(GUARD),
        "/esbench/guard.py",
        "--chdir",
        _SANDBOX_WORK,
        "--setenv",
        "HOME",
        _SANDBOX_WORK,
        "--setenv",
        "TMPDIR",
        "/tmp",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--seccomp",
        str(seccomp_fd),
    ]
    return argv


@functools.cache
def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run([*_UNSHARE, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _limits(cpu_s: int, memory_mb: int, nproc: int | None) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        mem = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        size = 16 * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc is not None:  # the audit mode's only bound on forks (not enforced for root: see SECURITY.md)
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


def _pipe_with(data: bytes) -> int:
    """The read end of a pipe holding `data` (a few hundred bytes: fits the pipe buffer), write end closed."""
    r, w = os.pipe()
    try:
        os.write(w, data)
    finally:
        os.close(w)
    return r


def _user_tasks() -> int:
    """Tasks (processes and threads) of this real uid: RLIMIT_NPROC counts them all; the cap is this plus a margin."""
    uid, n = os.getuid(), 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    n += len(os.listdir(f"/proc/{d}/task"))
            except OSError:
                pass
    return n
