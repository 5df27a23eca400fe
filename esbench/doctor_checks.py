"""What an `esbench doctor` check is: its row, how it says skip or fail, and the state the checks share.

The lowest piece of the doctor: the probes (`esbench.doctor_env`, `esbench.doctor_paths`) raise `Skip` and `Failed`
and read `State`; `esbench.doctor` lists them, runs them in order and prints the table.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from esbench.backends import DevicePolicy

Result = Literal["ok", "fail", "skip"]


@dataclass
class Row:
    check: str
    result: Result
    detail: str
    fix: str = ""
    seconds: float = 0.0


class Skip(Exception):
    """The check does not apply here; the message says why."""


class Failed(Exception):
    """The check ran and found a problem; `fix` overrides the check's default fix."""

    def __init__(self, detail: str, fix: str | None = None):
        super().__init__(detail)
        self.fix = fix


@dataclass
class Check:
    name: str
    run: Callable[[State], str]  # returns the detail of an ok row
    fix: str  # what to do when it fails
    needs: tuple[str, ...] = ()


@dataclass
class State:
    """What the checks share: the device, the suite, and objects built by earlier checks (the tiny model, backends)."""

    device: DevicePolicy  # "cpu" or "cuda" once `esbench.doctor.main` has resolved "auto"
    suite: str | None = None
    hf_only: bool = False
    objects: dict[str, Any] = field(default_factory=dict)
    closers: list[Callable[[], None]] = field(default_factory=list)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="esbench-doctor-")))

    def close(self) -> None:
        for close in reversed(self.closers):
            with contextlib.suppress(Exception):
                close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or "(no message)"
    return f"{type(e).__name__}: {text[:300]}"
