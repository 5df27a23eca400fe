"""Hostile `cell.json` files and cell folders for `esbench run-cell` (issue 22, "`run-cell` trusts its input"), and
the environment overrides every record names (issue 22, "Environment").

A forged cell.json carries a recomputed id, so the hash check alone passes it: what refuses it is the suite's own
validation, applied before anything loads. Each refusal is one line on stderr, exit 2, no traceback, and no folder."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from run_helpers import small_suite

from esbench.cli import main
from esbench.spec import Cell, load_suite

DEADLINE_S = 30  # a refusal takes about a second (imports); a hang or an unbounded read does not end in time


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> dict[str, Cell]:
    suite = tmp_path_factory.mktemp("suite") / "seam.yaml"
    suite.write_text(small_suite("seam"))
    return {c.labels["method"]: c for c in load_suite(suite).cells()}


@pytest.fixture
def no_model(monkeypatch):
    """Loading a model means validation came too late."""
    import esbench.models

    def refuse(*a, **kw):
        raise AssertionError("a model was loaded for an invalid cell")

    monkeypatch.setattr(esbench.models, "load_model", refuse)


def forge(cell: Cell, **spec) -> dict:
    """The cell with `spec` fields replaced and its id and name recomputed, as a forger would."""
    return Cell({**cell.spec, **spec}, dict(cell.labels)).to_json()


def _es_config(cells, **config) -> dict:
    return {"kind": "es", "config": {**cells["es"].spec["method"]["config"], **config}}


# (id, function of the suite's cells -> forged cell.json object, fragment of the one-line error)
FORGED = [
    ("negative budget", lambda c: forge(c["es"], budget=-1), "spec.budget"),
    ("malformed budget", lambda c: forge(c["es"], budget="lots"), "spec.budget"),
    ("zero budget of a trained cell", lambda c: forge(c["es"], budget=0), "spec.budget"),
    ("zero epochs of a trained cell", lambda c: forge(c["es"], budget="0ep"), "spec.budget"),
    ("budget of an untrained cell", lambda c: forge(c["base"], budget=5), "spec.budget"),
    ("negative seed", lambda c: forge(c["base"], seed=-1), "spec.seed"),
    ("seed numpy cannot take", lambda c: forge(c["base"], seed=2**40), "spec.seed"),
    ("boolean seed", lambda c: forge(c["base"], seed=True), "spec.seed"),
    ("other schema", lambda c: forge(c["base"], schema="esbench.suite/99"), "spec.schema"),
    ("unknown method kind", lambda c: forge(c["base"], method={"kind": "nope", "config": {}}), "spec.method.kind"),
    ("invalid method config", lambda c: forge(c["es"], method=_es_config(c, sigma=-1)), "spec.method.config.sigma"),
    ("unknown method config key", lambda c: forge(c["es"], method=_es_config(c, bogus=1)), "spec.method.config.bogus"),
    ("trained cell without data", lambda c: forge(c["es"], dataset=None), "spec.dataset"),
    ("invalid eval", lambda c: forge(c["base"], eval={**c["base"].spec["eval"], "n": 0}), "spec.eval.n"),
    ("extra spec key", lambda c: forge(c["base"], extra=1), "spec.extra"),
    (
        "hostile label",
        lambda c: Cell(c["base"].spec, {**c["base"].labels, "model": "\x1b[2J[red]x"}).to_json(),
        "labels.model",
    ),
    ("name of another cell", lambda c: {**c["base"].to_json(), "name": "tiny/-/es/b2/s0"}, "name"),
    ("no id", lambda c: {k: v for k, v in c["base"].to_json().items() if k != "id"}, "id"),
    ("not an object", lambda c: [c["base"].to_json()], "expected an object"),
]


@pytest.mark.parametrize(("make", "fragment"), [f[1:] for f in FORGED], ids=[f[0] for f in FORGED])
def test_a_forged_cell_json_is_refused_before_anything_loads(tmp_path, capsys, cells, no_model, make, fragment):
    cell_json = tmp_path / "cell.json"
    cell_json.write_text(json.dumps(make(cells)))
    out = tmp_path / "out"
    assert main(["run-cell", str(cell_json), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("esbench run-cell: ") and err.count("\n") == 1, err
    assert fragment in err and "Traceback" not in err, err
    assert all(ch.isprintable() for ch in err.rstrip("\n")), f"raw control characters reach the terminal: {err!r}"
    assert not out.exists(), "a refused cell leaves no folder"


def test_the_cells_a_suite_writes_still_pass(cells):
    from esbench.spec import validate_cell

    for cell in cells.values():
        assert validate_cell(json.loads(json.dumps(cell.to_json()))).id == cell.id


def test_refusing_an_untrained_cell_imports_no_torch(tmp_path, cells):
    """Validation is pure Python: refusing a forged base cell loads neither torch nor transformers."""
    cell_json = tmp_path / "cell.json"
    cell_json.write_text(json.dumps(forge(cells["base"], seed=-1)))
    code = (
        "import sys; from esbench.cli import main; "
        f"rc = main(['run-cell', {str(cell_json)!r}, '--out', {str(tmp_path / 'out')!r}]); "
        "print(rc, 'torch' in sys.modules, 'transformers' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=DEADLINE_S)
    assert proc.stdout.split() == ["2", "False", "False"], proc.stdout + proc.stderr[-2000:]
    assert not (tmp_path / "out").exists()


def _run_cell_proc(cell_json: Path, out: Path, memory_gb: int = 2) -> tuple[subprocess.CompletedProcess, float]:
    """`esbench run-cell` in a child under an address-space cap, so an unbounded read fails fast instead of
    exhausting the machine."""
    repo = Path(__file__).resolve().parents[2]
    cap = memory_gb << 30

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)}
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "esbench.cli", "run-cell", str(cell_json), "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
            env=env,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"run-cell on {cell_json} did not finish within {DEADLINE_S} s")
    return proc, time.monotonic() - t0


@pytest.mark.parametrize("kind", ["deep nesting", "fifo", "/dev/zero", "symlink to /dev/zero", "over the size cap"])
def test_a_hostile_cell_json_file_is_refused_quickly(tmp_path, kind):
    cell_json = tmp_path / "cell.json"
    if kind == "deep nesting":
        cell_json.write_text('{"spec": ' + "[" * 200_000 + "]" * 200_000 + "}")
    elif kind == "fifo":
        os.mkfifo(cell_json)
    elif kind == "/dev/zero":
        cell_json = Path("/dev/zero")
    elif kind == "symlink to /dev/zero":
        cell_json.symlink_to("/dev/zero")
    else:  # a sparse file of 4 GiB: read whole, it would exhaust the child's 2 GiB address space
        with open(cell_json, "wb") as f:
            f.truncate(4 << 30)
    out = tmp_path / "out"
    proc, seconds = _run_cell_proc(cell_json, out)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("esbench run-cell: ") and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and seconds < DEADLINE_S
    assert not out.exists()


# ---------------------------------------------------------------------------------------------------------------
# A folder that belongs to another cell


def _foreign_folder(tmp_path: Path, other: Cell, what: str) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    if what in ("cell.json", "both"):
        (out / "cell.json").write_text(json.dumps(other.to_json()))
    if what in ("record.json", "both"):
        (out / "record.json").write_text(json.dumps({"cell": other.to_json(), "metrics": {"forged": True}}))
    return out


@pytest.mark.parametrize("what", ["cell.json", "record.json", "both"])
def test_a_folder_holding_another_cells_files_is_refused(tmp_path, capsys, cells, no_model, what):
    cell_json = tmp_path / "cell.json"
    cell_json.write_text(json.dumps(cells["base"].to_json()))
    out = _foreign_folder(tmp_path, cells["es"], what)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["run-cell", str(cell_json), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert cells["es"].id in err and "another cell" in err and err.count("\n") == 1, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before, "the other cell's folder is left as it was"


def test_run_cell_itself_refuses_another_cells_folder(tmp_path, cells, no_model):
    """Executors call `run_cell` directly: the same check holds there."""
    from esbench.runner import run_cell

    out = _foreign_folder(tmp_path, cells["es"], "record.json")
    with pytest.raises(ValueError, match="another cell"):
        run_cell(cells["base"], out)
    assert sorted(p.name for p in out.iterdir()) == ["record.json"]


def test_out_naming_a_regular_file_is_refused(tmp_path, capsys, cells, no_model):
    cell_json = tmp_path / "cell.json"
    cell_json.write_text(json.dumps(cells["base"].to_json()))
    out = tmp_path / "out"
    out.write_text("a file\n")
    assert main(["run-cell", str(cell_json), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not a folder" in err and err.count("\n") == 1, err
    assert out.read_text() == "a file\n"


# ---------------------------------------------------------------------------------------------------------------
# Environment overrides in provenance


def test_provenance_names_the_overrides_that_change_what_is_evaluated(tmp_path, monkeypatch):
    from esbench import provenance
    from esbench.tasks import hub, sandbox

    assert hub.ENV_DIR in provenance.EVALUATION_ENV and "ESBENCH_SANDBOX" in provenance.EVALUATION_ENV
    for var in provenance.EVALUATION_ENV:
        monkeypatch.delenv(var, raising=False)
    env = provenance.environment()
    assert env["env_overrides"] == {} and env["sandbox"] == sandbox.describe()
    monkeypatch.setenv(hub.ENV_DIR, str(tmp_path))
    monkeypatch.setenv("ESBENCH_SANDBOX", " ")  # blank reads as unset (the default mode)
    monkeypatch.setenv("ESBENCH_ES_WORKERS", "2")  # an execution option: never changes results, not an override
    assert provenance.environment()["env_overrides"] == {hub.ENV_DIR: str(tmp_path)}
    monkeypatch.setenv("ESBENCH_SANDBOX", "audit")
    env = provenance.environment()
    assert env["env_overrides"] == {hub.ENV_DIR: str(tmp_path), "ESBENCH_SANDBOX": "audit"}
    assert env["sandbox"] == sandbox.describe() and json.dumps(env)


def test_a_record_says_which_overrides_were_set_and_the_cell_id_does_not_change(
    tmp_path, monkeypatch, cells, tiny_model_dir
):
    from esbench.records import Record
    from esbench.runner import run_cell
    from esbench.tasks import sandbox

    base = cells["base"]
    monkeypatch.setenv("ESBENCH_DATASETS_DIR", str(tmp_path / "mirror"))
    record = run_cell(base, tmp_path / "cell")
    prov = record["provenance"]
    assert prov["env_overrides"] == {"ESBENCH_DATASETS_DIR": str(tmp_path / "mirror")}
    assert prov["sandbox"] == sandbox.describe() and prov["sandbox"]["mode"]
    Record.model_validate(record)
    assert record["cell"]["id"] == base.id, "provenance is not part of the cell id"
    stored = json.loads((tmp_path / "cell" / "cell.json").read_text())
    assert stored["id"] == base.id == Cell(stored["spec"], stored["labels"]).id
