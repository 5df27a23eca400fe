"""MBPP grading speed: programs per second under the OS-confined sandbox against the sandbox it replaced, side by
side in one run, printed as JSON.

Rows:
- `bwrap`: today's default (bubblewrap + seccomp + the parent-side verdict, `esbench.tasks.mbpp_judge`);
- `audit`: today's weaker opt-in mode (ESBENCH_SANDBOX=audit: unshare + rlimits + the audit hook + seccomp);
- `old`: the sandbox before issue 22 (audit hook and completion proof in the program's interpreter), loaded from
  git at OLD_COMMIT when this is a checkout (else left out);
- `bare`: `python -I -S -c code+tests` with no containment, the floor.

Each row grades the same MBPP-style programs (a correct and a wrong solution each) `--rounds` times, one at a
time, as a training reward grades them; the ratios are against `old` and `bare`.

    python benchmarks/sandbox_speed.py
    python benchmarks/sandbox_speed.py --rounds 20
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OLD_COMMIT = "c9ba400"  # main before issue 22

PROGRAMS = [
    (
        "def remove_Occ(s, ch):\n    s = s.replace(ch, '', 1)\n    i = s.rfind(ch)\n"
        "    return s[:i] + s[i+1:] if i >= 0 else s",
        ['assert remove_Occ("hello","l") == "heo"', 'assert remove_Occ("abcda","a") == "bcd"'],
        [],
    ),
    (
        "import math\ndef volume_sphere(r):\n    return 4 / 3 * math.pi * r ** 3",
        ["assert math.isclose(volume_sphere(10), 4188.790204786391, rel_tol=0.001)"],
        ["import math"],
    ),
    (
        "import heapq as hq\ndef heap_queue_largest(nums, n):\n    return hq.nlargest(n, nums)",
        ["assert heap_queue_largest([25, 35, 22, 85, 14, 65, 75, 22, 58], 3) == [85, 75, 65]"],
        [],
    ),
    (
        "def similar_elements(a, b):\n    return tuple(set(a) & set(b))",
        ["assert set(similar_elements((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))"],
        [],
    ),
]


def cases():
    for code, tests, imports in PROGRAMS:
        yield code, tests, imports, True
        yield code.replace("return ", "return 7 or ", 1), tests, imports, False


def bare(code, tests, imports, timeout=10.0):
    src = "\n".join([*imports, code, *tests])
    r = subprocess.run([sys.executable, "-I", "-S", "-c", src], capture_output=True, timeout=timeout)
    return r.returncode == 0


def load_old():
    try:
        src = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{OLD_COMMIT}:esbench/tasks/sandbox.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp(prefix="esbench-bench-")) / "sandbox_old.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("sandbox_old", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sandbox_old"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod.run_tests


def measure(grade, rounds):
    n, wrong, t0 = 0, 0, time.perf_counter()
    for _ in range(rounds):
        for code, tests, imports, want in cases():
            wrong += grade(code, tests, imports) != want
            n += 1
    dt = time.perf_counter() - t0
    return {"programs": n, "seconds": round(dt, 3), "programs_per_s": round(n / dt, 2), "misgraded": wrong}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    from esbench.tasks import sandbox
    from esbench.tasks.mbpp_judge import run_tests

    rows = {}
    sandbox.require()
    run_tests(*PROGRAMS[0])  # warm: the bwrap probe and the seccomp programs are built once per process
    rows["bwrap"] = measure(run_tests, args.rounds)
    os.environ[sandbox.ENV_MODE] = "audit"
    rows["audit"] = measure(run_tests, args.rounds)
    del os.environ[sandbox.ENV_MODE]
    old = load_old()
    if old is not None:
        rows["old"] = measure(old, args.rounds)
    rows["bare"] = measure(bare, args.rounds)
    out = {"rows": rows, "sandbox": sandbox.describe(), "rounds": args.rounds}
    for ref in ("old", "bare"):
        if ref in rows:
            out[f"time_ratio_vs_{ref}"] = {
                k: round(v["seconds"] / rows[ref]["seconds"], 2) for k, v in rows.items() if k != ref
            }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
