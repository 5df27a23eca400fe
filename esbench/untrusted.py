"""Reading files that someone else wrote: leaderboard submissions, `cell.json` handed to `run-cell`, suites.

Every reader here is total: it either returns plain data or raises `UntrustedInputError` with a one-line reason,
within a bound on time and memory, whatever the file is.

- A path is opened with `O_NOFOLLOW | O_NONBLOCK` and must be a regular file (`fstat` on the open descriptor, so a
  swap between check and use changes nothing): a symlink, FIFO, socket or device (`/dev/zero`) is refused, and a
  FIFO never blocks the open.
- At most `max_bytes` are read; a larger file is refused, not truncated.
- JSON is parsed strictly: duplicate keys, NaN and ±Infinity (also as an overflowing literal such as `1e999`) are
  refused (Python's `json` accepts all of them), and
  nesting deeper than `max_depth` is refused before the recursive parser can hit the interpreter's recursion limit.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

MAX_JSON_BYTES = 64 * 1024 * 1024  # a record with per-problem evidence is a few MiB; the board's biggest input
MAX_DEPTH = 64


class UntrustedInputError(ValueError):
    """A file or document that is refused; the message says which and why, in one line."""


def read_bytes(path: str | os.PathLike[str], max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of a regular file that is not a symlink, at most `max_bytes` of them."""
    p = os.fspath(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        reason = "is a symlink" if os.path.islink(p) else (e.strerror or type(e).__name__).lower()
        raise UntrustedInputError(f"{p}: {reason}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedInputError(f"{p}: not a regular file")
        if st.st_size > max_bytes:
            raise UntrustedInputError(f"{p}: {st.st_size} bytes, over the limit of {max_bytes}")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # it grew while being read
                raise UntrustedInputError(f"{p}: over the limit of {max_bytes} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], max_bytes: int = MAX_JSON_BYTES) -> str:
    try:
        return read_bytes(path, max_bytes).decode("utf-8")
    except UnicodeDecodeError as e:
        raise UntrustedInputError(f"{os.fspath(path)}: not UTF-8 ({e.reason} at byte {e.start})") from None


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise UntrustedInputError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _constant(name: str) -> Any:
    raise UntrustedInputError(f"{name} is not a JSON number")


def _float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):  # 1e999 parses to inf
        raise UntrustedInputError(f"{text[:40]} overflows a float")
    return x


def _depth(text: str, max_depth: int) -> int:
    """Deepest bracket nesting outside strings: a linear scan, so a hostile nesting is refused cheaply."""
    depth = deepest = 0
    in_str = escaped = False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > max_depth:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def loads(text: str, *, what: str = "JSON", max_depth: int = MAX_DEPTH) -> Any:
    """Strict JSON: no duplicate keys, no NaN/Infinity, nesting at most `max_depth`."""
    if _depth(text, max_depth) > max_depth:
        raise UntrustedInputError(f"{what}: nested deeper than {max_depth}")
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_float)
    except UntrustedInputError as e:
        raise UntrustedInputError(f"{what}: {e}") from None
    except (ValueError, RecursionError) as e:
        raise UntrustedInputError(f"{what}: not valid JSON ({e})") from None


def load_json(path: str | os.PathLike[str], max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """A JSON file read with `read_text` and parsed with `loads`."""
    return loads(read_text(path, max_bytes), what=os.fspath(path), max_depth=max_depth)


def load_json_object(path: str | os.PathLike[str], max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """A JSON file that must hold an object (a record, a manifest, a cell spec)."""
    doc = load_json(path, max_bytes)
    if not isinstance(doc, dict):
        raise UntrustedInputError(f"{os.fspath(path)}: holds {type(doc).__name__}, not an object")
    return doc


def load_jsonl(path: str | os.PathLike[str], max_bytes: int = MAX_JSON_BYTES) -> list[dict[str, Any]]:
    """A JSON-lines file of objects (samples, train.jsonl); blank lines are skipped."""
    rows = []
    for i, line in enumerate(read_text(path, max_bytes).splitlines(), 1):
        if not line.strip():
            continue
        row = loads(line, what=f"{os.fspath(path)}:{i}")
        if not isinstance(row, dict):
            raise UntrustedInputError(f"{os.fspath(path)}:{i}: holds {type(row).__name__}, not an object")
        rows.append(row)
    return rows


def regular_file(path: Path) -> bool:
    """True for a regular file that is not a symlink (lstat: the link itself is looked at, never followed)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = False) -> int:
    """A read-only descriptor of a regular file, for readers that keep their own size rule (suite files): opened
    with `O_NONBLOCK`, so a FIFO never blocks, and checked with `fstat` on the descriptor, so a FIFO, socket or
    device (`/dev/zero`) is refused. A symlink is refused unless `follow_symlinks` (a suite may be linked). The
    caller closes the descriptor."""
    p = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(p, flags)
    except OSError as e:
        reason = "is a symlink" if not follow_symlinks and os.path.islink(p) else (e.strerror or type(e).__name__)
        raise UntrustedInputError(f"{p}: {reason.lower()}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UntrustedInputError(f"{p}: not a regular file")
    return fd
