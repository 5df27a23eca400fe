"""Procedural task families for the embedded tiny model.

Every family produces `{"id", "question", "answer", "solution"}` rows. The answer format is GSM8K's
`#### <answer>`, so the verifiers that serve the tiny model serve GSM8K unchanged.

- `arith`: multi-step + and - (`Q 12+7-3=?` -> `12+7=19`, `19-3=16`, `#### 16`): the training family.
- `reverse`: reverse a 3-5 digit string (`R 38291=?` -> `#### 19283`): held out.
- `max`: the maximum of 3-4 numbers (`M 3,17,9=?` -> `#### 17`): held out.

Splits are generated from fixed seeds, so a split is the same on every machine. The `train` split of a family
never contains a `test` question (the test set is drawn first and excluded).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

Row = dict[str, str]


def arith(rng: random.Random, steps: tuple[int, ...] = (3,), first_max: int = 19, rest_max: int = 9) -> Row:
    """A chained +/- problem with one line per step; intermediate results may go negative."""
    n_steps = rng.choice(steps)
    value = rng.randint(0, first_max)
    question = str(value)
    lines = []
    for _ in range(n_steps):
        op = rng.choice("+-")
        operand = rng.randint(0, rest_max)
        new = value + operand if op == "+" else value - operand
        lines.append(f"{value}{op}{operand}={new}")
        question += f"{op}{operand}"
        value = new
    return {"question": f"Q {question}=?", "solution": "\n".join(lines), "answer": str(value)}


def reverse(rng: random.Random) -> Row:
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(3, 5)))
    return {"question": f"R {digits}=?", "solution": "", "answer": digits[::-1]}


def maximum(rng: random.Random) -> Row:
    nums = [rng.randint(0, 19) for _ in range(rng.randint(3, 4))]
    return {"question": f"M {','.join(map(str, nums))}=?", "solution": "", "answer": str(max(nums))}


FAMILIES: dict[str, Callable[[random.Random], Row]] = {"arith": arith, "reverse": reverse, "max": maximum}

# Seeds are fixed per (family, split); changing one changes every split's hash and so every cell id.
_SPLIT_SEEDS = {"test": 1_000, "train": 2_000}


def target(row: Row) -> str:
    """The completion a perfect model writes: worked steps (if any), then `#### answer`."""
    body = row["solution"] + "\n" if row["solution"] else ""
    return f"{body}#### {row['answer']}"


def stream(family: str, seed: int, exclude: set[str] | frozenset[str] = frozenset()) -> Iterator[Row]:
    """An endless deterministic stream of problems whose question is not in `exclude`."""
    rng = random.Random(f"{family}:{seed}")
    make = FAMILIES[family]
    while True:
        row = make(rng)
        if row["question"] not in exclude:
            yield row


def make_split(family: str, split: str, size: int) -> list[Row]:
    """`size` distinct problems; `train` excludes every question of a 2,000-problem `test` pool."""
    if family not in FAMILIES:
        raise KeyError(f"unknown task family {family!r}; known: {sorted(FAMILIES)}")
    exclude: set[str] = set()
    if split != "test":
        exclude = {r["question"] for r in make_split(family, "test", 2_000)}
    seen: set[str] = set()
    rows: list[Row] = []
    for row in stream(family, _SPLIT_SEEDS.get(split, hash_seed(split)), exclude):
        if row["question"] in seen:
            continue
        seen.add(row["question"])
        rows.append({"id": f"{family}-{split}-{len(rows)}", **row})
        if len(rows) == size:
            return rows
    raise AssertionError("unreachable")


def hash_seed(text: str) -> int:
    """A platform-independent integer seed for a string (Python's hash() is salted per process)."""
    import hashlib

    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "little")
