"""Releases pin what "correct" means: the verifier fingerprint binds every verifier's code, constants and libraries,
and a published release keeps verifying with the fingerprint scheme it was frozen under."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from esbench.leaderboard import release
from esbench.leaderboard.release import FINGERPRINT_SCHEME, task_source, verifier_fingerprint
from esbench.tasks import get_task
from esbench.tasks.verifiers import VERIFIERS

ROOT = Path(__file__).resolve().parents[2] / "leaderboard"
PAPER = ["math", "choice", "hotpot", "countdown", "mbpp"]


def test_every_verifier_has_its_own_fingerprint():
    """Scheme 1 stopped at the lazy wrapper of the paper verifiers, so all five shared one value."""
    current = {name: verifier_fingerprint(name) for name in VERIFIERS}
    assert len(set(current.values())) == len(VERIFIERS)
    assert len({verifier_fingerprint(name, scheme=1) for name in PAPER}) == 1


def test_a_changed_helper_in_another_module_changes_the_fingerprint(monkeypatch):
    """verify_math (paper_verifiers) normalises numbers with esbench.tasks.verifiers.normalise_number."""
    before = {name: verifier_fingerprint(name) for name in VERIFIERS}
    real = release.inspect.getsource

    def edited(obj):
        return real(obj) + "# edited\n" if getattr(obj, "__name__", "") == "normalise_number" else real(obj)

    monkeypatch.setattr(release.inspect, "getsource", edited)
    after = {name: verifier_fingerprint(name) for name in VERIFIERS}
    assert after["math"] != before["math"] and after["hash"] != before["hash"]
    assert after["exact"] == before["exact"] and after["choice"] == before["choice"]


def test_a_changed_constant_changes_the_fingerprint(monkeypatch):
    from esbench.tasks import paper_verifiers

    before = {name: verifier_fingerprint(name) for name in PAPER}
    monkeypatch.setattr(paper_verifiers, "_LETTER", re.compile(r"^([A-E])"))
    after = {name: verifier_fingerprint(name) for name in PAPER}
    assert after["choice"] != before["choice"] and after["math"] == before["math"]


def test_a_changed_library_version_changes_the_fingerprint(monkeypatch):
    before = {name: verifier_fingerprint(name) for name in VERIFIERS}
    real = release._dist_version
    monkeypatch.setattr(release, "_dist_version", lambda d: "99.0" if d == "math-verify" else real(d))
    after = {name: verifier_fingerprint(name) for name in VERIFIERS}
    assert after["math"] != before["math"]
    assert after["exact"] == before["exact"] and after["hash"] == before["hash"]


@pytest.mark.parametrize("rel", sorted(p.name for p in (ROOT / "releases").iterdir()))
def test_published_releases_still_verify_with_their_own_scheme(rel):
    """A release never changes; the code must keep reproducing the pins it was frozen with."""
    doc = json.loads((ROOT / "releases" / rel / "release.json").read_text())
    scheme = doc.get("fingerprint_scheme", 1)
    for name, pin in doc["tasks"].items():
        task = get_task(name)
        if task.version != pin["version"]:
            continue  # a task changed since (the release's records then fail verification, by design)
        assert verifier_fingerprint(pin["verifier"], scheme) == pin["verifier_sha256"], (rel, name)


def test_a_new_release_pins_scheme_and_data_sources(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "name: s\nmodels: {tiny: {path: 'builtin:tiny'}}\nmethods: {base: {}}\nseeds: [0]\n"
        "eval: {tasks: [tiny_arith, gsm8k], limit: 2, n: 1, k: [1]}\n"
    )
    ref = tmp_path / "ref"
    ref.mkdir()
    d = release.write_release(tmp_path / "lb", "v9.9", [suite], ref, "2026-01-01")
    doc = json.loads((d / "release.json").read_text())
    assert doc["fingerprint_scheme"] == FINGERPRINT_SCHEME
    assert doc["tasks"]["gsm8k"]["source"] == task_source(get_task("gsm8k"))
    assert doc["tasks"]["gsm8k"]["source"]["revision"] == "740312add88f781978c0658806c59bc2815b9866"
    assert doc["tasks"]["tiny_arith"]["source"] == {"generator": "esbench.tasks.synthetic:arith"}
