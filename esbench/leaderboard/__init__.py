"""The versioned leaderboard: releases, the comparison rule, submissions, verification and rendering.

Pipeline: `esbench submit RUN_DIR --name NAME` packages a run -> `esbench leaderboard verify PATH` recomputes every
number from the per-sample logs -> `esbench leaderboard build` renders `leaderboard/README.md` and the HTML page.
Only `release` is imported by the runner, so this package stays light to import.
"""
