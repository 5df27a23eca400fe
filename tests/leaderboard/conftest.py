"""A genuine small submission, built once per session: a test release, a run of its suite plus the
random-search plug-in, and `esbench submit`. Tamper tests work on copies of it."""

from __future__ import annotations

import pytest
from lb_helpers import genuine_once, tampered_copy


@pytest.fixture(scope="session")
def genuine(tmp_path_factory, tiny_model_dir):
    """(leaderboard root, submission folder, run folder, plug-in env) for a verified submission of 6 cells."""
    return genuine_once(tmp_path_factory)


@pytest.fixture
def tampered(genuine, tmp_path):
    """A fresh copy of the genuine submission in its own leaderboard root (same release), to edit."""
    return tampered_copy(genuine, tmp_path)
