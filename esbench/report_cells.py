"""The report's view of a run: each finished cell's typed record, its folder, its train log and its label.

Separate from report.py so that the report's sections (report_experiments.py, report_compute.py) take the same cells
without importing the module that gathers them; everything here reads the cell folder through esbench.records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esbench.records import CellDir, Record, SampleRow, TrainRow


@dataclass
class ReportCell:
    """One finished cell as the report reads it. `train` holds train.jsonl's rows, read once for every section (none
    where there is no log; `train_logged` says whether there is one); `label` is the cell's name in the tables."""

    record: Record
    path: Path
    train: list[TrainRow] = field(default_factory=list)
    train_logged: bool = False
    label: str = ""

    @classmethod
    def load(cls, path: Path) -> ReportCell:
        cd = CellDir(path)
        return cls(cd.read_record(), cd.path, cd.train_rows(), cd.train_log.exists())

    @property
    def spec(self) -> dict[str, Any]:
        return self.record.cell["spec"]

    @property
    def model(self) -> str:
        """The suite's name for the cell's model."""
        return self.record.cell["labels"]["model"]

    @property
    def is_base(self) -> bool:
        return self.spec["method"]["kind"] == "base"

    @property
    def family(self) -> str:
        """The cell's method; a sequence's is its stages' (checkpoint→grpo)."""
        m = self.spec["method"]
        if m["kind"] == "sequence":
            return "→".join(s["kind"] for s in m["config"]["stages"])
        return m["kind"]

    @property
    def precision(self) -> str:
        """An ES cell's arithmetic (`precision`; fp32-master where its config predates the option)."""
        return self.spec["method"]["config"].get("precision", "fp32-master")

    def samples(self, task: str) -> list[SampleRow]:
        """The sampled pass's evidence of `task`, one row a problem (read afresh: samples can be large)."""
        return CellDir(self.path).sample_rows(task)


def load_run(run_dir: Path) -> list[ReportCell]:
    """Every finished cell under `run_dir` (a suite folder or a folder of suites)."""
    cells = []
    for path in sorted(Path(run_dir).glob("**/record.json")):
        if "submissions" in path.parts:
            continue
        cells.append(ReportCell.load(path.parent))
    if not cells:
        raise FileNotFoundError(f"no record.json under {run_dir}: nothing to report (run `esbench run` first)")
    return cells
