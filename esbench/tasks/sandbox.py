"""Run untrusted, model-written Python (MBPP completions) with layered containment, and score MBPP unforgeably.

Model-written code is hostile input. Each run gets, from the outside in:

1. **Namespaces** (when the kernel allows unprivileged user namespaces, probed once): `unshare --user
   --map-root-user --net --pid --fork --kill-child`. The new network namespace has only a downed loopback, so no
   connection can leave; in the new PID namespace the program cannot see or signal its parent, and when its init
   exits the kernel kills every process left inside.
2. **rlimits** set in the child before exec: RLIMIT_CPU (CPU seconds), RLIMIT_AS (address space), RLIMIT_NPROC,
   RLIMIT_FSIZE and RLIMIT_CORE = 0. (RLIMIT_NPROC is not enforced for uid 0; the layers below cover forks.)
3. **A Python audit hook** (PEP 578) installed before the program runs: it refuses sockets, process creation
   (fork, exec, spawn, subprocess, system, and the `_posixsubprocess` module, whose `fork_exec` raises no audit
   event; a stub stands in so `import subprocess` still works), signals to other processes (`os.kill`,
   `os.killpg`), ctypes, subinterpreters (which have no hooks), tracing and profiling, further audit hooks, the
   gc's object walks, hand-made code objects (`types.CodeType`, `code.replace`), and any write, delete, rename,
   mkdir, chmod or chdir of a path outside the run's working directory, and the opening of a directory outside it
   (a `dir_fd` that relative paths would escape through). A relative path is checked as relative to the working
   directory itself; the real base (the current directory or a `dir_fd`) can only be that directory or below it,
   so the check errs towards refusing (`os.chdir("..")` back out of a subdirectory is refused; an absolute path
   works). Everything the hook reads is bound into it before the program starts, as default arguments holding
   immutable values and C functions, so the program cannot rebind its state through module globals (the guard
   is `sys.modules["__main__"]`), builtins or module attributes (symlinks are resolved with the bound `os.lstat`
   and `os.readlink`, not `os.path.realpath`, whose helpers can be monkeypatched), and it never calls a method
   the program could have defined (paths are taken only as `str`/`bytes`; fds only where they are harmless).
4. **No interpreter finalization**: the guard ends with `os._exit`, after the program and its tests, whatever
   happened. CPython stops calling audit hooks part-way through finalizing (a `__del__` of an object left in the
   guard module's globals runs unguarded: it could open a socket), so finalizers, and atexit handlers, never run
   here. Output is unbuffered (`-u`), so nothing is lost.
5. **A wall-clock timeout**, and at the end the whole process group (`start_new_session=True`) is SIGKILLed and the
   temporary directory removed, whatever happened.

`mode()` reports which network layer is active: `"netns"` (new network namespace) or `"audit"` (the audit hook
alone, on kernels that forbid user namespaces). Audit hooks alone are not a security boundary against native
code; that is why ctypes is refused and the namespace layer is preferred.

MBPP scoring (`run_tests`): proof of completion, not exit status
----------------------------------------------------------------
An exit status of 0 proves nothing: `sys.exit(0)` or `os._exit(0)` before the tests, a `SystemExit` raised by the
function under test, an atexit handler or `sys.excepthook` that exits 0 after a failed assert, all end in 0. So a
program passes only when the harness *receives proof that every test statement ran to its end*:

* The program's code and the test statements are compiled separately (the same globals, as in MBPP's
  `code + tests`). The tests are one code object, `TESTS`, whose last statement, on line `LAST`, is the epilogue
  `__import__('sys').audit('esbench.sandbox.done')`. The guard compiles both before the program runs.
* Only the audit hook can produce the proof, and only in answer to that event raised *from a frame running
  `TESTS` at line `LAST` or later*: the hook checks `sys._getframe(1).f_code is TESTS` (object identity) and its
  `f_lineno`. Straight-line code reaches its last line only after every statement before it completed: a failing
  `assert` raises, a `SystemExit` propagates, an exit or a kill ends the process, and the program cannot jump a
  frame's instruction pointer (that needs a trace function, and `sys.settrace`/`setprofile`/`sys.monitoring` are
  refused). A program that raises the event itself, or makes a test line call `sys.audit` through a C callable
  (a `functools.partial` as `__eq__`), is refused: wrong frame, or a line before `LAST`. A program that finds
  `TESTS` (frames are reachable) can only execute it from its first line: its own exec of the tests proves
  nothing more than the tests do.
* The proof travels on a channel the program cannot reach. The parent listens on a Unix socket in the run's
  directory, outside the working directory; the hook, on a genuine completion event, creates a socket, connects
  and sends a fixed message, and the parent reads it after the child has exited. Creating a socket always raises
  the audited `socket.__new__` event in C, and the hook allows it (and `socket.connect`) only when called from
  itself handling a genuine completion. Nothing else in the sandbox can connect: no inherited descriptor is a
  socket (the listener is not inheritable), process creation and subinterpreters (which have no audit hooks) are
  refused, and finalization, when hooks are gone, never happens.
* No secret is involved on purpose. A nonce held by the child before the tests finish can be read by the
  program (`/proc/self/mem`, `gc`, frames); a nonce sent later would need the parent to know when the tests
  finished, which is the question. The unforgeability is a capability (who may create a socket), not a secret.

The pass rule is: proof received, exit status 0, no timeout.

What remains possible, because the tests run in the program's interpreter (see ADR 0008): making a test
expression truthy without a right answer. Objects whose `__eq__` always answers True (or `__bool__` True, or
`__len__`, `__hash__`, `__lt__` tailored to the comparison), returning mocks; rebinding names the tests use
(`builtins.sorted`, `set`, `math.isclose`, `round`) so both sides agree; reading the expected values from the
test file and answering them (MBPP prompts show the tests anyway). Closing these needs the comparison out of the
program's reach: run the tests in a separate, trusted process that calls the solution across a process boundary
and gets back plain data (exact builtin types, checked with a `type` bound before the program ran), compared there.

The proof is exactly as strong as the audit hook, and the hook is not a boundary against a program that
corrupts its own interpreter: bytecode made by hand and loaded through `marshal` (a crafted `.pyc` imported, or
`marshal.loads`; refusing marshal would break every import of a cached module), a native extension module with
raw memory access, or an interpreter bug. And the hook is Python: on CPython >= 3.13, `frame.f_locals` writes
through (PEP 667), so a program that gets control inside a running hook call (a signal handler or a gc finalizer
that fires there) could rewrite that call's locals, and so its decision; on 3.11 and 3.12 `f_locals` is a copy
and every object the hook holds is immutable. All of these are closed only by taking the verdict out of the
program's process (the separate trusted process above), or the checks out of Python (seccomp).
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# What the hook sends on the proof channel when the tests' last statement is reached. Not a secret (see above).
_PROOF = b"esbench-sandbox: every test statement ran\n"

# The guard runs inside the child before the untrusted program. It must not import anything heavy. Its module
# globals are reachable by the program (`sys.modules["__main__"]`), so nothing the hook reads lives there.
_GUARD = r'''
import ast, os, sys, types, _socket

_EPILOGUE = "__import__('sys').audit('esbench.sandbox.done')"
_PROOF = @PROOF@
_DENY = ("socket.", "subprocess.", "ctypes.", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn",
         "os.system", "os.kill", "os.killpg", "os.startfile", "pty.", "os.setuid", "os.setgid", "os.chroot",
         "os.add_dll_directory", "sys.remote_exec", "webbrowser.", "ftplib.", "smtplib.", "urllib.", "http.",
         "os.pidfd_open", "syslog.",
         # jumping over a statement needs a trace function; finding the hook's objects needs these
         "sys.settrace", "sys.setprofile", "sys._settraceallthreads", "sys._setprofileallthreads", "sys.monitoring",
         "sys._current_frames", "sys._current_exceptions", "sys.addaudithook", "gc.get_objects",
         "gc.get_referrers", "gc.get_referents", "cpython.PyInterpreterState_New",
         # hand-made bytecode (types.CodeType, code.replace) can corrupt the interpreter
         "code.__new__")
# modules that act without audit events: process creation, native memory, subinterpreters, native file writers
_REFUSED_MODULES = frozenset({
    "_posixsubprocess", "_ctypes", "ctypes", "_xxsubinterpreters", "_xxinterpchannels", "_interpreters",
    "_interpchannels", "_interpqueues", "_sqlite3", "_dbm", "_gdbm", "_posixshmem", "_multiprocessing",
    "_remote_debugging"})
# event -> indices of its path arguments (which must lie inside the working directory)
_PATH_EVENTS = (("os.remove", (0,)), ("os.unlink", (0,)), ("os.rmdir", (0,)), ("os.mkdir", (0,)),
                ("os.rename", (0, 1)), ("os.replace", (0, 1)), ("os.chmod", (0,)), ("os.chown", (0,)),
                ("os.truncate", (0,)), ("os.utime", (0,)), ("os.symlink", (0, 1)), ("os.link", (0, 1)),
                ("shutil.rmtree", (0,)), ("shutil.copyfile", (1,)), ("shutil.move", (1,)),
                ("shutil.copytree", (1,)), ("os.mkfifo", (0,)), ("os.mknod", (0,)), ("os.chdir", (0,)))
# events whose path may be a descriptor: chdir to an (inside) directory, truncate through a writable descriptor
_FD_OK = ("open", "os.chdir", "os.truncate")


def _hook_for(root, tests, last, done):
    """The audit hook. It reads only its arguments and defaults: immutable values and C functions."""

    def hook(event, args, *, _root=root, _rootsep=root + "/", _tests=tests, _last=last, _done=done,
             _proof=_PROOF, _deny=_DENY, _refused=_REFUSED_MODULES, _paths=_PATH_EVENTS, _fd_ok=_FD_OK,
             _write_flags=os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
             _getframe=sys._getframe, _lstat=os.lstat, _stat=os.stat, _readlink=os.readlink,
             _fmt=0o170000, _lnk=0o120000, _dir=0o040000, _type=type, _issub=issubclass, _len=len,
             _str=str, _bytes=bytes, _int=int, _join=str.join, _bjoin=bytes.join, _decode=bytes.decode,
             _enc=sys.getfilesystemencoding(), _errors=sys.getfilesystemencodeerrors(),
             _Perm=PermissionError, _OSError=OSError, _ValueError=ValueError,
             _sock=_socket.socket, _AF_UNIX=_socket.AF_UNIX, _STREAM=_socket.SOCK_STREAM):
        if event == "object.__getattr__" or event == "sys._getframe":
            return  # the frequent ones, and the ones the checks below raise themselves
        if event.startswith(_deny):
            if event.startswith("socket.") and _tests is not None:
                # allowed only to this hook handling a genuine completion: caller = TESTS at its last line
                me = _getframe(0)
                outer = me.f_back
                caller = outer.f_back if outer is not None else None
                if (caller is not None and outer.f_code is me.f_code and caller.f_code is _tests
                        and (caller.f_lineno or 0) >= _last):
                    return
            raise _Perm("sandbox: " + event + " is not allowed")
        if event == "esbench.sandbox.done":
            caller = _getframe(1)
            if _tests is None or caller.f_code is not _tests or (caller.f_lineno or 0) < _last:
                raise _Perm("sandbox: completion signalled outside the harness")
            s = _sock(_AF_UNIX, _STREAM)
            try:
                s.settimeout(5)
                s.connect(_done)
                s.sendall(_proof)
            finally:
                s.close()
            return
        if event == "import":
            name = args[0]
            if _type(name) is not _str:
                name = _join("", (name,)) if _issub(_type(name), _str) else ""
            if name.partition(".")[0] in _refused or name.startswith(("_test", "_xx")):
                raise _Perm("sandbox: importing " + name + " is not allowed")
            return
        if event == "open":
            mode, flags = args[1], args[2]
            writing = (mode is not None and ("w" in mode or "a" in mode or "x" in mode or "+" in mode)) or (
                flags is not None and flags & _write_flags != 0)
            todo = (args[0],)
        else:
            where = None
            for name, indices in _paths:
                if name == event:
                    where = indices
                    break
            if where is None:
                return
            writing, n, todo = True, _len(args), ()
            for i in where:
                if i < n:
                    todo = todo + (args[i],)
        for p in todo:
            if p is None:
                continue
            t = _type(p)
            if t is not _str:
                if t is _bytes or _issub(t, _bytes):
                    p = _decode(_bjoin(b"", (p,)), _enc, _errors)
                elif _issub(t, _str):
                    p = _join("", (p,))
                elif _issub(t, _int) and event in _fd_ok:
                    continue  # an open descriptor: opening it was checked
                else:
                    raise _Perm("sandbox: " + event + " needs a str or bytes path here")
            if not writing:  # a read: only directories matter (a dir_fd outside would escape the path checks)
                try:
                    if _stat(p).st_mode & _fmt != _dir:
                        continue
                except (_OSError, _ValueError):
                    continue
            # resolve symlinks like os.path.realpath, with the bound os.lstat/os.readlink
            todo_parts = (p if p.startswith("/") else _root + "/" + p).split("/")
            todo_parts.reverse()
            cur, hops, inside = "", 0, True
            while todo_parts:
                c = todo_parts.pop()
                if c == "" or c == ".":
                    continue
                if c == "..":
                    cur = cur[: cur.rfind("/")] if cur else ""
                    continue
                nxt = cur + "/" + c
                try:
                    st = _lstat(nxt)
                except (_OSError, _ValueError):
                    cur = nxt
                    continue
                if st.st_mode & _fmt != _lnk:
                    cur = nxt
                    continue
                hops += 1
                try:
                    target = _readlink(nxt)
                except (_OSError, _ValueError):
                    target = None
                if hops > 40 or target is None:
                    inside = False
                    break
                if target.startswith("/"):
                    cur = ""
                more = target.split("/")
                more.reverse()
                todo_parts.extend(more)
            real = cur or "/"
            if not inside or not (real == _root or real.startswith(_rootsep)):
                raise _Perm("sandbox: " + event + " outside the working directory: " + p)

    return hook


def _refuse_process(*args, **kwargs):
    raise PermissionError("sandbox: process creation is not allowed")


def _main(_exit=os._exit, _sys=sys, _exec=exec, _SystemExit=SystemExit, _isinstance=isinstance, _int=int):
    code = 1
    try:
        try:
            with open(sys.argv[1], encoding="utf-8") as f:
                spec = ast.literal_eval(f.read())
            root = os.path.realpath(os.getcwd())
            g = {"__name__": "__main__", "__builtins__": __builtins__}
            setup = compile("\n".join(spec["imports"]), "imports.py", "exec", dont_inherit=True)
            program = compile(spec["program"], "program.py", "exec", dont_inherit=True)
            tests = last = None
            if spec["tests"] is not None:
                tree = ast.parse("\n".join(spec["tests"]) + "\n" + _EPILOGUE, "tests.py")
                if ast.dump(tree.body[-1]) != ast.dump(ast.parse(_EPILOGUE).body[0]):
                    raise SystemError("sandbox: the tests do not end where the epilogue starts")
                last = tree.body[-1].lineno
                tests = compile(tree, "tests.py", "exec", dont_inherit=True, optimize=0)  # asserts kept
            # subprocess imports it at import time; a stub keeps `import subprocess` working (Popen is refused)
            stub = types.ModuleType("_posixsubprocess")
            stub.fork_exec = _refuse_process
            sys.modules["_posixsubprocess"] = stub
            sys.addaudithook(_hook_for(root, tests, last, spec["done"]))
            sys.argv = ["program.py"]
            _exec(setup, g)
            _exec(program, g)
            if tests is not None:
                _exec(tests, g)
            code = 0
        except _SystemExit as e:
            c = e.code
            if c is None:
                code = 0
            elif _isinstance(c, _int):
                code = c & 0xFF
            else:
                try:
                    print(c, file=_sys.stderr)
                finally:
                    code = 1
        except:  # noqa: E722 (bare: no name the program could rebind)
            code = 1
            _sys.excepthook(*_sys.exc_info())
    finally:
        _exit(code)  # never finalize: CPython drops audit hooks while finalizing


_main()
'''


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None  # None when killed for the wall-clock timeout
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    tests_completed: bool | None = None  # run_mbpp_tests: proof received that every test statement ran

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.tests_completed is not False


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
    return _run(code, None, None, timeout, memory_mb, max_procs, max_file_mb, max_output)


def run_mbpp_tests(
    code: str, tests: list[str], imports: list[str] | tuple[str, ...] = (), timeout: float = 10.0
) -> SandboxResult:
    """MBPP protocol: run `imports`, then `code`, then the `assert` statements `tests` in the same globals. The
    result's `tests_completed` says whether the harness received proof that every test statement ran to its end;
    `passed` requires it, exit status 0 and no timeout."""
    return _run(code, list(tests), list(imports), timeout, 1024, 64, 16, 64_000)


def run_tests(code: str, tests: list[str], imports: list[str] | tuple[str, ...] = (), timeout: float = 10.0) -> bool:
    """MBPP protocol: True when every test statement ran to its end (proved, see the module docstring) and the
    program then exited with status 0."""
    return run_mbpp_tests(code, tests, imports, timeout).passed


def _run(
    code: str,
    tests: list[str] | None,
    imports: list[str] | None,
    timeout: float,
    memory_mb: int,
    max_procs: int,
    max_file_mb: int,
    max_output: int,
) -> SandboxResult:
    """`tests=None`: run `code` as a script. Else run `imports`, `code`, then `tests`, and listen for the proof."""
    base = Path(tempfile.mkdtemp(prefix="esbench-sandbox-"))
    extra: Path | None = None  # a short directory for the socket when `base` is too deep for a socket path
    listener: socket.socket | None = None
    try:
        work = base / "work"
        work.mkdir()
        done = None
        if tests is not None:
            sock_dir = base
            if len(os.fsencode(str(base / "done"))) > 100:  # sun_path holds 108 bytes
                sock_dir = extra = Path(tempfile.mkdtemp(prefix="esbench-sandbox-", dir="/tmp"))
            done = str(sock_dir / "done")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # not inheritable
            listener.bind(done)
            listener.listen(4)
        (base / "guard.py").write_text(_GUARD.replace("@PROOF@", repr(_PROOF)))
        spec = {"program": code, "imports": imports or [], "tests": tests, "done": done}
        (base / "spec.txt").write_text(repr(spec), encoding="utf-8")
        cmd = [sys.executable, "-I", "-B", "-u", str(base / "guard.py"), str(base / "spec.txt")]
        if mode() == "netns":
            cmd = [*_UNSHARE, *cmd]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8"}
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            cwd=work,
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
            tests_completed=None if listener is None else _proof_received(listener),
        )
    finally:
        if listener is not None:
            listener.close()
        shutil.rmtree(base, ignore_errors=True)
        if extra is not None:
            shutil.rmtree(extra, ignore_errors=True)


def _proof_received(listener: socket.socket) -> bool:
    """After the child is gone: did the first connection to the proof socket carry exactly the proof message?"""
    listener.setblocking(False)
    try:
        conn, _ = listener.accept()
    except OSError:  # BlockingIOError: nobody connected
        return False
    with conn:
        conn.setblocking(False)
        data = b""
        try:
            while len(data) <= len(_PROOF):
                chunk = conn.recv(256)
                if not chunk:
                    break
                data += chunk
        except OSError:  # the sender never finished
            return False
    return data == _PROOF


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
