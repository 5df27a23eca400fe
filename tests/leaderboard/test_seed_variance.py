"""The seed-variance term (ADR 0011): a single-seed run's band adds the seed SD the release carries, because its
per-problem bootstrap SE cannot see training-seed variance. Constructed numbers with known verdicts."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from esbench.leaderboard import board as lb
from esbench.leaderboard.compare import Estimate, compare, estimate, pooled_seed_sd, seed_sd_for
from esbench.leaderboard.release import CURRENT, DEFAULT_RULE, load_release
from esbench.leaderboard.render_text import rule_text
from esbench.leaderboard.verify import CellResult, Report

ROOT = Path(__file__).resolve().parents[2] / "leaderboard"
RELEASE = load_release(ROOT, "v1.3")  # frozen before the seed term: no `seed_sd_pp` key
OLD_RULE = RELEASE["rule"]
FROZEN = json.loads((RELEASE["dir"] / RELEASE["cells"]).read_text())

ONE_SEED = Estimate(76.2, 0.4, None, 1, "bootstrap")  # 3 pp above 73.2: band max(1, 1.96 * 0.4) = 1 -> fail


def test_a_seed_sd_that_explains_the_gap_turns_fail_into_reproduced():
    assert compare(ONE_SEED, 73.2, "pass@1", DEFAULT_RULE).status == "fail"
    v = compare(ONE_SEED, 73.2, "pass@1", DEFAULT_RULE, seed_sd=1.6)
    assert v.status == "reproduced" and v.seed_sd == 1.6
    assert v.band == pytest.approx(1.96 * math.sqrt(0.4**2 + 1.6**2))
    assert compare(ONE_SEED, 73.2, "pass@1", DEFAULT_RULE, seed_sd=0.5).status == "fail"  # too small to explain it


def test_the_seed_sd_of_one_seed_not_the_se_of_a_mean():
    """s_seed enters as it is: dividing it by √k (the SE of a k-seed mean) would judge one seed as if it were k."""
    per_seed = [70.0, 73.0, 76.0]  # a reference run's seeds, pp
    s = pooled_seed_sd([per_seed])
    assert s == pytest.approx(3.0)  # ddof 1
    v = compare(Estimate(76.0, 0.0, None, 1, "bootstrap"), 73.0, "pass@1", DEFAULT_RULE, seed_sd=s)
    assert v.band == pytest.approx(1.96 * 3.0) and v.status == "reproduced"


@pytest.mark.parametrize(
    "se, se_ref, s_seed, df",
    list(itertools.product([0.0, 0.2, 1.0, 5.0], [0.0, 0.7], [0.0, 0.3, 1.6, 10.0], [None, 1, 4])),
)
def test_adding_the_seed_sd_never_shrinks_the_band(se, se_ref, s_seed, df):
    seeds = 1 if df is None else df + 1
    est = Estimate(70.0, se, df, seeds, "bootstrap" if df is None else "seeds")
    before = compare(est, 71.0, "pass@1", DEFAULT_RULE, se_ref)
    after = compare(est, 71.0, "pass@1", DEFAULT_RULE, se_ref, s_seed)
    assert after.band >= before.band and after.warn_band >= before.warn_band
    order = ["fail", "warn", "reproduced"]
    assert order.index(after.status) >= order.index(before.status)


def test_several_seeds_already_hold_the_seed_variance():
    """SE over seeds estimates the spread of the mean including training seeds: no second seed term."""
    est = estimate([0.74, 0.76, 0.78])
    assert est.seeds == 3
    plain = compare(est, 73.2, "pass@1", DEFAULT_RULE)
    assert compare(est, 73.2, "pass@1", DEFAULT_RULE, seed_sd=5.0) == plain


def test_a_missing_or_empty_estimate_is_the_old_rule_exactly():
    for rule in (OLD_RULE, DEFAULT_RULE, {**DEFAULT_RULE, "seed_sd_pp": {"pass@16": 3.0}}):
        s = seed_sd_for(rule, "pass@1", "gsm8k", "es")
        assert s is None
        assert compare(ONE_SEED, 73.2, "pass@1", rule, seed_sd=s) == compare(ONE_SEED, 73.2, "pass@1", OLD_RULE)


def test_lookup_goes_from_the_narrowest_key_to_the_metric():
    rule = {**DEFAULT_RULE, "seed_sd_pp": {"pass@1": 1.0, "gsm8k/pass@1": 2.0, "es/gsm8k/pass@1": 3.0}}
    assert seed_sd_for(rule, "pass@1", "gsm8k", "es") == 3.0
    assert seed_sd_for(rule, "pass@1", "gsm8k", "grpo") == 2.0
    assert seed_sd_for(rule, "pass@1", "aime24", "es") == 1.0
    assert seed_sd_for(rule, "pass@1") == 1.0
    assert seed_sd_for(rule, "pass@1", "gsm8k", "es", ref={"value": 73.2, "seed_sd": 0.4}) == 0.4  # the cell's own
    assert seed_sd_for(rule, "maj@16", "gsm8k", "es") is None
    with pytest.raises(ValueError):
        seed_sd_for({**DEFAULT_RULE, "seed_sd_pp": {"pass@1": -1.0}}, "pass@1")
    with pytest.raises(ValueError):
        compare(ONE_SEED, 73.2, "pass@1", DEFAULT_RULE, seed_sd=float("nan"))


def test_pooled_seed_sd():
    assert pooled_seed_sd([[1.0], []]) is None
    assert pooled_seed_sd([[1.0, 3.0], [5.0]]) == pytest.approx(math.sqrt(2.0))
    # (k-1)-weighted: s² = (1·2 + 2·4) / 3 for groups with variances 2 and 4
    assert pooled_seed_sd([[1.0, 3.0], [0.0, 2.0, 4.0]]) == pytest.approx(math.sqrt((2 + 8) / 3))


# ---------------------------------------------------------------------------------------------------------------
# on the board


def frozen_cell(method: str) -> dict:
    return next(
        c for c in FROZEN["paper-easy"] if c["labels"]["method"] == method and c["labels"]["model"] == "qwen2.5-1.5b"
    )


def fake(cell: dict, hits: int, seed: int = 42, problems: int = 1319) -> CellResult:
    cell = {**cell, "spec": {**cell["spec"], "seed": seed}}
    rec = {"cell": cell, "release": CURRENT, "provenance": {"git_commit": "abc", "model": {}}, "metrics": {}}
    r = CellResult(f"{cell['id']}-{seed}", rec, grid="release")
    r.recomputed["commonsense_qa"] = {"pass@1": hits / problems}
    r.per_problem["commonsense_qa"] = {"pass@1": [1.0] * hits + [0.0] * (problems - hits)}
    return r


def entries(report: Report, release: dict) -> dict[str, lb.Entry]:
    ref = json.loads((release["dir"] / "reference" / "paper_tables.json").read_text())["values"]
    expected = json.loads((release["dir"] / "reference" / "expected_results.json").read_text())
    grid = {lb._no_seed(c["spec"]) for s in ("paper-easy", "paper-hard") for c in FROZEN[s]}
    return {e.method: e for e in lb._entries(report, release, ref, expected, grid)}


@pytest.fixture
def report(tmp_path) -> Report:
    """ES on CSQA (Table 2: 60.7) at 52.7 with one seed; GRPO (Table 2: 55.4) at 51.4 over three seeds."""
    (tmp_path / "MANIFEST.json").write_text("{}")
    r = Report(tmp_path, CURRENT, submission={"name": "seeds", "suite": "paper-easy"})
    r.cells.append(fake(frozen_cell("es"), round(0.527 * 1319)))
    for seed, h in ((42, 0.50), (43, 0.514), (44, 0.528)):
        r.cells.append(fake(frozen_cell("grpo"), round(h * 1319), seed))
    return r


def test_board_applies_the_release_seed_sd_to_single_seed_entries_only(report):
    old = entries(report, RELEASE)
    es, grpo = old["es"].tasks["commonsense_qa"]["metrics"]["pass@1"], old["grpo"].tasks["commonsense_qa"]["metrics"]
    assert es["status"] == "fail" and "seed_sd" not in es
    rule = {**DEFAULT_RULE, "seed_sd_pp": {"commonsense_qa/pass@1": 4.0}}
    new = entries(report, {**RELEASE, "rule": rule})
    es2 = new["es"].tasks["commonsense_qa"]["metrics"]["pass@1"]
    assert es2["status"] == "reproduced" and es2["seed_sd"] == 4.0 and es2["band"] > es["band"]
    assert new["grpo"].tasks["commonsense_qa"]["metrics"] == grpo  # three seeds: unchanged


def test_a_release_without_the_new_keys_gives_exactly_the_old_verdicts(report):
    """Regression: every row of a release frozen before ADR 0011 is what the rule computed before it."""
    assert "seed_sd_pp" not in OLD_RULE and "artifact" not in OLD_RULE
    for e in entries(report, RELEASE).values():
        for t, td in e.tasks.items():
            assert "artifact" not in td
            for m, row in td["metrics"].items():
                if "ref" not in row:
                    continue
                assert set(row) == {
                    "mean",
                    "se",
                    "se_source",
                    "per_seed",
                    "ref",
                    "source",
                    "status",
                    "delta",
                    "band",
                } | {"warn_band"}
                cells = [c for c in report.cells if c.id in e.cells]
                est = estimate([c.recomputed[t][m] for c in cells], cells[0].per_problem[t][m])
                v = compare(est, row["ref"], m, OLD_RULE)  # the call as it was, no seed term
                assert (row["status"], row["band"], row["warn_band"], row["delta"]) == (
                    v.status,
                    v.band,
                    v.warn_band,
                    v.delta,
                )
    assert "s_seed" not in rule_text(OLD_RULE) and "Artifact rule" not in rule_text(OLD_RULE)


def test_seed_sd_estimates_from_multi_seed_entries(report):
    est = lb.seed_sd_estimates(list(entries(report, RELEASE).values()))
    assert list(est) == ["grpo/commonsense_qa/pass@1"]  # the single-seed ES entry says nothing about seeds
    per_seed = [100 * round(h * 1319) / 1319 for h in (0.50, 0.514, 0.528)]
    assert est["grpo/commonsense_qa/pass@1"] == pytest.approx(pooled_seed_sd([per_seed]))
    rule = {**DEFAULT_RULE, "seed_sd_pp": est}
    assert seed_sd_for(rule, "pass@1", "commonsense_qa", "grpo") == est["grpo/commonsense_qa/pass@1"]
