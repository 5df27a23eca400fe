"""`esbench leaderboard build`: Markdown and a static page from verified submissions, checked in a real browser."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from lb_helpers import edit_json, esbench, rehash

from esbench.leaderboard.release import CURRENT

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def built(genuine, tmp_path_factory):
    """A leaderboard with the genuine submission and a tampered one, built once."""
    root, sub, _, _ = genuine
    lb = tmp_path_factory.mktemp("built") / "leaderboard"
    shutil.copytree(root / "releases", lb / "releases")
    shutil.copytree(sub, lb / "submissions" / "genuine")
    bad = lb / "submissions" / "forged"
    shutil.copytree(sub, bad)
    edit_json(bad / "submission.json", lambda s: s.update(name="forged"))
    cell = next(p for p in (bad / "cells").iterdir())
    edit_json(cell / "record.json", lambda r: r["metrics"]["tiny_arith"].update({"pass@1": 0.987654}))
    rehash(bad)
    proc = esbench("leaderboard", "build", "--root", str(lb))
    return lb, proc


def test_build_renders_accepted_and_lists_rejected(built):
    lb, proc = built
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a rejected submission in the tree fails the build
    assert "1 accepted, 1 rejected" in proc.stdout
    md = (lb / "README.md").read_text()
    assert "## Results: submission `genuine`, suite `lbsmall`" in md
    assert "no paper reference" in md and "random-search (plug-in)" in md
    assert "## Rejected submissions" in md and "**forged**" in md and "edited metric" in md
    assert "reproduced   when |mean − ref| ≤ band" in md  # the rule, with the release's parameters
    assert "pass@1 1 pp" in md
    assert "### Table 2:" in md and "| Qwen2.5-1.5B-Instruct | Base | 70.3 | 94.8 | 96.4 |" in md
    page = (lb / "site" / "index.html").read_text()
    table = page[page.index("<table id='results'") : page.index("</table>")]
    assert "0.987654" not in table and "98.8" not in table  # the forged number is not among the results
    assert "edited metric" in page  # but the rejection and its reason are shown
    plots = sorted(p.relative_to(lb / "site").as_posix() for p in (lb / "site" / "plots").rglob("*.png"))
    assert plots == ["plots/genuine/tiny_arith.png", "plots/genuine/tiny_reverse.png"]


def test_markdown_numbers_are_the_recomputed_ones(built, genuine):
    """Each displayed Pass@1 mean is the mean over seeds of what verify recomputed, in percent."""
    from esbench.leaderboard.verify import verify

    lb, _ = built
    root, sub, _, _ = genuine
    report = verify(sub, root)
    base = [c for c in report.cells if c.record["cell"]["labels"]["method"] == "base"]
    mean = 100 * sum(c.recomputed["tiny_arith"]["pass@1"] for c in base) / len(base)
    row = next(line for line in (lb / "README.md").read_text().splitlines() if line.startswith("| tiny | base |"))
    assert row.split("|")[5].strip().startswith(f"{mean:.1f} ± ")


def test_build_is_deterministic(built):
    lb, _ = built
    before = {p: p.read_bytes() for p in lb.rglob("*") if p.is_file() and "submissions" not in p.parts}
    esbench("leaderboard", "build", "--root", str(lb))
    after = {p: p.read_bytes() for p in lb.rglob("*") if p.is_file() and "submissions" not in p.parts}
    assert before.keys() == after.keys() and all(before[p] == after[p] for p in before)


def test_page_in_headless_chromium(built):
    """The table renders, a header click sorts it (read back from the DOM), the plots load, the drawer opens."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (.ci/run does)")
    from playwright.sync_api import sync_playwright

    lb, _ = built
    shot = Path(os.environ.get("ESBENCH_SCREENSHOT_DIR", lb)) / "leaderboard.png"
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        ctx = p.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=FLAGS, viewport={"width": 1500, "height": 1000}
        )
        try:
            page = ctx.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto((lb / "site" / "index.html").as_uri())
            rows = page.locator("#results tbody tr")
            assert rows.count() == 3 * 2  # base, es, random-search x two tasks
            headers = [h.strip() for h in page.locator("#results thead th").all_inner_texts()]
            col = headers.index("pass@1")

            def column() -> list[float]:
                return [
                    float(v)
                    for v in page.eval_on_selector_all(
                        "#results tbody tr", f"rs => rs.map(r => r.cells[{col}].dataset.value)"
                    )
                ]

            page.locator("#results thead th").nth(col).click()
            up = column()
            assert up == sorted(up) and page.locator("#results thead th").nth(col).get_attribute("aria-sort") == (
                "ascending"
            )
            page.locator("#results thead th").nth(col).click()
            down = column()
            assert down == sorted(up, reverse=True) and len(set(down)) > 1
            method_col = headers.index("method")
            page.locator("#results thead th").nth(method_col).click()
            methods = page.eval_on_selector_all(
                "#results tbody tr", f"rs => rs.map(r => r.cells[{method_col}].dataset.value)"
            )
            assert methods == sorted(methods)
            statuses = page.locator("#results tbody .badge").all_inner_texts()
            assert statuses and set(statuses) == {"no paper reference"}
            widths = page.eval_on_selector_all("img", "is => is.map(i => i.complete ? i.naturalWidth : 0)")
            assert len(widths) == 2 and all(w > 0 for w in widths), widths
            assert page.locator("#drawer").is_hidden()
            page.screenshot(path=str(shot), full_page=True)
            page.locator("button.prov").first.click()
            drawer = page.locator("#drawer")
            assert drawer.is_visible()
            text = drawer.inner_text()
            assert "git_commit" in text and "container_image_digest" in text and "manifest_sha256" in text
            page.screenshot(path=str(shot.with_name("leaderboard-drawer.png")))
            assert not errors, errors
        finally:
            ctx.close()
    assert shot.stat().st_size > 10_000


def test_release_data_drives_the_page(built):
    lb, _ = built
    data = json.loads((lb / "releases" / CURRENT / "release.json").read_text())
    page = (lb / "site" / "index.html").read_text()
    assert f"within {data['rule']['warn_factor']:g}× the band" in page
