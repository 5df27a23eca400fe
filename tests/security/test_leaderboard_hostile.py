"""Hostile submissions against `esbench leaderboard verify` and `build` (issue 22): each class is refused with a reason,
quickly, without a traceback, and never takes the board down for the other submissions.

The submissions are copies of the leaderboard tests' genuine one (built once per session, shared with
tests/leaderboard), corrupted in tmp_path.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "leaderboard"))
from lb_helpers import cells, edit_json, genuine_once, rehash, tampered_copy  # noqa: E402

DEADLINE_S = 60  # a refused file is refused at once; a hang or an unbounded read would run into this
HOSTILE = "rs[/bold][red]\x1b[31m\u202eevil\u2066<script>alert(1)</script>|`x`$\\frac{"


@pytest.fixture(scope="module")
def genuine(tmp_path_factory, tiny_model_dir):
    return genuine_once(tmp_path_factory)


@pytest.fixture
def tampered(genuine, tmp_path):
    return tampered_copy(genuine, tmp_path)


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # /dev/zero read without bound hits this, not the host


def cli(*args: str, timeout: float = DEADLINE_S) -> tuple[int, str, float]:
    """`esbench ARGS` in a subprocess under a deadline and a memory cap: (exit code, stdout + stderr, seconds)."""
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "esbench.cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"esbench {' '.join(args)} still running after {timeout} s (a hang)")
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0


def verify_cli(root: Path, sub: Path) -> str:
    """`leaderboard verify` must reject: exit 1, with reasons, in time, without a traceback. Returns its output."""
    code, out, took = cli("leaderboard", "verify", str(sub), "--root", str(root))
    assert code == 1, out
    assert "REJECTED" in out and "Traceback" not in out, out
    assert took < DEADLINE_S
    return out


def record_path(sub: Path, name: str = "tiny/arith/es/b2/s0") -> Path:
    return cells(sub)[name] / "record.json"


# --- special files: FIFOs and links to /dev/zero --------------------------------------------------------------

TARGETS = {
    "manifest": "MANIFEST.json",
    "submission": "submission.json",
    "record": "CELL/record.json",
    "cell-spec": "CELL/cell.json",
    "samples": "CELL/samples/tiny_arith.jsonl",
    "train-log": "CELL/train.jsonl",
    "events": "CELL/events.jsonl",  # not a file of a submission at all
}


@pytest.mark.parametrize("kind", ["fifo", "link-to-dev-zero"])
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_special_file_as_a_submission_file_is_refused_quickly(tampered, target, kind):
    root, sub = tampered
    cell = cells(sub)["tiny/arith/es/b2/s0"].relative_to(sub).as_posix()
    rel = TARGETS[target].replace("CELL", cell)
    path = sub / rel
    if path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    out = verify_cli(root, sub)
    why = "not a regular file" if kind == "fifo" else "symbolic links are not allowed"
    assert f"{rel}: {why}" in out, out


def test_build_with_a_fifo_in_a_submission_still_builds(tampered):
    root, sub = tampered
    other = root / "submissions" / "fifo"
    shutil.copytree(sub, other)
    c = cells(other)
    (c["tiny/-/base/b0/s0"] / "record.json").unlink()
    os.mkfifo(c["tiny/-/base/b0/s0"] / "record.json")
    (c["tiny/arith/es/b2/s1"] / "train.jsonl").unlink()
    (c["tiny/arith/es/b2/s1"] / "train.jsonl").symlink_to("/dev/zero")
    code, out, _ = cli("leaderboard", "build", "--root", str(root), timeout=300)
    assert code == 1 and "Traceback" not in out, out
    assert "1 accepted, 1 rejected" in out
    assert "skipped fifo" in out  # one stderr line per submission left off the board
    md = (root / "README.md").read_text()
    assert "## Results: submission `genuine`" in md and "**fifo**" in md


# --- records that are not objects: never dropped silently, never an empty ACCEPTED --------------------------------


def test_a_null_record_rejects_the_submission(tampered):
    root, sub = tampered
    record_path(sub).write_text("null")
    rehash(sub)
    out = verify_cli(root, sub)
    assert "record.json: holds null, not an object" in out


def test_every_record_null_is_never_accepted_with_zero_cells(tampered):
    root, sub = tampered
    for d in cells(sub).values():
        (d / "record.json").write_text("null")
        (d / "cell.json").write_text("null")
    rehash(sub)
    out = verify_cli(root, sub)
    assert "ACCEPTED" not in out and "0 cells verified" not in out
    assert out.count("not an object") >= 6


# --- strict JSON: NaN, Infinity, overflow, duplicate keys, deep nesting ---------------------------------------------


@pytest.mark.parametrize(
    "text,why",
    [
        ('"analyses": NaN', "NaN is not a JSON number"),
        ('"analyses": -Infinity', "-Infinity is not a JSON number"),
        ('"analyses": 1e999', "overflows a float"),
        ('"analyses": ' + "[" * 200 + "]" * 200, "nested deeper than"),
        ('"schema": "esbench.record/0"', "duplicate key 'schema'"),
    ],
    ids=["nan", "infinity", "overflow", "deep", "duplicate-key"],
)
def test_non_strict_json_in_a_record_is_refused(tampered, text, why):
    """Unverified fields (`analyses`) included: a NaN there was accepted and then broke the page's JSON."""
    root, sub = tampered
    path = record_path(sub)
    body = path.read_text().rstrip()
    assert body.endswith("}")
    path.write_text(body[:-1] + ", " + text + "}")
    rehash(sub)
    out = verify_cli(root, sub)
    assert why in out and "record.json" in out, out


def test_deeply_nested_submission_json_is_a_reason_not_a_crash(tampered):
    root, sub = tampered
    (sub / "submission.json").write_text("[" * 100_000 + "]" * 100_000)
    rehash(sub)
    out = verify_cli(root, sub)
    assert "submission.json: nested deeper than" in out


# --- wrongly typed fields: refused by name (the models of esbench.records), never a traceback ------------------------


def test_wrongly_typed_fields_are_refused_by_name_without_a_traceback(tampered):
    """A record field, a sample row and a training-log row of the wrong type, in three cells: each is a reason that
    names the file and the field (pydantic's loc), and the submission is rejected without a traceback."""
    import hashlib

    root, sub = tampered
    c = cells(sub)
    es0, es1, base = c["tiny/arith/es/b2/s0"], c["tiny/arith/es/b2/s1"], c["tiny/-/base/b0/s0"]
    edit_json(es0 / "record.json", lambda r: r["budget_used"].update(rollouts=[HOSTILE]))
    log = es1 / "train.jsonl"
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    rows[-1]["reward_mean"] = {"x": 1}
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = base / "samples" / "tiny_reverse.jsonl"
    lines = samples.read_text().splitlines()
    first = json.loads(lines[0])
    first["resps"][0] = 7
    lines[0] = json.dumps(first)
    samples.write_text("\n".join(lines) + "\n")
    digest = hashlib.sha256(samples.read_bytes()).hexdigest()
    edit_json(base / "record.json", lambda r: r["samples_sha256"].update({samples.name: digest}))
    rehash(sub)
    out = verify_cli(root, sub)
    assert f"cells/{es0.name}/record.json: budget_used.rollouts: Input should be a valid integer" in out, out
    assert f"cells/{es1.name}/train.jsonl: row {len(rows)}: reward_mean: Input should be a valid number" in out, out
    assert f"cells/{base.name}/samples/tiny_reverse.jsonl:1: resps.0: Input should be a valid string (got 7)" in out


# --- the first failed hash stops the work ---------------------------------------------------------------------------


@pytest.fixture
def verifier_calls(monkeypatch):
    """How many responses the task verifiers were run on (the expensive part, and MBPP's runs code)."""
    from esbench.tasks import TaskDef

    calls = []
    original = TaskDef.verify

    def counting(self, response, gold):
        calls.append(self.name)
        return original(self, response, gold)

    monkeypatch.setattr(TaskDef, "verify", counting)
    return calls


def test_a_manifest_hash_failure_stops_the_work(tampered, verifier_calls):
    from esbench.leaderboard.verify import verify

    root, sub = tampered
    edit_json(record_path(sub), lambda r: r["metrics"]["tiny_arith"].update({"pass@1": 0.5}))
    edit_json(record_path(sub, "tiny/-/base/b0/s1"), lambda r: r["metrics"]["tiny_arith"].update({"pass@1": 0.5}))
    report = verify(sub, root)
    assert not report.ok
    assert sum("SHA-256 does not match" in r for r in report.reasons) == 1  # the first one ends it
    assert not any("edited metric" in r for r in report.reasons)
    assert verifier_calls == []  # nothing recomputed


def test_a_samples_hash_failure_stops_the_work(tampered, verifier_calls):
    """The manifest re-made, but the samples no longer match the record's own hashes: no verifier runs."""
    from esbench.leaderboard.verify import verify

    root, sub = tampered
    first = sorted(cells(sub).values())[0]
    for d in (first, sorted(cells(sub).values())[-1]):
        path = d / "samples" / "tiny_arith.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        rows[0]["resps"][0] = "#### " + rows[0]["doc"]["answer"]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rehash(sub)
    report = verify(sub, root)
    assert sum("edited sample" in r for r in report.reasons) == 1, report.reasons
    assert verifier_calls == []


# --- copies: the same evidence under another name ------------------------------------------------------------------


def _copy_as(root: Path, sub: Path, name: str, reformat: bool = False) -> Path:
    """A whole submission copied under a new name, made self-consistent (name, manifest). `reformat`: its samples
    re-serialised (other bytes, same responses) and re-bound in the records, so file hashes differ too."""
    dest = root / "submissions" / name
    shutil.copytree(sub, dest)
    edit_json(dest / "submission.json", lambda s: s.update(name=name))
    if reformat:
        import hashlib

        for d in cells(dest).values():
            bound = {}
            for f in sorted((d / "samples").glob("*.jsonl")):
                rows = [json.loads(x) for x in f.read_text().splitlines()][::-1]
                f.write_text("".join(json.dumps(r, separators=(",", ":"), sort_keys=True) + "\n" for r in rows))
                bound[f.name] = hashlib.sha256(f.read_bytes()).hexdigest()
            edit_json(d / "record.json", lambda r, bound=bound: r.update(samples_sha256=bound))
    rehash(dest)
    return dest


def test_a_copied_submission_is_rejected_whatever_its_name(tampered):
    root, sub = tampered
    code, out, _ = cli("leaderboard", "build", "--root", str(root), timeout=300)  # the original on the board
    assert code == 0, out
    plain = _copy_as(root, sub, "genuine-copy")
    reformatted = _copy_as(root, sub, "another-name", reformat=True)
    for copy in (plain, reformatted):
        out = verify_cli(root, copy)
        assert "copied evidence" in out and "'genuine'" in out, out
    code, out, _ = cli("leaderboard", "verify", str(sub), "--root", str(root))
    assert code == 0 and "ACCEPTED" in out, out  # the copy never pushes the original off
    code, out, _ = cli("leaderboard", "build", "--root", str(root), timeout=300)
    assert "1 accepted, 2 rejected" in out, out
    md = (root / "README.md").read_text()
    assert md.count("## Results: submission") == 1 and "## Results: submission `genuine`" in md


def test_two_new_copies_are_never_listed_twice(tampered):
    """Neither on the board yet: neither is accepted (so a copy can never take the original's place)."""
    from esbench.leaderboard.board import build_board
    from esbench.leaderboard.release import load_release

    root, sub = tampered
    _copy_as(root, sub, "twin")
    board = build_board(root, load_release(root))
    assert board.accepted == []
    assert all(any("copied evidence" in r for r in rep.reasons) for rep in board.rejected)


# --- names: terminal, Markdown and HTML -----------------------------------------------------------------------------


def test_escaping_helpers_neutralise_each_class():
    from esbench.leaderboard.escape import for_html, for_markdown, for_terminal

    for out in (for_terminal(HOSTILE), for_markdown(HOSTILE), for_html(HOSTILE)):
        assert "\x1b" not in out and "\u202e" not in out and "\u2066" not in out
        assert "\\x1b" in out  # shown, not acted on
    assert "\\[/bold]" in for_terminal(HOSTILE)  # rich markup escaped
    md = for_markdown(HOSTILE)
    assert "<script>" not in md and "&lt;script&gt;" in md and "\\|" in md and "\\[" in md and "\\`" in md
    assert "|" not in md.replace("\\|", "")
    html_text = for_html(HOSTILE)
    assert "<script>" not in html_text and "&lt;script&gt;" in html_text


def test_names_reach_the_terminal_escaped(tampered):
    root, sub = tampered
    hostile = root / "submissions" / HOSTILE.replace("/", "_")
    sub.rename(hostile)
    out = verify_cli(root, hostile)
    assert "\x1b" not in out and "\u202e" not in out and "\u2066" not in out
    assert "\\x1b" in out


def _relabel_plugin(sub: Path, method: str) -> None:
    """The plug-in's method label (free text: only release method names are reserved) set to `method` everywhere
    it is stated, consistently, so the submission still verifies and its label reaches every rendering."""
    from esbench.spec import Cell

    names = {}
    for name, d in cells(sub).items():
        if "/random-search/" not in name:
            continue
        record = json.loads((d / "record.json").read_text())
        record["cell"]["labels"]["method"] = method
        record["cell"]["name"] = Cell(record["cell"]["spec"], record["cell"]["labels"]).name
        names[record["cell"]["id"]] = record["cell"]["name"]
        (d / "record.json").write_text(json.dumps(record))
        (d / "cell.json").write_text(json.dumps(record["cell"]))

    def fix(s):
        for c in s["cells"]:
            if c["id"] in names:
                c.update(name=names[c["id"]], method=method)

    edit_json(sub / "submission.json", fix)
    rehash(sub)


def test_build_escapes_names_and_survives_hostile_submissions(tampered):
    """One board: an accepted submission whose plug-in is named with markup, a rejected one in a folder named with
    markup and control codes, and one nested too deep. The board is built for the accepted one, the others are
    reported, and no name is written raw to the terminal, the Markdown or the page."""
    from esbench.leaderboard.verify import verify

    root, sub = tampered
    _relabel_plugin(sub, HOSTILE)
    assert verify(sub, root, peers={}).ok
    named = root / "submissions" / HOSTILE.replace("/", "_")
    shutil.copytree(sub, named)
    deep = root / "submissions" / "deep"
    shutil.copytree(sub, deep)
    edit_json(deep / "submission.json", lambda s: s.update(name="deep"))
    (cells(deep)["tiny/-/base/b0/s0"] / "record.json").write_text("[" * 50_000 + "]" * 50_000)
    rehash(deep)
    code, out, _ = cli("leaderboard", "build", "--root", str(root), timeout=300)
    assert code == 1 and "Traceback" not in out, out
    assert "1 accepted, 2 rejected" in out, out
    assert "skipped deep" in out
    assert "\x1b" not in out and "\u202e" not in out
    md = (root / "README.md").read_text()
    page = (root / "site" / "index.html").read_text()
    start = page.index('id="board-data">') + len('id="board-data">')
    data = page[start : page.index("</script>", start)]
    json.loads(data)  # the drawer's data still parses (no NaN), and no value in it ends or comments out the script
    assert "</" not in data and "<!--" not in data and "\x1b" not in data
    for text in (md, page.replace(data, "")):
        assert "<script>alert" not in text and "\x1b" not in text and "\u202e" not in text
    row = next(x for x in md.splitlines() if x.startswith("| tiny | rs"))
    assert row.count(" | ") == next(x for x in md.splitlines() if x.startswith("| tiny | base |")).count(" | ")
    assert "&lt;script&gt;" in page
    assert sorted(p.name for p in (root / "site" / "plots").iterdir()) == ["genuine"]


# --- provenance: environment overrides and the sandbox mode ---------------------------------------------------------


def test_environment_overrides_reject_a_record(tampered):
    root, sub = tampered
    edit_json(record_path(sub), lambda r: r["provenance"].update(env_overrides={"ESBENCH_DATASETS_DIR": "/mine"}))
    rehash(sub)
    out = verify_cli(root, sub)
    assert "provenance.env_overrides" in out and "ESBENCH_DATASETS_DIR" in out


def test_empty_environment_overrides_are_accepted(tampered):
    from esbench.leaderboard.verify import verify

    root, sub = tampered
    edit_json(record_path(sub), lambda r: r["provenance"].update(env_overrides={}))
    rehash(sub)
    assert verify(sub, root).ok


def test_code_graded_cells_need_the_confined_sandbox(tampered, monkeypatch, capsys):
    """Tiny tasks run no code; making their verifier count as code-executing shows the rule on a real submission."""
    from esbench import cli as esbench_cli
    from esbench.leaderboard import verify_cell
    from esbench.tasks import TASKS

    assert "mbpp" in verify_cell.CODE_VERIFIERS and TASKS["mbpp"].verifier == "mbpp"
    monkeypatch.setattr(verify_cell, "CODE_VERIFIERS", {TASKS["tiny_reverse"].verifier})
    root, sub = tampered
    verify = ["leaderboard", "verify", str(sub), "--root", str(root)]
    assert esbench_cli.main(verify) == 0, capsys.readouterr()  # its records were made in the confined mode
    capsys.readouterr()
    for d in cells(sub).values():
        if "/base/" in json.loads((d / "cell.json").read_text())["name"]:
            edit_json(d / "record.json", lambda r: r["provenance"].update(sandbox={"mode": "python"}))
        else:  # a record that does not say how it graded
            edit_json(d / "record.json", lambda r: r["provenance"].pop("sandbox", None))
    rehash(sub)
    code = esbench_cli.main(verify)
    err = capsys.readouterr().err
    assert code == 1 and err.count("provenance.sandbox.mode is 'python'") == 2, err
    assert err.count("provenance.sandbox.mode is None") == 4, err
    assert "accepts verdicts only from the confined mode" in err
