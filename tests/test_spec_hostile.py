"""Hostile suite files (alias bombs, deep nesting, huge, binary or garbled files, absurd grids) are refused with a
`FILE:LINE: message` error in bounded time and memory, never a MemoryError, RecursionError, hang or traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import pytest
from test_spec import VALID  # tests/ is on sys.path (see run_helpers)

from esbench.spec import MAX_BYTES, MAX_CELLS, MAX_DEPTH, MAX_NODES, SuiteError, load_suite


def laughs(levels: int = 9, fan: int = 10) -> str:
    """The classic "billion laughs": each level is `fan` aliases of the one before (10**9 strings at 9 levels)."""
    out = ['lol0: &a0 "lol"']
    for i in range(1, levels + 1):
        out.append(f"lol{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fan) + "]")
    return VALID + "\n".join(out) + "\n"


def merge_bomb(levels: int = 40) -> str:
    """Merge keys doubling a mapping's pairs at every level (PyYAML copies merged pairs)."""
    out = ["m0: &m0 {a: 1}"]
    out += [f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], k{i}: 1}}" for i in range(1, levels + 1)]
    return VALID + "\n".join(out) + "\n"


N = 100_000
V = VALID.count("\n")  # the hostile part starts on line V + 1
# (id, file content, expected line, expected start of the field path or "", expected message fragment)
HOSTILE = [
    ("billion laughs", laughs(), V + 5, "lol4[7]", f"alias *a3 expands the suite beyond {MAX_NODES} YAML nodes"),
    ("merge-key bomb", merge_bomb(), V + 11, "m10.<<[0]", "alias *m9 expands the suite beyond"),
    ("recursive alias", VALID + "r: &r [1, [*r]]\n", V + 1, "r[1][0]", "alias *r is inside its own anchor"),
    ("deep flow sequences", VALID + "x: " + "[" * N + "]" * N + "\n", V + 1, "x[0][0]", "nested deeper than 64"),
    ("deep flow mappings", VALID + "x: " + "{a: " * N + "1" + "}" * N + "\n", V + 1, "x.a.a", "nested deeper than"),
    ("deep flow keys", "{" * N + "a: 1" + "}: 1" * (N - 1) + "}\n", 1, "", f"nested deeper than {MAX_DEPTH} levels"),
    ("deep block sequences", VALID + "x:\n  " + "- " * N + "1\n", V + 2, "x[0][0]", "nested deeper than"),
    (
        "deep indented blocks",
        VALID + "x:\n" + "".join("  " * i + "-\n" for i in range(1, 200)),
        V + 1 + MAX_DEPTH,
        "x[0][0]",
        "nested deeper than",
    ),
    (
        "alias that deepens past the limit",
        VALID + "a: &a " + "[" * 40 + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n",
        V + 2,
        "b[0][0]",
        f"alias *a expands to nesting deeper than {MAX_DEPTH} levels",
    ),
    (
        "too many nodes",
        VALID.replace("seeds: [0, 1]", "seeds: [" + ", ".join(map(str, range(2 * MAX_NODES))) + "]"),
        12,
        "seeds",
        f"more than {MAX_NODES} YAML nodes",
    ),
    (
        "file over the size cap",
        VALID.replace("name: demo", "name: demo\ndescription: " + "x" * MAX_BYTES),
        1,
        "",
        f"suite file is too large: {len(VALID) + MAX_BYTES + 14} bytes, the limit is {MAX_BYTES} bytes",
    ),
    ("many short lines over the cap", VALID + "#\n" * (MAX_BYTES // 2), 1, "", "suite file is too large"),
    ("latin-1 text", VALID.encode() + "description: café\n".encode("latin-1"), V + 1, "", "not UTF-8 text: byte 0xe9"),
    ("binary garbage", bytes(range(256)) * 64, 2, "", "not UTF-8 text: byte 0x80 at column 118"),
    ("NUL bytes in UTF-8", VALID.encode() + b"x: \x00\x01\n", V + 1, "", "character U+0000 is not allowed"),
    ("huge decimal integer", VALID.replace("n: 8", "n: " + "9" * 5000), 16, "", "integer longer than 100 characters"),
    ("base-60 integer", VALID.replace("n: 8", "n: " + "1:" * 50_000 + "1"), 16, "", "integer longer than"),
    ("hex integer out of range", VALID.replace("n: 8", "n: 0x" + "f" * 40), 16, "", "does not fit in 64 bits"),
    ("impossible date", VALID.replace("name: demo", "name: demo\ndescription: 2024-02-30"), 3, "", "out of range"),
    (
        "grid of a million cells",
        VALID.replace("base: {}", "base: {}\n  es: {method: es}").replace(
            "seeds: [0, 1]", "seeds: [" + ", ".join(map(str, range(1000))) + "]"
        )
        + "budgets: ["
        + ", ".join(map(str, range(1, 1001)))
        + "]\n",
        V + 2,
        "budgets",
        f"the grid has {1000 + 1000 * 1000} cells, more than {MAX_CELLS}",
    ),
]


def write(tmp_path, content: str | bytes, name: str = "suite.yaml"):
    p = tmp_path / name
    if isinstance(content, str):
        content = content.encode()
    p.write_bytes(content)
    return p


@pytest.mark.parametrize(("content", "line", "path", "fragment"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_suite_is_refused_with_file_line_and_message(tmp_path, content, line, path, fragment):
    suite = write(tmp_path, content)
    tracemalloc.start()
    try:
        with pytest.raises(SuiteError) as exc:
            load_suite(suite)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(exc.value.problems) == 1, exc.value.render()
    rendered = exc.value.render()
    assert rendered.startswith(f"{suite}:{line}: {path}"), rendered  # the path may go on: seeds[9977]
    assert fragment in rendered, rendered
    assert len(rendered) < 300 and "\n" not in rendered, "one short line per problem"
    assert peak < 64 << 20, f"peak {peak >> 20} MiB"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite.yaml"], "a refused suite writes nothing"


def test_an_endless_stream_is_refused_before_it_is_read(tmp_path):
    """An endless stream (a FIFO fed forever, /dev/zero) is not a regular file: refused at the open, without reading
    (tests/security/test_suite_hostile.py: a FIFO does not block). Regular files are read at most MAX_BYTES + 1."""
    with pytest.raises(SuiteError) as exc:
        load_suite("/dev/zero")
    assert "/dev/zero:0: cannot read suite: not a regular file" in exc.value.render()


def test_legitimate_anchors_aliases_and_merge_keys_still_work(repo, tmp_path):
    """tiny-full.yaml with ES's settings shared by an anchor + merge key and its σ by an alias: the same cells."""
    text = (repo / "suites" / "tiny-full.yaml").read_text()
    bf16 = text[text.index("  es-bf16:") : text.index("  es-grpo:")]
    anchored = (
        text.replace("  es:  ", "  es: &es", 1)
        .replace("    sigma: 0.003 ", "    sigma: &sigma 0.003 ", 1)
        .replace(bf16, "  es-bf16: {<<: *es, precision: paper-bf16}\n")
        .replace("diversity: {sigma: 0.003,", "diversity: {sigma: *sigma,")
    )
    assert anchored.count("*es") == 1 and anchored.count("*sigma") == 1 and anchored.count("&") == 2
    original = {c.name: c.id for c in load_suite(repo / "suites" / "tiny-full.yaml").cells()}
    assert {c.name: c.id for c in load_suite(write(tmp_path, anchored)).cells()} == original


def test_limits_leave_room_for_real_suites(tmp_path):
    """Just inside each limit the loader does not complain (what remains are ordinary schema errors, if any)."""
    # a file of exactly MAX_BYTES: a valid suite padded with a comment
    padded = VALID + "#" * (MAX_BYTES - len(VALID) - 1) + "\n"
    assert len(padded.encode()) == MAX_BYTES
    assert len(load_suite(write(tmp_path, padded)).cells()) == 2
    # nesting to MAX_DEPTH (the root mapping is level 1) reaches the schema, which rejects the type
    nested = VALID.replace("name: demo", "name: demo\ndescription: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1))
    with pytest.raises(SuiteError) as exc:
        load_suite(write(tmp_path, nested))
    assert "description: Input should be a valid string" in exc.value.render()
    # a few hundred aliases of a shared mapping are fine
    shared = VALID.replace("  n: 8", "  n: 8\n  probe: &p {prompts: 4, samples: 2, every: 1}")
    shared += "".join(f"x{i}: *p\n" for i in range(300))
    with pytest.raises(SuiteError) as exc:
        load_suite(write(tmp_path, shared))
    assert "x0: unknown key 'x0'" in exc.value.render() and "YAML nodes" not in exc.value.render()


CLI_CASES = [
    "billion laughs",
    "deep flow sequences",
    "deep block sequences",
    "file over the size cap",
    "binary garbage",
]


@pytest.mark.parametrize("case", CLI_CASES)
def test_hostile_suite_through_the_cli_exits_2_without_traceback(repo, tmp_path, case):
    _, content, line, _, fragment = next(h for h in HOSTILE if h[0] == case)
    suite = write(tmp_path, content)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(repo)}
    for argv in (["validate", str(suite)], ["run", str(suite), "--out", str(out)]):
        proc = subprocess.run(
            [sys.executable, "-m", "esbench.cli", *argv], capture_output=True, text=True, timeout=60, cwd=repo, env=env
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert f"{suite}:{line}: " in proc.stderr and fragment in proc.stderr, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert len(proc.stderr) < 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite.yaml"], "a refused suite writes nothing"


def test_a_merge_key_may_be_overridden_but_a_key_written_twice_is_still_an_error(repo, tmp_path):
    """YAML's merge rule: an explicit key overrides the one merged from an anchor (suites/paper-population.yaml
    varies N this way). A key written twice in one mapping is still refused, with its line."""
    text = (repo / "suites" / "tiny-full.yaml").read_text()
    bf16 = text[text.index("  es-bf16:") : text.index("  es-grpo:")]
    anchored = text.replace("  es:  ", "  es: &es", 1).replace(
        bf16, "  es-bf16: {<<: *es, precision: paper-bf16, population: 4}\n"
    )
    cells = {c.labels["method"]: c for c in load_suite(write(tmp_path, anchored)).cells()}
    assert cells["es-bf16"].spec["method"]["config"]["population"] == 4
    assert cells["es"].spec["method"]["config"]["population"] != 4
    twice = anchored.replace("population: 4}", "population: 4, population: 6}")
    with pytest.raises(SuiteError, match="duplicate key 'population'"):
        load_suite(write(tmp_path, twice))
