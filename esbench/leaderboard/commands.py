"""Command-line entry points: `esbench submit`, `esbench leaderboard verify|reproduce|build|release`.

The contract: docs/leaderboard.md.

Exit codes: 0 accepted / built; 1 rejected (every reason listed); 2 bad input (no such folder, unknown release).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from esbench.leaderboard.release import CURRENT, default_root

EXIT_REJECTED = 1
EXIT_INVALID = 2


def _console(stderr: bool = False):
    """A console for lines that hold submission text: never wrapped, no highlighting or emoji codes; the text is
    passed through `render.for_terminal`, so markup, ANSI codes and bidi controls in it are shown, not acted on."""
    from rich.console import Console

    return Console(stderr=stderr, soft_wrap=True, highlight=False, emoji=False)


def _print_report(report, as_json: bool) -> None:
    from esbench.leaderboard.escape import for_terminal as t

    if as_json:
        print(json.dumps(report.to_json(), indent=2))  # ASCII JSON: every control character escaped
        return
    out, err = _console(), _console(stderr=True)
    if report.ok:
        out.print(f"ACCEPTED {t(report.path)} (release {t(report.release)}, {len(report.cells)} cells verified)")
    else:
        err.print(f"REJECTED {t(report.path)} (release {t(report.release)}): {len(report.reasons)} reasons")
        for r in report.reasons:
            err.print(f"  - {t(r)}")
    for n in report.notes:
        out.print(f"  note: {t(n)}")


def cmd_submit(args) -> int:
    from esbench.leaderboard.submit import SubmitError, submit

    try:
        dest, report = submit(Path(args.run_dir), args.name, Path(args.root), args.release)
    except SubmitError as e:
        from esbench.leaderboard.escape import plain

        print(f"esbench submit: {plain(e)}", file=sys.stderr)
        if e.report is not None:
            _print_report(e.report, False)
            return EXIT_REJECTED
        return EXIT_INVALID
    print(f"submission written to {dest}")
    _print_report(report, False)
    return 0


def _verified(args, command: str):
    """(report, None) for the submission at args.path, or (None, exit code) when there is no such folder."""
    from esbench.leaderboard.verify import verify

    path = Path(args.path)
    if not path.is_dir():
        print(f"esbench leaderboard {command}: {ascii(str(path))}: no such submission folder", file=sys.stderr)
        return None, EXIT_INVALID
    return verify(path, Path(args.root), args.release), None


def cmd_verify(args) -> int:
    report, code = _verified(args, "verify")
    if report is None:
        return code
    _print_report(report, args.json)
    return 0 if report.ok else EXIT_REJECTED


def cmd_reproduce(args) -> int:
    import tempfile

    from rich.console import Console
    from rich.table import Table

    from esbench.leaderboard.escape import for_terminal as t
    from esbench.leaderboard.release import load_release
    from esbench.leaderboard.reproduce import reproduce

    report, code = _verified(args, "reproduce")
    if report is None:
        return code
    path = Path(args.path)
    if not report.ok:  # never execute a submission that does not even verify
        _print_report(report, False)
        return EXIT_REJECTED
    rule = load_release(Path(args.root), args.release)["rule"]
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="esbench-reproduce-"))
    console = Console(stderr=True)
    runtime = None
    if args.runtime != "local":
        from esbench.executors.container import ContainerRuntime

        try:
            runtime = ContainerRuntime.from_options(args.runtime, args.image, args.mount)
        except ValueError as e:
            print(f"esbench leaderboard reproduce: {e}", file=sys.stderr)
            return EXIT_INVALID
    checks = reproduce(
        path,
        out,
        rule,
        args.only,
        args.exact,
        on_cell=lambda c: console.print(f"re-running {t(c.name)} into {t(out)}"),
        runtime=runtime,
    )
    if not checks:
        print(f"esbench leaderboard reproduce: no cell of {path} matches --only {args.only}", file=sys.stderr)
        return EXIT_INVALID
    if args.json:
        print(json.dumps([c.to_json() for c in checks], indent=2))
    else:
        table = Table(title=f"re-run of {t(path.name)} (release {t(args.release)})")
        for col in ("cell", "status", "weights", "samples", "worst Pass@k difference (pp)"):
            table.add_column(col)
        for c in checks:
            worst = max(c.metrics, key=lambda m: abs(m["rerun"] - m["submitted"]), default=None)
            diff = f"{worst['rerun'] - worst['submitted']:+.2f} ({worst['task']} {worst['metric']})" if worst else "-"
            same = {True: "identical", False: "differ"}
            table.add_row(t(c.name), c.status, same[c.weights_identical], same[c.samples_identical], t(diff))
        Console().print(table)
        err = _console(stderr=True)
        for c in checks:
            for r in c.reasons:
                err.print(f"  - {t(c.name)}: {t(r)}")
    return EXIT_REJECTED if any(c.status == "failed" for c in checks) else 0


def cmd_build(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from esbench.leaderboard.board import build_board
    from esbench.leaderboard.escape import for_terminal as t
    from esbench.leaderboard.release import load_release
    from esbench.leaderboard.render import render

    root = Path(args.root)
    try:
        release = load_release(root, args.release)
    except (FileNotFoundError, ValueError) as e:
        print(f"esbench leaderboard build: {e}", file=sys.stderr)
        return EXIT_INVALID
    board = build_board(root, release)
    written = render(board, root)
    console = Console()
    table = Table(title=f"leaderboard {release['id']}: {len(board.accepted)} accepted, {len(board.rejected)} rejected")
    for col in ("submission", "status", "cells", "entries / first reason"):
        table.add_column(col)
    for r in board.accepted:
        n = sum(1 for e in board.entries if e.submission == r.submission.get("name"))
        table.add_row(t(r.path.name), "[green]accepted[/green]", str(len(r.cells)), f"{n} entries")
    err = _console(stderr=True)
    for r in board.rejected:
        first = r.reasons[0] if r.reasons else "rejected"
        table.add_row(t(r.path.name), "[red]rejected[/red]", str(len(r.cells)), t(first))
        # one line per bad submission: skipped, the board built for the others (exit 1 still flags it)
        err.print(f"esbench leaderboard build: skipped {t(r.path.name)} ({len(r.reasons)} reasons): {t(first)}")
    console.print(table)
    for p in written[:2]:
        console.print(f"wrote {t(p)}")
    console.print(f"wrote {len(written) - 2} plots under {t(root / 'site' / 'plots')}")
    return EXIT_REJECTED if board.rejected else 0


def cmd_release(args) -> int:
    from esbench.leaderboard.release import write_release
    from esbench.spec import SuiteError

    try:
        d = write_release(
            Path(args.root), args.id, [Path(s) for s in args.suite], Path(args.reference), args.date, args.notes
        )
    except (FileExistsError, ValueError, SuiteError) as e:
        print(f"esbench leaderboard release: {e}", file=sys.stderr)
        return EXIT_INVALID
    print(f"release {args.id} frozen in {d}")
    return 0


def add_parsers(sub) -> None:
    """Register `submit` and `leaderboard` on the main parser's subcommands."""
    root_help = "leaderboard folder (default: ./leaderboard)"
    s = sub.add_parser("submit", help="package a finished run as leaderboard/submissions/NAME (verified first)")
    s.add_argument("run_dir", help="runs/<suite> (or an output root holding one suite)")
    s.add_argument("--name", required=True, help="submission name; also its folder (must be new)")
    s.add_argument("--root", default=str(default_root()), help=root_help)
    s.add_argument("--release", default=CURRENT, help=f"release id (default: {CURRENT})")
    s.set_defaults(fn=cmd_submit)

    lb = sub.add_parser("leaderboard", help="verify submissions and render the leaderboard")
    lsub = lb.add_subparsers(dest="leaderboard_command", required=True)
    v = lsub.add_parser("verify", help="accept (exit 0) or reject (exit 1, every reason) a submission")
    v.add_argument("path")
    v.add_argument("--json", action="store_true", help="print the verdict as JSON")
    b = lsub.add_parser("build", help="render leaderboard/README.md and leaderboard/site/ from verified submissions")
    for p in (v, b):
        p.add_argument("--root", default=str(default_root()), help=root_help)
        p.add_argument("--release", default=CURRENT, help=f"release id (default: {CURRENT})")
    v.set_defaults(fn=cmd_verify)
    rp = lsub.add_parser("reproduce", help="re-run a verified submission's cells and compare them with the submitted")
    rp.add_argument("path")
    rp.add_argument("--only", action="append", help="cell name or id glob (repeatable; default: every cell)")
    rp.add_argument("--out", help="folder for the re-runs (resumable; default: a new temporary folder)")
    rp.add_argument("--exact", action="store_true", help="fail any cell whose weights or samples are not identical")
    rp.add_argument("--json", action="store_true", help="print the comparison as JSON")
    rp.add_argument("--runtime", default="local", choices=["local", "podman", "docker", "apptainer"])
    rp.add_argument("--image", help="the image for --runtime (name@sha256:digest, name:tag or .sif)")
    rp.add_argument("--mount", action="append", default=[], help="extra SRC[:DST][:ro] bind mount (repeatable)")
    rp.add_argument("--root", default=str(default_root()), help=root_help)
    rp.add_argument("--release", default=CURRENT, help=f"release id (default: {CURRENT})")
    rp.set_defaults(fn=cmd_reproduce)
    b.set_defaults(fn=cmd_build)
    r = lsub.add_parser("release", help="freeze a new release (maintainers): suites, reference, rule, task pins")
    r.add_argument("id", help="vMAJOR.MINOR, new")
    r.add_argument("--suite", action="append", required=True, help="suite YAML to freeze (repeatable)")
    r.add_argument("--reference", default=str(default_root() / "reference"), help="folder of reference JSON files")
    r.add_argument("--date", required=True, help="release date, YYYY-MM-DD")
    r.add_argument("--notes", default="", help="one line for the CHANGELOG and the page")
    r.add_argument("--root", default=str(default_root()), help=root_help)
    r.set_defaults(fn=cmd_release)
