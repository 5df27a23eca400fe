"""The sandboxed side of MBPP grading: runs inside the confined interpreter (`python -I -S`), stdlib only.

`esbench.tasks.sandbox` starts this file as a script inside bubblewrap. It installs an audit hook (the second layer,
behind the operating system's confinement), then serves requests from the trusted parent, one JSON line each, on
the descriptor given as argv[1], and answers on argv[2]:

- `{"op": "exec", "src": S, "file": F}`: run the statements S in the program's globals; answer `{"ok": true}` or
  `{"ok": false, "error": "..."}`.
- `{"op": "eval", "src": E, "env": {...}}`: evaluate the expression E (a call into the program that the parent's
  test needs) with the names in env bound to plain data; answer `{"ok": true, "value": V}` with V encoded by
  `encode`, or an error.

Nothing this process answers is trusted: the parent decodes the answers as plain data (`decode`, strict) and
computes every comparison and the verdict itself. A program that takes over this interpreter can only lie about
the values its own functions return, which is what hard-coded answers already do (see SECURITY.md).

The parent imports this module too, for `encode` and `decode`; nothing runs on import. It stays one self-contained
file: bubblewrap binds only this file into the sandbox, and `-I` keeps its directory off `sys.path`.
"""

import sys

MAX_ITEMS = 100_000  # elements in one encoded value
MAX_DEPTH = 48  # nesting of one encoded value (the parent's strict JSON reader allows 2x + slack)
MAX_INT_HEX = 20_000  # hex digits of one int (80k bits): hex, not decimal, so no digit-limit error and linear time
MAX_STR = 1 << 20  # characters of one str or bytes


class EncodeError(ValueError):
    pass


def encode(value, _depth=0, _budget=None):
    """Plain data as tagged JSON: `[tag, payload]`. Built-in containers and their subclasses are read through the
    built-in type's own methods, so what crosses is the data, never the subclass: an `__eq__` or `__iter__` that
    the program defined stays behind. Other objects are refused (EncodeError)."""
    budget = [MAX_ITEMS] if _budget is None else _budget
    if _depth > MAX_DEPTH:
        raise EncodeError("nested too deeply")
    budget[0] -= 1
    if budget[0] < 0:
        raise EncodeError("too many elements")
    t = type(value)
    if value is None:
        return ["n"]
    if t is bool:
        return ["b", value]
    if isinstance(value, int):
        h = int.__format__(value, "x")
        if len(h) > MAX_INT_HEX:
            raise EncodeError("int too large")
        return ["i", h]
    if isinstance(value, float):
        return ["f", float.__repr__(value)]
    if isinstance(value, complex):
        return ["c", float.__repr__(complex.real.__get__(value)), float.__repr__(complex.imag.__get__(value))]
    if isinstance(value, str):
        s = str.__str__(value)
        if len(s) > MAX_STR:
            raise EncodeError("str too long")
        return ["s", s]
    if isinstance(value, (bytes, bytearray)):
        b = bytes(value) if t is not bytes else value
        if len(b) > MAX_STR:
            raise EncodeError("bytes too long")
        return ["y" if isinstance(value, bytes) else "Y", b.hex()]
    d = _depth + 1
    if isinstance(value, list):
        return ["l", [encode(x, d, budget) for x in list.__iter__(value)]]
    if isinstance(value, tuple):
        return ["t", [encode(x, d, budget) for x in tuple.__iter__(value)]]
    if isinstance(value, frozenset):
        return ["F", [encode(x, d, budget) for x in frozenset.__iter__(value)]]
    if isinstance(value, set):
        return ["S", [encode(x, d, budget) for x in set.__iter__(value)]]
    if isinstance(value, dict):
        return ["d", [[encode(k, d, budget), encode(v, d, budget)] for k, v in dict.items(value)]]
    if isinstance(value, range):
        return ["r", [encode(x, d, budget) for x in (value.start, value.stop, value.step)]]
    name = (getattr(t, "__module__", None), getattr(t, "__qualname__", None))
    mods = sys.modules
    if name == ("collections", "deque") and isinstance(value, mods["collections"].deque):
        return ["q", [encode(x, d, budget) for x in mods["collections"].deque.__iter__(value)]]
    if name[0] == "fractions" and isinstance(value, mods["fractions"].Fraction):
        return ["fr", encode(value.numerator, d, budget), encode(value.denominator, d, budget)]
    if name[0] in ("decimal", "_decimal", "_pydecimal") and isinstance(value, mods["decimal"].Decimal):
        return ["de", mods["decimal"].Decimal.__str__(value)]
    if name[0] == "builtins" and name[1] in ("dict_keys", "dict_values", "dict_items"):
        return ["v" + name[1][5], [encode(x, d, budget) for x in value]]
    if hasattr(t, "__next__") and hasattr(t, "__iter__"):  # a generator, map, filter, zip...: materialised once
        items = []
        for x in value:
            items.append(encode(x, d, budget))
        return ["it", items]
    raise EncodeError("a " + str(getattr(t, "__qualname__", "?")) + " is not plain data")


_FLOAT_WORDS = ("nan", "inf", "-inf")


def decode(doc, _depth=0):
    """The inverse of `encode`, strict: anything but the exact shapes `encode` writes raises ValueError (or
    TypeError for an unhashable set member or key). Used by the trusted parent on the sandbox's answers."""
    if _depth > MAX_DEPTH + 2:
        raise ValueError("nested too deeply")
    if type(doc) is not list or not doc or type(doc[0]) is not str:
        raise ValueError("not an encoded value")
    tag, rest, d = doc[0], doc[1:], _depth + 1
    if tag == "n" and not rest:
        return None
    if len(rest) == 1:
        p = rest[0]
        if tag == "b" and type(p) is bool:
            return p
        if tag == "i" and type(p) is str and 0 < len(p) <= MAX_INT_HEX + 1:
            return int(p, 16)
        if tag == "f" and type(p) is str:
            return _float(p)
        if tag in ("s", "de") and type(p) is str:
            return p if tag == "s" else __import__("decimal").Decimal(p)
        if tag in ("y", "Y") and type(p) is str and len(p) <= 2 * MAX_STR:
            b = bytes.fromhex(p)
            return b if tag == "y" else bytearray(b)
        if type(p) is list:
            if tag == "d":
                out = {}
                for pair in p:
                    if type(pair) is not list or len(pair) != 2:
                        raise ValueError("not a dict entry")
                    out[decode(pair[0], d)] = decode(pair[1], d)
                return out
            items = [decode(x, d) for x in p]
            if tag == "l":
                return items
            if tag == "t":
                return tuple(items)
            if tag == "S":
                return set(items)
            if tag == "F":
                return frozenset(items)
            if tag == "q":
                return __import__("collections").deque(items)
            if tag == "it":
                return iter(items)
            if tag == "vk":
                return dict.fromkeys(items).keys()
            if tag == "vv":
                return dict(enumerate(items)).values()
            if tag == "vi":
                return dict(items).items()
            if tag == "r" and len(items) == 3 and all(type(x) is int for x in items):
                return range(*items)
    if tag == "c" and len(rest) == 2 and all(type(x) is str for x in rest):
        return complex(_float(rest[0]), _float(rest[1]))
    if tag == "fr" and len(rest) == 2:
        num, den = decode(rest[0], d), decode(rest[1], d)
        if type(num) is int and type(den) is int and den > 0:
            return __import__("fractions").Fraction(num, den)
    raise ValueError("not an encoded value: " + tag[:8])


def _float(text):
    if len(text) > 40 or not (
        text in _FLOAT_WORDS
        or text.replace(".", "", 1).replace("e", "", 1).replace("-", "", 2).replace("+", "", 1).isdigit()
    ):
        raise ValueError("not a float")
    return float(text)


# ---------------------------------------------------------------------------------------------------------------
# The audit hook: a second layer behind the OS confinement (and the only one in the weaker `audit` mode). It reads
# only its arguments and defaults (immutable values and C functions), so the program cannot rebind its state.

_DENY = (
    "socket.", "subprocess.", "ctypes.", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
    "os.kill", "os.killpg", "os.startfile", "pty.", "os.setuid", "os.setgid", "os.chroot", "os.add_dll_directory",
    "sys.remote_exec", "webbrowser.", "ftplib.", "smtplib.", "urllib.", "http.", "os.pidfd_open", "syslog.",
    "os.setxattr", "os.removexattr",
    # subinterpreters have no audit hooks. (Tracing and hand-made code objects are allowed: the verdict is
    # not computed in this process, so corrupting it only lets the program misreport its own values.)
    "cpython.PyInterpreterState_New",
)  # fmt: skip
# modules that act without audit events: process creation, native memory, subinterpreters, native file writers,
# and interpreters of other languages (Tcl can start processes and write files)
_REFUSED_MODULES = frozenset({
    "_posixsubprocess", "_ctypes", "ctypes", "_xxsubinterpreters", "_xxinterpchannels", "_interpreters",
    "_interpchannels", "_interpqueues", "_sqlite3", "_dbm", "_gdbm", "_posixshmem", "_multiprocessing",
    "_remote_debugging", "_tkinter", "tkinter", "readline", "_curses", "_curses_panel",
})  # fmt: skip
_PATH_EVENTS = (
    ("os.remove", (0,)), ("os.unlink", (0,)), ("os.rmdir", (0,)), ("os.mkdir", (0,)), ("os.rename", (0, 1)),
    ("os.replace", (0, 1)), ("os.chmod", (0,)), ("os.chown", (0,)), ("os.truncate", (0,)), ("os.utime", (0,)),
    ("os.symlink", (0, 1)), ("os.link", (0, 1)), ("shutil.rmtree", (0,)), ("shutil.copyfile", (1,)),
    ("shutil.move", (1,)), ("shutil.copytree", (1,)), ("os.mkfifo", (0,)), ("os.mknod", (0,)), ("os.chdir", (0,)),
)  # fmt: skip
_FD_OK = ("open", "os.chdir", "os.truncate")


def _hook_for(root):
    """Refuse process creation, sockets, native-code modules, tracing, and writes outside `root`."""
    import os

    enc, errors = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()

    def hook(
        event,
        args,
        *,
        _root=root,
        _rootsep=root + "/",
        _deny=_DENY,
        _refused=_REFUSED_MODULES,
        _paths=_PATH_EVENTS,
        _fd_ok=_FD_OK,
        _write_flags=os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
        _lstat=os.lstat,
        _readlink=os.readlink,
        _type=type,
        _issub=issubclass,
        _len=len,
        _str=str,
        _bytes=bytes,
        _int=int,
        _join=str.join,
        _bjoin=bytes.join,
        _decode=bytes.decode,
        _enc=enc,
        _errors=errors,
        _Perm=PermissionError,
        _AF_UNIX=1,
    ):
        if event == "object.__getattr__" or event == "sys._getframe":
            return
        if event.startswith(_deny):
            if event == "socket.__new__" and _len(args) > 1 and args[1] == _AF_UNIX:
                return  # asyncio's self-pipe (a socketpair); connect, bind and sendto stay refused
            raise _Perm("sandbox: " + event + " is not allowed")
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
                flags is not None and flags & _write_flags != 0
            )
            if not writing:
                return
            todo = (args[0],)
        else:
            where = None
            for name, indices in _paths:
                if name == event:
                    where = indices
                    break
            if where is None:
                return
            n, todo = _len(args), ()
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
                    continue
                else:
                    raise _Perm("sandbox: " + event + " needs a str or bytes path here")
            # resolve symlinks like os.path.realpath, with the bound os.lstat/os.readlink (posixpath's helpers
            # are module globals the program could replace)
            parts = (p if p.startswith("/") else _root + "/" + p).split("/")
            parts.reverse()
            cur, hops, inside = "", 0, True
            while parts:
                c = parts.pop()
                if c == "" or c == ".":
                    continue
                if c == "..":
                    cur = cur[: cur.rfind("/")] if cur else ""
                    continue
                nxt = cur + "/" + c
                try:
                    st = _lstat(nxt)
                except (OSError, ValueError):
                    cur = nxt
                    continue
                if st.st_mode & 0o170000 != 0o120000:
                    cur = nxt
                    continue
                hops += 1
                try:
                    target = _readlink(nxt)
                except (OSError, ValueError):
                    target = None
                if hops > 40 or target is None:
                    inside = False
                    break
                if target.startswith("/"):
                    cur = ""
                more = target.split("/")
                more.reverse()
                parts.extend(more)
            real = cur or "/"
            if not inside or not (real == _root or real.startswith(_rootsep)):
                raise _Perm("sandbox: " + event + " outside the working directory: " + p)

    return hook


def _serve(rfd, wfd):
    """The request loop. Answers are written whole, one line each; the parent reads them with a byte cap."""
    import json
    import os

    g = {"__name__": "__main__", "__builtins__": __builtins__}
    codes = {}
    buf = b""

    def reply(obj):
        data = (json.dumps(obj, allow_nan=False, separators=(",", ":")) + "\n").encode()
        while data:
            data = data[os.write(wfd, data) :]

    def failure(e):
        return {"ok": False, "error": (type(e).__name__ + ": " + str(e))[:500]}

    while True:
        while b"\n" not in buf:
            chunk = os.read(rfd, 1 << 16)
            if not chunk:
                os._exit(0)
            buf += chunk
        line, _, buf = buf.partition(b"\n")
        req = json.loads(line)
        try:
            key = (req["op"], req["src"])
            code = codes.get(key)
            if code is None:
                mode = "exec" if req["op"] == "exec" else "eval"
                code = codes[key] = compile(req["src"], req.get("file", "<test>"), mode, dont_inherit=True)
            if req["op"] == "exec":
                exec(code, g)
                reply({"ok": True})
            else:
                env = {k: decode(v) for k, v in req.get("env", {}).items()}
                scope = {**g, **env} if env else g
                reply({"ok": True, "value": encode(eval(code, scope))})
        except BaseException as e:  # noqa: BLE001 (SystemExit from the program is a failure to answer, too)
            try:
                reply(failure(e))
            except BaseException:  # noqa: BLE001
                os._exit(1)


# lib-dynload modules never mapped before the native lock (refused above, test-only, or not needed: `hashlib`
# falls back to its built-in hashes without OpenSSL's _hashlib, and nothing here has a network for `ssl`)
_NOT_PRELOADED = (
    *sorted(_REFUSED_MODULES), "_test", "_xx", "xxlimited", "xxsubtype", "_ssl", "_hashlib", "nis", "ossaudiodev",
    "spwd", "_crypt", "audioop",
)  # fmt: skip


def _lock_native(fd):
    """Map the interpreter's own extension modules, then load the seccomp programs read from `fd` (each a 4-byte
    length and a BPF program). The parent sends the one that refuses new executable mappings and exec, so from
    here no code can be added to this process: an extension module written to the work dir (or mapped from memory)
    fails to load, and only the interpreter's own lib-dynload modules import (they were mapped already; `import`
    later runs their initialisation from those mappings)."""
    import ctypes
    import os

    data = b""
    while chunk := os.read(fd, 1 << 16):
        data += chunk
    os.close(fd)
    for d in sys.path:
        if d.endswith("lib-dynload") and os.path.isdir(d):
            for f in sorted(os.listdir(d)):
                if f.endswith(".so") and not f.startswith(_NOT_PRELOADED):
                    try:
                        ctypes.CDLL(os.path.join(d, f), mode=os.RTLD_LAZY)
                    except OSError:
                        pass  # a module whose library is absent here cannot be imported anyway
    libc = ctypes.CDLL(None, use_errno=True)

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: required to load a filter unprivileged
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    while data:
        n = int.from_bytes(data[:4], "little")
        bpf, data = data[4 : 4 + n], data[4 + n :]
        prog = Prog(n // 8, bpf)
        if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
            raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")
    for name in ("ctypes", "_ctypes", "ctypes._endian"):  # the guard's own use; the hook refuses the program's
        sys.modules.pop(name, None)


def _refuse_process(*args, **kwargs):
    raise PermissionError("sandbox: process creation is not allowed")


def main():
    import os

    rfd, wfd = int(sys.argv[1]), int(sys.argv[2])
    hook = "--no-hook" not in sys.argv[3:]  # tests of the OS layer alone
    if len(sys.argv) > 3 and sys.argv[3].startswith("--filters="):
        _lock_native(int(sys.argv[3].partition("=")[2]))
    sys.argv = ["program.py"]
    # `subprocess` imports _posixsubprocess (refused: its fork_exec raises no audit event); a stub keeps
    # `import subprocess` working for honest programs, and Popen fails
    stub = type(sys)("_posixsubprocess")
    stub.fork_exec = _refuse_process
    sys.modules["_posixsubprocess"] = stub
    if hook:
        sys.addaudithook(_hook_for(os.path.realpath(os.getcwd())))
    try:
        _serve(rfd, wfd)
    finally:
        os._exit(1)  # never finalize: CPython drops audit hooks part-way through finalizing


if __name__ == "__main__":
    main()
