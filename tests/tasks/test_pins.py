"""Dataset pins (issue 23): every hub task the paper suites use is read at a pinned commit, or not from the hub at
all. AIME 2024 comes from math-ai/aime24 (the collection of the hard setting's AIME25 and AMC23); Countdown has no
commit any local or public source names, so the loader reads the commit its default branch resolves to (never the
branch by name) and records it; where that cannot be resolved it says how to fix it; a local mirror still loads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from esbench.spec import load_suite
from esbench.tasks import LM_EVAL_DIR, get_task, hub

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "datasets"
PAPER_SUITES = sorted(p.stem for p in (REPO / "suites").glob("paper-*.yaml"))


def _hub_tasks(suite: str) -> set[str]:
    s = load_suite(REPO / "suites" / f"{suite}.yaml")
    used = {d.task for d in s.spec.datasets.values()} | set(s.spec.eval.tasks)
    if s.spec.eval.probe is not None:
        used.add(s.spec.eval.probe.task)
    return {t for t in used if (get_task(t).source or "").startswith("hub:")}


def _offline(monkeypatch) -> list:
    """No mirror, and a `datasets.load_dataset` that records its call and fails as the offline hub would."""
    calls = []

    def fake(path, name=None, revision=None, split=None):
        calls.append((path, name, revision, split))
        raise ConnectionError("offline")

    monkeypatch.delenv(hub.ENV_DIR, raising=False)
    monkeypatch.setattr("datasets.load_dataset", fake)
    return calls


def _no_snapshot(monkeypatch) -> None:
    def fail(repo_id, repo_type=None, **kw):
        raise ConnectionError("offline and not cached")

    monkeypatch.setattr("huggingface_hub.snapshot_download", fail)


@pytest.mark.parametrize("suite", PAPER_SUITES)
def test_every_hub_task_of_a_paper_suite_is_pinned_or_resolved_to_a_commit(suite, monkeypatch):
    calls = _offline(monkeypatch)
    _no_snapshot(monkeypatch)
    for name in sorted(_hub_tasks(suite)):
        src = hub.SOURCES[get_task(name).source.removeprefix("hub:")]
        split = next(iter(src.splits))
        if name in hub.UNPINNED:
            with pytest.raises(hub.UnpinnedSource, match=re.escape(src.path)):
                get_task(name).rows(split)
        else:
            assert re.fullmatch(r"[0-9a-f]{40}", src.revision), f"{suite}: {name} is not pinned"
            with pytest.raises(ConnectionError):
                get_task(name).rows(split)
    assert all(rev is not None and re.fullmatch(r"[0-9a-f]{40}", rev) for _, _, rev, _ in calls)  # never a branch


def test_an_unpinned_source_loads_the_commit_its_branch_points_at_and_records_it(monkeypatch):
    """Countdown has no known commit: it is read at the commit the default branch resolves to (never the moving
    branch name), and the data provenance names that commit."""
    assert "countdown" in hub.UNPINNED
    sha = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setattr(
        "huggingface_hub.snapshot_download", lambda repo_id, repo_type=None, **kw: f"/cache/{repo_id}/snapshots/{sha}"
    )
    monkeypatch.delenv(hub.ENV_DIR, raising=False)
    monkeypatch.setattr(hub, "RESOLVED", {})
    mirror = FIXTURES / "HuggingFaceTB" / "Countdown-Task-GOLD"
    calls = []
    import datasets

    real = datasets.load_dataset

    def fake(path, name=None, revision=None, split=None):
        calls.append((path, name, revision, split))
        return real(str(mirror / (name or "")), split=split)

    monkeypatch.setattr("datasets.load_dataset", fake)
    with pytest.warns(UserWarning, match=f"not pinned: loading its default branch at commit {sha}"):
        rows = get_task("countdown").rows("test")
    assert rows and calls == [("HuggingFaceTB/Countdown-Task-GOLD", "test", sha, "test")]
    prov = get_task("countdown").provenance("test")
    assert prov["revision"] is None and prov["resolved_revision"] == sha


def test_an_unpinned_source_that_cannot_be_resolved_stops_with_how_to_fix_it(monkeypatch):
    calls = _offline(monkeypatch)
    _no_snapshot(monkeypatch)
    with pytest.raises(hub.UnpinnedSource) as e:
        get_task("countdown").rows("test")
    assert calls == []  # the hub's default branch is never loaded by name
    msg = str(e.value)
    assert "HuggingFaceTB/Countdown-Task-GOLD has no pinned revision" in msg and "esbench prefetch" in msg
    assert hub.ENV_DIR in msg and "TODO" not in msg
    # a local mirror still loads (the same call on the folder), and records no resolved commit
    monkeypatch.undo()  # the real `datasets.load_dataset` again
    monkeypatch.setenv(hub.ENV_DIR, str(FIXTURES))
    assert get_task("countdown").rows("test")
    assert "resolved_revision" not in get_task("countdown").provenance("test")


def test_aime24_is_math_ai_at_its_documented_commit(monkeypatch):
    src = hub.SOURCES["aime24"]
    assert (src.path, src.name, src.revision, src.splits) == (
        "math-ai/aime24",
        None,
        "83a7f387baaa524a8bda0022eac0541582297103",
        {"test": "test"},
    )
    assert get_task("aime24").version >= 2  # the rows changed source (2): records of version 1 do not verify
    calls = _offline(monkeypatch)
    with pytest.raises(ConnectionError):
        get_task("aime24").rows("test")
    assert calls == [("math-ai/aime24", None, src.revision, "test")]
    # the lm-eval config names the same source and commit, and says the commit is unverified
    head = (LM_EVAL_DIR / "aime24.yaml").read_text()
    assert head.startswith(f"# math-ai/aime24 at {src.revision}, split test") and "not verified" in head
    assert "Revision: not pinned" in (LM_EVAL_DIR / "countdown.yaml").read_text()


def test_aime24_gold_is_the_boxed_solution(monkeypatch):
    """math-ai/aime24 rows carry the answer as `\\boxed{N}` in `solution`: the box's content is the gold."""
    monkeypatch.setenv(hub.ENV_DIR, str(FIXTURES))
    task = get_task("aime24")
    rows = task.rows("test")
    assert [(r["id"], r["answer"]) for r in rows] == [("60", "24"), ("61", "1")]
    assert task.verify("so the remainder is \\boxed{24}.", rows[0]["answer"]).correct
    assert not task.verify("\\boxed{1024}", rows[0]["answer"]).correct
    assert hub._boxed_solution({"id": 3, "problem": " p ", "solution": "33"}, 0)["answer"] == "33"  # a plain value


def test_the_next_release_pins_the_new_aime24_source():
    """What `write_release` freezes for aime24 differs from v1.4's pin: a new release is needed for the change."""
    import json

    from esbench.leaderboard.release import task_source

    v14 = json.loads((REPO / "leaderboard" / "releases" / "v1.4" / "release.json").read_text())["tasks"]["aime24"]
    assert v14["source"]["hub_id"] == "HuggingFaceH4/aime_2024" and v14["version"] == 1
    assert task_source(get_task("aime24")) == {
        "hub_id": "math-ai/aime24",
        "config": None,
        "revision": "83a7f387baaa524a8bda0022eac0541582297103",
    }
