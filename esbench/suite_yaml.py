"""Reading a suite file safely: YAML to Python data, with the line of every field path, or a `SuiteError`.

Suite files are untrusted input (shared suites, leaderboard submissions). PyYAML alone turns an alias bomb into a
MemoryError, deep nesting into a RecursionError and a binary file into a traceback; here each of these, and a file
over the size limit, is a `SuiteError` naming the file, the line and the field path. `esbench.spec` validates the
data that comes back.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NoReturn

import yaml

# Limits on what a suite file may be. Real suites are a few KB, a few hundred YAML nodes, < 10 levels deep and a few
# hundred cells; each limit is far above that and keeps a hostile or corrupt file to a clear error, not a hang,
# MemoryError or RecursionError.
MAX_BYTES = 1 << 20
"""Largest suite file, in bytes; checked before parsing (reading at most one byte more), so it also bounds any
over-long line or scalar and the time the pure-Python YAML parser takes."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and sequences, aliases expanded: PyYAML's composer (and pydantic) recurse."""
MAX_NODES = 10_000
"""Most YAML nodes with every alias expanded: a few lines of nested aliases ("billion laughs") expand to billions."""
MAX_INT_CHARS = 100
"""Longest integer literal: longer ones cost super-linear time to convert (and YAML 1.1's base-60 `1:2:3` worse)."""


class SuiteError(Exception):
    """One or more problems in a suite file, each as (line, field path, message)."""

    def __init__(self, file: str, problems: list[tuple[int, str, str]]):
        self.file = file
        self.problems = sorted(problems, key=lambda p: (p[0], p[1]))
        super().__init__(self.render())

    def render(self) -> str:
        """One line per problem, with anything unprintable escaped: names and values come from the file and must
        not reach the terminal as control codes (ANSI, RTL overrides, newlines)."""
        return "\n".join(
            printable(f"{self.file}:{line}: {path + ': ' if path else ''}{msg}") for line, path, msg in self.problems
        )


def printable(text: str) -> str:
    """`text` with every character that is not printable written as its escape (`\\x1b`, `\\u202e`, `\\n`)."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _walk(node: yaml.Node, path: tuple, lines: dict[tuple, int], dups: list) -> None:
    """Record the 1-based line of every field path and collect duplicate mapping keys (iterative, in document order,
    so a later duplicate's line wins as before)."""
    stack: list[tuple[yaml.Node, tuple]] = [(node, path)]
    while stack:
        node, path = stack.pop()
        lines[path] = node.start_mark.line + 1
        children: list[tuple[yaml.Node, tuple]] = []
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, value_node in node.value:
                key = key_node.value
                # a key merged in with `<<: *anchor` lies outside this mapping; overriding it is YAML's merge rule
                own = node.start_mark.index <= key_node.start_mark.index < node.end_mark.index
                if not own:
                    children.append((value_node, path + (key,)))
                    continue
                if key in seen:
                    dups.append(
                        (
                            key_node.start_mark.line + 1,
                            _fmt(path + (key,)),
                            f"duplicate key {key!r} (first defined on line {seen[key]})",
                        )
                    )
                seen[key] = key_node.start_mark.line + 1
                children.append((value_node, path + (key,)))
        elif isinstance(node, yaml.SequenceNode):
            children = [(item, path + (i,)) for i, item in enumerate(node.value)]
        stack.extend(reversed(children))


class _LimitError(Exception):
    """A suite file beyond one of the limits above (or with a value YAML cannot convert), at a line and field path."""

    def __init__(self, line: int, path: tuple, msg: str):
        super().__init__(msg)
        self.problem = (line, _fmt(path[:3]), msg)


class _SuiteLoader(yaml.SafeLoader):
    """SafeLoader that enforces MAX_DEPTH and MAX_NODES while composing, before any Python object is built.

    Each node's expanded size and height are memoised, so an alias costs its target's expanded size without being
    expanded, and the limit trips at the alias that crosses it. An alias inside its own anchor (a recursive
    structure) is rejected: nothing in a suite is recursive, and walking one would never end."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0  # of the node being composed; mapping keys count as a level like values
        self._path: list = []  # field path of the node being composed, for messages (None: root or a mapping key)
        self._expanded = 0
        self._size: dict[yaml.Node, int] = {}
        self._height: dict[yaml.Node, int] = {}

    def _fail(self, mark: yaml.Mark, msg: str) -> NoReturn:
        raise _LimitError(mark.line + 1, tuple(p for p in self._path if p is not None), msg)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if isinstance(parent, yaml.MappingNode) and isinstance(index, yaml.Node):
            self._path.append(index.value if isinstance(index, yaml.ScalarNode) else "?")
        else:
            self._path.append(index if isinstance(parent, yaml.SequenceNode) else None)
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            alias = f"alias *{event.anchor}"
            if node not in self._size:
                self._fail(event.start_mark, f"{alias} is inside its own anchor (a recursive structure)")
            self._expanded += self._size[node]
            if self._expanded > MAX_NODES:
                self._fail(event.start_mark, f"{alias} expands the suite beyond {MAX_NODES} YAML nodes")
            if self._depth + self._height[node] > MAX_DEPTH:
                self._fail(event.start_mark, f"{alias} expands to nesting deeper than {MAX_DEPTH} levels")
        else:
            self._expanded += 1
            self._depth += 1
            if self._expanded > MAX_NODES:
                self._fail(event.start_mark, f"more than {MAX_NODES} YAML nodes")
            if self._depth > MAX_DEPTH:
                self._fail(event.start_mark, f"nested deeper than {MAX_DEPTH} levels")
            node = super().compose_node(parent, index)
            self._depth -= 1
            if isinstance(node, yaml.MappingNode):
                children = [child for pair in node.value for child in pair]
            else:
                children = node.value if isinstance(node, yaml.SequenceNode) else []
            self._size[node] = 1 + sum(self._size[c] for c in children)
            self._height[node] = 1 + max((self._height[c] for c in children), default=0)
        self._path.pop()
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError) as e:  # e.g. the date 2024-02-30
            raise _LimitError(node.start_mark.line + 1, (), f"cannot read value {_short(node)}: {e}") from None

    def construct_bounded_int(self, node: yaml.Node) -> int:
        if len(str(node.value)) > MAX_INT_CHARS:
            raise _LimitError(node.start_mark.line + 1, (), f"integer longer than {MAX_INT_CHARS} characters")
        value = self.construct_yaml_int(node)
        if not -(2**63) <= value < 2**64:
            raise _LimitError(node.start_mark.line + 1, (), f"integer {_short(node)} does not fit in 64 bits")
        return value


_SuiteLoader.add_constructor("tag:yaml.org,2002:int", _SuiteLoader.construct_bounded_int)


def _short(node: yaml.Node) -> str:
    text = repr(node.value) if isinstance(node, yaml.ScalarNode) else node.tag
    return text if len(text) <= 40 else text[:37] + "..."


def _read(path: str | Path, file: str) -> str:
    """The file's text, refusing what is not a regular file (a FIFO, a device such as /dev/zero: never blocking on
    one), files over MAX_BYTES (reading at most MAX_BYTES + 1) and bytes that are not UTF-8. A symlink to a regular
    file is followed: suites are often linked."""
    from esbench.untrusted import UntrustedInputError, open_regular

    try:
        fd = open_regular(path, follow_symlinks=True)
    except UntrustedInputError as e:
        raise SuiteError(file, [(0, "", f"cannot read suite: {str(e).removeprefix(str(path) + ': ')}")]) from None
    try:
        size = os.fstat(fd).st_size
        chunks, total = [], 0
        while total <= MAX_BYTES and (chunk := os.read(fd, MAX_BYTES + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
        raw = b"".join(chunks)
    except OSError as e:
        raise SuiteError(file, [(0, "", f"cannot read suite: {e.strerror}")]) from None
    finally:
        os.close(fd)
    if len(raw) > MAX_BYTES:
        got = f"{size} bytes" if size > MAX_BYTES else f"more than {MAX_BYTES} bytes"
        raise SuiteError(file, [(1, "", f"suite file is too large: {got}, the limit is {MAX_BYTES} bytes")])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        msg = f"not UTF-8 text: byte 0x{raw[e.start]:02x} at column {column}; a suite must be a UTF-8 YAML file"
        raise SuiteError(file, [(line, "", msg)]) from None


def _fmt(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _line(lines: dict[tuple, int], path: tuple) -> int:
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path, 1)


def parse(path: str | Path) -> tuple[str, Any, dict[tuple, int], list]:
    """(file name, data, line of every field path, duplicate-key problems) of a suite file; SuiteError if unreadable."""
    file = str(path)
    text = _read(path, file)
    try:
        loader = _SuiteLoader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except _LimitError as e:
        raise SuiteError(file, [e.problem]) from None
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        msg = f"not a text file: character U+{e.character:04X} is not allowed in YAML"
        raise SuiteError(file, [(line, "", msg)]) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 1
        msg = f"YAML syntax error: {e.problem or e}"
        if e.context and e.context_mark and e.problem_mark and e.context_mark.line != e.problem_mark.line:
            msg += f" ({e.context} on line {e.context_mark.line + 1})"
        raise SuiteError(file, [(line, "", msg)]) from None
    except yaml.YAMLError as e:
        raise SuiteError(file, [(1, "", f"YAML error: {e}")]) from None
    if not isinstance(data, dict):
        raise SuiteError(file, [(1, "", "a suite must be a YAML mapping with name, models, methods, ...")])
    lines: dict[tuple, int] = {}
    problems: list = []
    _walk(node, (), lines, problems)
    return file, data, lines, problems
