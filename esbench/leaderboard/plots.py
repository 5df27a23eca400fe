"""The board's pass@k plots, `leaderboard/site/plots/<submission>/<task>.png`, drawn with matplotlib.

Separate from the page and the Markdown: it is the one part that needs matplotlib (imported only when drawing).
"""

from __future__ import annotations

from pathlib import Path

from esbench.leaderboard.board import Board, Entry
from esbench.leaderboard.escape import plain


def write_plots(board: Board, plots_dir: Path) -> dict[str, Path]:
    """One pass@k curve per (submission, task): Pass@k against k on a log2 axis, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, Path] = {}
    groups: dict[tuple[str, str], list[Entry]] = {}
    for e in board.entries:
        for t in e.tasks:
            groups.setdefault((e.submission, t), []).append(e)
    for (sub, task), entries in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(5.2, 3.4), dpi=100)
        for e in entries:
            curve = e.tasks[task]["curve"]
            ks = sorted(int(k) for k in curve)
            # a label is mathtext to matplotlib: an unbalanced `$` in a plug-in's name would raise while drawing
            ax.plot(ks, [curve[str(k)] for k in ks], marker="o", ms=3, label=plain(e.method).replace("$", r"\$"))
            refs = [
                (int(m.split("@")[1]), r["ref"])
                for m, r in e.tasks[task]["metrics"].items()
                if m.startswith("pass@") and "ref" in r
            ]
            if refs:
                ax.scatter(*zip(*refs, strict=True), marker="x", color="black", zorder=3)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k (samples)")
        ax.set_ylabel("Pass@k (%)")
        held = " (held out)" if entries[0].tasks[task]["held_out"] else ""
        ax.set_title(f"{sub}: {task}{held}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        path = plots_dir / sub / f"{task}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, metadata={"Software": None})
        plt.close(fig)
        out[f"{sub}/{task}"] = path
    return out
