"""Metrics computed from per-sample evidence: Pass@k, Maj@k, and (later) entropy, diversity, drift."""
