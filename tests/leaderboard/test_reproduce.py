"""`esbench leaderboard reproduce`: a genuine cell re-runs bit-identically; a forgery that `verify` cannot see
(outputs re-scored and the record rewritten to match, or one run passed off as another seed) fails the re-run."""

from __future__ import annotations

import json

from lb_helpers import cells, copy_as_seed, edit_json, esbench, reforge, rehash
from run_helpers import fake_docker

from esbench.leaderboard.release import load_release
from esbench.leaderboard.reproduce import reproduce
from esbench.leaderboard.verify import verify


def test_genuine_cells_reproduce_bit_identically(genuine, tmp_path):
    root, sub, _, _ = genuine
    rule = load_release(root)["rule"]
    checks = reproduce(sub, tmp_path / "rerun", rule, only=["*/base/b0/s0", "*/es/b2/s1"], exact=True)
    assert sorted(c.name for c in checks) == ["tiny/-/base/b0/s0", "tiny/arith/es/b2/s1"]
    for c in checks:
        assert c.status == "identical" and c.weights_identical and c.samples_identical, c.to_json()
        assert all(m["status"] == "reproduced" and m["rerun"] == m["submitted"] for m in c.metrics)


def test_a_genuine_cell_reruns_bit_identically_in_the_image(genuine, tmp_path, monkeypatch):
    """`esbench leaderboard reproduce --runtime docker`: a base cell of a submission made on this machine, re-run
    through a (fake) docker binary, is bit-identical, and the record names the digest the runtime reported. (The
    committed tiny-random-search submission is not used: its embedded model was built on another CPU, whose kernels
    build other weights, so only the rule applies to it here; see the next test.)"""
    from esbench.cli import main

    root, sub, _, env = genuine
    image = "ghcr.io/esbench/esbench:cpu"
    log = fake_docker(tmp_path, monkeypatch, image, "d")
    args = ["leaderboard", "reproduce", str(sub), "--only", "*/base/b0/s0", "--exact", "--out", str(tmp_path / "o")]
    assert main([*args, "--runtime", "docker", "--image", image, "--root", str(root)]) == 0
    assert any(line.startswith("run --rm") for line in log.read_text().splitlines())
    (record,) = (tmp_path / "o").glob("*/record.json")
    assert json.loads(record.read_text())["provenance"]["container_image_digest"] == "sha256:" + "d" * 64


def test_a_rerun_from_other_starting_weights_says_so(genuine, tmp_path):
    """A re-run whose model was built differently (another CPU builds other tiny weights) is told apart from a
    re-run of the same weights that diverged: the reason names both starting states."""
    from esbench.leaderboard.reproduce import compare_records
    from esbench.records import Record

    _, sub, _, _ = genuine
    submitted = json.loads((cells(sub)["tiny/-/base/b0/s0"] / "record.json").read_text())
    rerun = json.loads(json.dumps(submitted))
    rule = load_release(sub.parent.parent)["rule"]
    assert compare_records(Record.model_validate(submitted), Record.model_validate(rerun), rule).reasons == []
    rerun["provenance"]["model"]["state_sha256"] = "f" * 64
    (reason,) = compare_records(Record.model_validate(submitted), Record.model_validate(rerun), rule).reasons
    assert "started from other weights" in reason and "ffffffffffff" in reason


def test_outputs_forged_toward_the_gold_fail_the_rerun(tampered, tmp_path):
    """Responses rewritten to the gold answer, re-scored, the record and hashes rewritten: verify accepts it."""
    root, sub = tampered
    cell = cells(sub)["tiny/arith/es/b2/s0"]
    path = cell / "samples" / "tiny_arith.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    for r in rows:
        r["resps"] = [f"#### {r['doc']['answer']}" if i % 4 else x for i, x in enumerate(r["resps"])]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reforge(cell)
    rehash(sub)
    assert verify(sub, root).ok, "premise: a consistent forgery of outputs passes verify"

    (check,) = reproduce(sub, tmp_path / "rerun", load_release(root)["rule"], only=["*/es/b2/s0"])
    assert check.status == "failed" and check.weights_identical and not check.samples_identical
    pass1 = next(m for m in check.metrics if m["task"] == "tiny_arith" and m["metric"] == "pass@1")
    assert pass1["submitted"] >= pass1["rerun"] + 40 and pass1["status"] == "fail"
    assert any("tiny_arith pass@1" in r for r in check.reasons)


def test_one_run_passed_off_as_another_seed_fails_an_exact_rerun(tampered, tmp_path):
    """Seed 0's ES cell copied as seed 2 with one response changed and an invented weights hash: verify accepts
    it; its numbers are statistically plausible, so only the exact re-run (CI on one platform) catches it."""
    root, sub = tampered
    dst = copy_as_seed(sub, "tiny/arith/es/b2/s0", 2, final_weights_sha256="ab" * 32)
    rows = (dst / "samples" / "tiny_reverse.jsonl").read_text().splitlines()
    first = json.loads(rows[0])
    first["resps"][0] += " "
    rows[0] = json.dumps(first)
    (dst / "samples" / "tiny_reverse.jsonl").write_text("\n".join(rows) + "\n")
    reforge(dst)
    rehash(sub)
    assert verify(sub, root).ok, "premise: a near-copy under a new seed passes verify"

    out = tmp_path / "rerun"
    proc = esbench(
        "leaderboard",
        "reproduce",
        str(sub),
        "--root",
        str(root),
        "--only",
        "*/es/b2/s2",
        "--exact",
        "--out",
        str(out),
        "--json",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (check,) = json.loads(proc.stdout)
    assert check["status"] == "failed" and not check["weights_identical"] and not check["samples_identical"]
    assert any("not bit-identical: final weights and samples differ" in r for r in check["reasons"])


def test_a_submission_that_does_not_verify_is_never_executed(tampered, tmp_path):
    root, sub = tampered
    edit_json(cells(sub)["tiny/-/base/b0/s0"] / "record.json", lambda r: r.update(release="v0.1"))
    rehash(sub)
    out = tmp_path / "rerun"
    proc = esbench("leaderboard", "reproduce", str(sub), "--root", str(root), "--out", str(out))
    assert proc.returncode == 1 and "record from another release" in proc.stderr
    assert not out.exists()
