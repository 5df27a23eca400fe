"""The coverage view: every paper value of Tables 2-13 either carried by a verified submission (with its status) or
shown as the target, "awaiting reproduction". It appears only for a release whose paper map carries `coverage`;
the published releases v1.0 to v1.3 do not, and render exactly as before.

The coverage release here is v1.3 with that key and with the population-sweep and subtraction suites frozen into its
cells (as the next release will freeze them); the submissions are verified-looking cells, as in test_board.py.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from esbench.leaderboard import board as lb
from esbench.leaderboard.coverage import AWAITING, REPORTED, coverage
from esbench.leaderboard.release import CURRENT, load_release
from esbench.leaderboard.render import markdown, render
from esbench.leaderboard.render_html import page
from esbench.leaderboard.verify import CellResult, Report
from esbench.metrics.subtraction import PAPER_TABLE_13

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "leaderboard"
RELEASES = sorted(p.name for p in (ROOT / "releases").iterdir())
PUBLISHED = [r for r in RELEASES if "coverage" not in load_release(ROOT, r)["paper_map"]]  # frozen before coverage
COVERAGE = {"population": ["paper-population"], "subtraction": ["paper-subtraction"]}
N = 1319


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> dict:
    """Release v1.3 as the next release will look: the coverage key, and the two suites among its frozen cells."""
    from esbench.spec import load_suite

    root = tmp_path_factory.mktemp("cov") / "leaderboard"
    d = root / "releases" / CURRENT
    shutil.copytree(ROOT / "releases" / CURRENT, d)
    doc = json.loads((d / "release.json").read_text())
    doc["paper_map"]["coverage"] = COVERAGE
    (d / "release.json").write_text(json.dumps(doc))
    cells = json.loads((d / "cells.json").read_text())
    for suite in ("paper-population", "paper-subtraction"):
        cells[suite] = [c.to_json() for c in load_suite(REPO / "suites" / f"{suite}.yaml").cells()]
    (d / "cells.json").write_text(json.dumps(cells))
    return load_release(root, CURRENT)


def frozen_cell(release: dict, suite: str, method: str, model: str | None = None) -> dict:
    cells = json.loads((release["dir"] / release["cells"]).read_text())[suite]
    return copy.deepcopy(
        next(c for c in cells if c["labels"]["method"] == method and model in (None, c["labels"]["model"]))
    )


def fake_cell(cell: dict, outcomes: dict[str, dict[str, int]] | None = None, problems: int = N, **record) -> CellResult:
    rec = {"cell": cell, "release": CURRENT, "provenance": {"git_commit": "abc", "model": {}}, "metrics": {}, **record}
    result = CellResult(cell["id"], rec, grid="release")
    for task, per_metric in (outcomes or {}).items():
        result.recomputed[task] = {m: c / problems for m, c in per_metric.items()}
        result.per_problem[task] = {m: [1.0] * c + [0.0] * (problems - c) for m, c in per_metric.items()}
    return result


def train_log(report: Report, cell: CellResult, rewards: list[float]) -> None:
    """The cell's train.jsonl in the submission folder, one row per update (0-based, as the runner logs it)."""
    d = report.path / "cells" / cell.id
    d.mkdir(parents=True, exist_ok=True)
    (d / "train.jsonl").write_text(
        "".join(json.dumps({"update": u, "reward_mean": x}) + "\n" for u, x in enumerate(rewards))
    )


def board_of(release: dict, report: Report | None) -> lb.Board:
    ref = json.loads((release["dir"] / release["reference"]["paper"]).read_text())["values"]
    expected = json.loads((release["dir"] / release["reference"]["expected_results"]).read_text())
    frozen = json.loads((release["dir"] / release["cells"]).read_text())
    grid = {lb._no_seed(c["spec"]) for s in release["paper_map"]["suites"] for c in frozen.get(s, [])}
    entries = lb._entries(report, release, ref, expected, grid) if report else []
    return lb.Board(release, entries, [report] if report else [], [], ref, expected)


def section(md: str, heading: str) -> str:
    """The Markdown from `heading` to the next heading of the same or a higher level."""
    start = md.index(heading)
    level = heading.split(" ")[0]
    rest = md[start + len(heading) :]
    ends = [m.start() for m in re.finditer(rf"^#{{2,{len(level)}}} ", rest, re.M)]
    return heading + (rest[: ends[0]] if ends else rest)


def row(md: str, prefix: str) -> str:
    return next(x for x in md.splitlines() if x.startswith(prefix))


def covered(tables, table: int) -> list:
    return next(tc for tc in tables if tc.table == table).values


class Cells(HTMLParser):
    """(class, text, title) of every <td> inside the page's coverage section."""

    def __init__(self):
        super().__init__()
        self.cells: list[tuple[str, str, str]] = []
        self._td: dict | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "td":
            self._td = {**dict(attrs), "text": ""}

    def handle_data(self, data):
        if self._td is not None:
            self._td["text"] += data

    def handle_endtag(self, tag):
        if tag == "td" and self._td is not None:
            self.cells.append((self._td.get("class") or "", self._td["text"], self._td.get("title") or ""))
            self._td = None


def page_cells(html: str, table: int) -> list[tuple[str, str, str]]:
    """The value cells of paper table `table` in the page's folded coverage tables."""
    start = html.index(f"<details><summary>Table {table}: ")
    parser = Cells()
    parser.feed(html[start : html.index("</details>", start)])
    return [c for c in parser.cells if "txt" not in c[0] and c[1] != "—"]


# ---------------------------------------------------------------------------------------------------------------
# no submission: every paper value awaits reproduction, the paper's number its target


def test_with_no_submission_every_value_of_tables_6_and_13_awaits_reproduction(release, tmp_path):
    shutil.copytree(release["dir"], tmp_path / "releases" / CURRENT)
    board = lb.build_board(tmp_path, load_release(tmp_path, CURRENT))  # no submissions folder at all
    assert not board.entries
    tables = coverage(board)
    assert [tc.table for tc in tables] == list(range(2, 14))
    assert all(c.status == AWAITING for tc in tables for c in tc.values)
    ref = [v for v in board.reference if v["table"] == 6]
    assert len(ref) == 36 and len(covered(tables, 6)) == 36 and len(covered(tables, 13)) == 40

    md = markdown(board)
    t6 = section(md, "### Table 6: ")
    assert f"**{AWAITING}**: no verified submission carries these cells yet; the paper's 36 numbers" in t6
    assert "| model | update | N=8 | N=16 | N=32 | N=64 |" in t6
    assert "| Qwen2.5-0.5B-Instruct | 100 | 0.4782 | 0.5021 | 0.5100 | 0.5085 |" in t6
    assert "| Qwen2.5-3B-Instruct | 300 | 0.8901 | 0.9001 | 0.9004 | 0.9031 |" in t6
    for v in ref:  # every value of the reference, at its update and N
        cells = row(t6, f"| {v['model']} | {v['update']} |").split(" | ")
        assert cells[2 + [8, 16, 32, 64].index(v["population"])].rstrip(" |") == f"{v['value']:.4f}"
    t13 = section(md, "### Table 13: ")
    assert f"**{AWAITING}**" in t13 and "PAPER_TABLE_13" in t13
    assert "| σ | objective | Corr(X₊,X₀) | κ_base | Corr(X₊,X₋) | κ_pair |" in t13
    assert "| 1e-3 | reward-common | 0.2777 | 1.4445 | 0.1304 | 1.9870 |" in t13
    assert "| 3e-4 | reward-independent | -0.0303 | 1.6687 | 0.0532 | 2.4379 |" in t13
    assert len([x for x in t13.splitlines() if re.match(r"\| \de-\d \|", x)]) == len(PAPER_TABLE_13)
    assert "| 6 | Qwen2.5-0.5B-Instruct | ES | 12 | 0 | 0 | 0 | 0 | 12 |" in md
    assert "| 13 | Qwen2.5-1.5B-Instruct | Subtraction | 40 | 0 | 0 | 0 | 0 | 40 |" in md
    assert "| 2 | Qwen2.5-1.5B-Instruct | Base | 21 | 0 | 0 | 0 | 0 | 21 |" in md
    total = sum(len(tc.values) for tc in tables)
    assert f"Now: 0 reproduced, 0 warn, 0 fail, 0 reported, {total} {AWAITING}." in md
    # the tables not laid out in "Against the paper" get their targets here; the laid-out ones are not repeated
    assert [h for h in re.findall(r"^### Table (\d+):", md[md.index("## Coverage") :], re.M)] == [
        "4",
        "6",
        "10",
        "11",
        "12",
        "13",
    ]

    html = page(board, {})
    assert "<h2>Coverage of the paper</h2>" in html and "td.awaiting{" in html
    six = page_cells(html, 6)
    assert len(six) == 36 and all(cls == "awaiting" and AWAITING in title for cls, _, title in six)
    first = next(c for c in six if c[1] == "0.4782")
    assert "Table 6, Update 100, Qwen2.5-0.5B-Instruct N=8: paper 0.4782" in first[2]
    thirteen = page_cells(html, 13)
    assert len(thirteen) == 40 and {c[0] for c in thirteen} == {"awaiting"}
    assert any(c[1] == "1.4445" and "σ = 1e-3 / reward-common, κ_base" in c[2] for c in thirteen)
    assert "Table 6: Smoothed GSM8K train reward vs population size N (36 of 36 values awaiting reproduction)" in html
    # every paper value of every table is on the page, as a target
    assert sum(len(page_cells(html, t)) for t in range(2, 14)) == total


def test_table_13_targets_come_from_the_release_reference_when_it_has_them(release, tmp_path):
    rel = copy.deepcopy(release)
    rel["dir"] = tmp_path
    shutil.copytree(release["dir"], tmp_path, dirs_exist_ok=True)
    doc = json.loads((tmp_path / "reference" / "paper_tables.json").read_text())
    t13 = {
        "table": 13,
        "model": "Qwen2.5-1.5B-Instruct",
        "method": "Subtraction",
        "column": "reward-common",
        "metric": "kappa_base",
        "value": 1.5,
        "unit": "ratio",
        "sigma": 0.001,
        "source": {"table": "Table 13", "row": "σ = 1e-3 / reward-common", "column": "κ_base"},
    }
    expected = json.loads((tmp_path / "reference" / "expected_results.json").read_text())
    board = lb.Board(rel, [], [], [], doc["values"] + [t13], expected)
    values = covered(coverage(board), 13)
    assert [c.ref["value"] for c in values] == [1.5]
    assert "PAPER_TABLE_13" not in section(markdown(board), "### Table 13: ")


# ---------------------------------------------------------------------------------------------------------------
# submissions carry some cells: those show their status, the rest stay awaiting


@pytest.fixture
def main_grid(release, tmp_path) -> Report:
    (tmp_path / "MANIFEST.json").write_text("{}")
    r = Report(tmp_path, CURRENT, submission={"name": "paper-run", "suite": "paper-easy"})
    base = frozen_cell(release, "paper-easy", "base", "qwen2.5-1.5b")
    es = frozen_cell(release, "paper-easy", "es", "qwen2.5-1.5b")
    # base: the artifact's Pass@1 and Pass@16 (reproduced); ES: GSM8K Pass@1 76.0 (warn), CSQA 50.0 (fail)
    r.cells.append(fake_cell(base, {"gsm8k": {"pass@1": 927, "pass@16": 1251, "greedy": 988}}))
    es_cell = fake_cell(es, {"gsm8k": {"pass@1": 1002}, "commonsense_qa": {"pass@1": 660}})
    r.cells.append(es_cell)
    train_log(r, es_cell, [0.9] * 300)  # an ES cell, but of paper-easy: never read as Table 6
    return r


def test_a_main_grid_submission_shows_its_verdicts_and_the_rest_awaits(release, main_grid):
    board = board_of(release, main_grid)
    tables = coverage(board)
    t2 = {(c.ref["model"], c.ref["method"], c.ref["column"], c.ref["metric"]): c for c in covered(tables, 2)}
    base = t2[("Qwen2.5-1.5B-Instruct", "Base", "GSM8K", "pass@1")]
    assert base.status == "reproduced" and base.where == "paper-run"
    assert t2[("Qwen2.5-1.5B-Instruct", "ES", "GSM8K", "pass@1")].status == "warn"
    assert t2[("Qwen2.5-1.5B-Instruct", "ES", "CSQA", "pass@1")].status == "fail"
    assert t2[("Qwen2.5-1.5B-Instruct", "ES", "GSM8K", "pass@16")].status == AWAITING
    # Table 11's full-ES GSM8K Pass@1 is another evaluation: not taken from the easy grid's cell
    assert {c.status for c in covered(tables, 11)} == {AWAITING}
    assert {c.status for c in covered(tables, 6)} == {AWAITING}  # a paper-easy ES log is not the sweep's
    statuses = [c.status for tc in tables for c in tc.values]
    assert statuses.count("reproduced") == 2 and statuses.count("warn") == 1 and statuses.count("fail") == 1
    assert statuses.count(AWAITING) == len(statuses) - 4

    md = markdown(board)
    assert "| 2 | Qwen2.5-1.5B-Instruct | Base | 21 | 2 | 0 | 0 | 0 | 19 |" in md
    assert "| 2 | Qwen2.5-1.5B-Instruct | ES | 21 | 0 | 1 | 1 | 0 | 19 |" in md
    assert "| 2 | Qwen2.5-1.5B-Instruct | GRPO | 21 | 0 | 0 | 0 | 0 | 21 |" in md
    assert "| 7 | Qwen2.5-1.5B-Instruct | Base | 14 | 0 | 0 | 0 | 0 | 14 |" in md
    assert "Now: 2 reproduced, 1 warn, 1 fail, 0 reported" in md
    # the paper-layout tables above are unchanged by the coverage section
    assert "73.2 → 76.0 (+2.8 ⚠)" in row(md, "| Qwen2.5-1.5B-Instruct | ES | 73.2")

    cells = page_cells(page(board, {}), 2)
    assert ("reproduced", "70.3 → 70.3 (+0.0 ✓)") in [c[:2] for c in cells]
    assert ("warn", "73.2 → 76.0 (+2.8 ⚠)") in [c[:2] for c in cells]
    assert ("fail", "60.7 → 50.0 (-10.7 ✗)") in [c[:2] for c in cells]
    assert sum(c[0] == "awaiting" for c in cells) == len(cells) - 4


def test_population_and_subtraction_cells_show_their_values_beside_the_paper(release, tmp_path):
    (tmp_path / "MANIFEST.json").write_text("{}")
    r = Report(tmp_path, CURRENT, submission={"name": "sweep", "suite": "paper-population"})
    n8 = fake_cell(frozen_cell(release, "paper-population", "es-n8", "qwen2.5-0.5b"))
    r.cells.append(n8)
    train_log(r, n8, [0.5] * 300)  # a constant reward: its debiased EMA is 0.5 at every update
    seed2 = copy.deepcopy(frozen_cell(release, "paper-population", "es-n8", "qwen2.5-0.5b"))
    seed2["spec"]["seed"], seed2["id"] = 7, "seven"
    second = fake_cell(seed2)
    r.cells.append(second)
    train_log(r, second, [0.6] * 150)  # a second seed, shorter: averaged where it has the update
    diag = frozen_cell(release, "paper-subtraction", "subtraction")
    rows = [
        {"sigma": 0.001, "objective": "reward-common", "corr_plus_zero": 0.3, "kappa_base": 1.5, "observations": 9},
        {"sigma": 1e-4, "objective": "reward-independent", "undefined": "Var(X+) is 0", "observations": 9},
        "not a row",
        {"sigma": "big", "objective": "cross-entropy", "kappa_base": 0.1},
        {"sigma": 0.001, "objective": {"not": "a name"}, "kappa_base": 0.1},
    ]
    r.cells.append(fake_cell(diag, train={"subtraction": rows}))
    board = board_of(release, r)
    tables = coverage(board)

    t6 = {(c.ref["model"], c.ref["population"], c.ref["update"]): c for c in covered(tables, 6)}
    c100 = t6[("Qwen2.5-0.5B-Instruct", 8, 100)]
    assert c100.status == REPORTED and c100.value == pytest.approx(0.55) and c100.delta == pytest.approx(0.55 - 0.4782)
    assert c100.where == f"sweep (seven, {n8.id})"
    assert t6[("Qwen2.5-0.5B-Instruct", 8, 300)].value == pytest.approx(0.5)
    assert t6[("Qwen2.5-0.5B-Instruct", 16, 100)].status == AWAITING
    assert t6[("Qwen2.5-1.5B-Instruct", 8, 100)].status == AWAITING
    t13 = {(c.ref["sigma"], c.ref["column"], c.ref["metric"]): c for c in covered(tables, 13)}
    kb = t13[(1e-3, "reward-common", "kappa_base")]
    assert kb.status == REPORTED and kb.value == 1.5 and kb.delta == pytest.approx(1.5 - 1.4445)
    assert t13[(1e-3, "reward-common", "kappa_pair")].status == REPORTED  # carried, but absent: undefined
    assert t13[(1e-3, "reward-common", "kappa_pair")].value is None
    assert t13[(1e-4, "reward-independent", "kappa_base")].value is None
    assert t13[(1e-3, "cross-entropy", "kappa_base")].status == AWAITING  # its σ is not a number

    md = markdown(board)
    assert "| 6 | Qwen2.5-0.5B-Instruct | ES | 12 | 0 | 0 | 0 | 3 | 9 |" in md
    assert "| 13 | Qwen2.5-1.5B-Instruct | Subtraction | 40 | 0 | 0 | 0 | 8 | 32 |" in md
    six = section(md, "### Table 6: ")
    assert (
        "3 of 36 values carried by a submission" in six
        and f"the other 33, bare paper numbers, are **{AWAITING}**" in six
    )
    assert row(six, "| Qwen2.5-0.5B-Instruct | 100 |").startswith(
        "| Qwen2.5-0.5B-Instruct | 100 | 0.4782 → 0.5500 (+0.0718) | 0.5021 | 0.5100 | 0.5085 |"
    )
    assert row(six, "| Qwen2.5-0.5B-Instruct | 300 |").startswith(
        "| Qwen2.5-0.5B-Instruct | 300 | 0.4421 → 0.5000 (+0.0579) |"
    )
    assert f"Values from `sweep (seven, {n8.id})`." in six
    thirteen = section(md, "### Table 13: ")
    assert row(thirteen, "| 1e-3 | reward-common |") == (
        "| 1e-3 | reward-common | 0.2777 → 0.3000 (+0.0223) | 1.4445 → 1.5000 (+0.0555) | 0.1304 → undefined "
        "| 1.9870 → undefined |"
    )
    assert "training-side values of Tables 6 and 13" in md  # the intro says which numbers are not recomputed

    html = page(board, {})
    reported = [c for c in page_cells(html, 6) if c[0] == "reported"]
    assert len(reported) == 3 and all("not recomputed, not judged" in c[2] for c in reported)
    assert "td.reported{" in html


def test_render_writes_the_section_to_readme_and_page(release, main_grid, tmp_path):
    out = tmp_path / "out"
    written = render(board_of(release, main_grid), out)
    assert out / "README.md" in written
    assert "## Coverage of the paper" in (out / "README.md").read_text()
    assert "id='coverage' class='sortable'" in (out / "site" / "index.html").read_text()


# ---------------------------------------------------------------------------------------------------------------
# published releases: no coverage key, so exactly the rendering they had


@pytest.mark.parametrize("rel", PUBLISHED)
def test_published_releases_render_without_the_section(rel):
    release = load_release(ROOT, rel)
    assert "coverage" not in release["paper_map"]
    board = lb.build_board(ROOT, release)
    assert coverage(board) is None
    md = markdown(board)
    plots = {f"{e.submission}/{t}": f"plots/{e.submission}/{t}.png" for e in board.entries for t in e.tasks}
    html = page(board, plots)
    for text in ("Coverage of the paper", AWAITING, "td.awaiting"):
        assert text not in md and text not in html
    assert "the records' own numbers are never shown.\n" in md
    committed = (ROOT / "README.md").read_text()
    if committed.startswith(f"# esbench leaderboard — release {rel}\n"):  # the release the committed board shows
        assert md == committed
        assert html == (ROOT / "site" / "index.html").read_text()


def test_releases_from_v1_4_show_the_section_and_the_committed_board_has_it():
    """v1.4 froze the coverage key (the population and subtraction suites), so its board lists every paper value."""
    assert PUBLISHED == ["v1.0", "v1.1", "v1.2", "v1.3"]
    release = load_release(ROOT, "v1.4")
    assert release["paper_map"]["coverage"] == COVERAGE
    board = lb.build_board(ROOT, release)
    cov = coverage(board)
    assert cov is not None
    md = markdown(board)
    assert "Coverage of the paper" in md and AWAITING in md
    committed = (ROOT / "README.md").read_text()
    if committed.startswith("# esbench leaderboard — release v1.4\n"):
        assert committed == md
