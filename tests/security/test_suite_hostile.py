"""Hostile suite files (issue 22, "Suite files"): validation never imports or runs code, names that reach the file
system or the terminal are restricted, numeric fields refuse inf, NaN and out-of-range values, and special files or
an `--out` that is a file are refused, each with file, line and field path, exit 2 and nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_spec import VALID  # tests/ is on sys.path (see run_helpers)

from esbench.cli import main
from esbench.spec import SuiteError, load_suite

ES = VALID.replace("base: {}", "base: {}\n  es: {method: es, population: 4, sigma: 0.01}") + "budgets: [4]\n"
GRPO = VALID.replace("base: {}", "base: {}\n  grpo: {method: grpo}") + "budgets: [4]\n"


def _cli(*argv: str, cwd: Path, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(repo)) if p)
    return subprocess.run(
        [sys.executable, "-m", "esbench.cli", *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


# ---------------------------------------------------------------------------------------------------------------
# Validation never imports or runs code


def _planted_package(root: Path) -> Path:
    """A package whose import, whose `__main__` and whose submodule's import each leave a marker file."""
    pkg = root / "plantedpkg"
    (pkg / "sub").mkdir(parents=True)
    marker = "import pathlib; pathlib.Path({!r}).write_text('ran')\n"
    (pkg / "__init__.py").write_text(marker.format(str(root / "imported-init")))
    (pkg / "__main__.py").write_text(marker.format(str(root / "ran-main")))
    (pkg / "sub" / "__init__.py").write_text(marker.format(str(root / "imported-sub")))
    (pkg / "sub" / "m.gguf").write_bytes(b"GGUF")
    (pkg / "m.gguf").write_bytes(b"GGUF")
    return pkg


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("pkg:plantedpkg.__main__.x/m.gguf", False),  # importing the parent `plantedpkg.__main__` would run it
        ("pkg:plantedpkg.__main__/m.gguf", False),
        ("pkg:plantedpkg.sub/m.gguf", True),  # found through the parent's folder, neither package imported
        ("pkg:plantedpkg/m.gguf", True),
        ("pkg:plantedpkg/../plantedpkg/m.gguf", False),  # the file must lie inside the package
        ("pkg:venv.__main__.x/m.gguf", False),  # the standard library's venv: its main makes a virtualenv in cwd
    ],
)
def test_validate_resolves_pkg_paths_without_importing_anything(tmp_path, path, ok):
    pkg = _planted_package(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    for where, text in (
        ("model", VALID.replace("builtin:tiny", path)),
        ("checkpoint", VALID.replace("base: {}", f"base: {{}}\n  ckpt: {{method: checkpoint, path: {path!r}}}")),
    ):
        suite = tmp_path / f"{where}.yaml"
        suite.write_text(text)
        proc = _cli("validate", str(suite), cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
        assert proc.returncode == (0 if ok else 2), proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
        if not ok:
            assert f"{suite}:" in proc.stderr and ".path" in proc.stderr, proc.stderr
        ran = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("imported", "ran")))
        assert ran == [], f"validating {path} ran code: {ran}"
    after = sorted(p.name for p in tmp_path.iterdir())
    assert after == sorted(before + ["checkpoint.yaml", "model.yaml"]), "validation wrote nothing else"
    assert (pkg / "sub" / "m.gguf").exists()


def test_a_pkg_path_resolves_to_the_file_inside_the_package_without_importing(tmp_path, monkeypatch):
    from esbench.models import _gguf_file

    pkg = _planted_package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _gguf_file("pkg:plantedpkg.sub/m.gguf") == pkg / "sub" / "m.gguf"
    assert "plantedpkg" not in sys.modules and not (tmp_path / "imported-init").exists()


# ---------------------------------------------------------------------------------------------------------------
# Names, numbers: (id, suite text, line, field path, message fragment)

NAMES = [
    ("ANSI escape in a model name", VALID.replace("  tiny:\n", '  "\\e[31mred":\n'), 5, "models", "invalid name"),
    ("RTL override in a dataset name", VALID.replace("  arith:", '  "ar\\u202eith":'), 8, "datasets", "invalid name"),
    ("path in a dataset name", VALID.replace("  arith:", '  "../../x":'), 8, "datasets", "invalid name"),
    ("newline in a method name", VALID.replace("  base: {}", '  "base\\n": {method: base}'), 11, "methods", "invalid"),
    ("over-long suite name", VALID.replace("name: demo", "name: " + "a" * 200), 2, "name", "at most 64"),
    (
        "markup in a sparsity method",
        VALID + "  sparsity: {taus: [0.1], methods: ['[red]x']}\n",
        20,
        "eval.sparsity.methods[0]",
        "pattern",
    ),
    (
        "markup in a revision",
        VALID.replace("path: builtin:tiny", "path: builtin:tiny\n    revision: '[b]x'"),
        6,
        "models.tiny.revision",
        "pattern",
    ),
]

NUMBERS = [
    ("inf sigma", ES.replace("sigma: 0.01", "sigma: .inf"), 12, "methods.es.sigma", "finite"),
    (
        "nan reward",
        ES.replace("sigma: 0.01", "sigma: 0.01, reward_correct: .nan"),
        12,
        "methods.es.reward_correct",
        "finite",
    ),
    (
        "inf learning rate",
        GRPO.replace("{method: grpo}", "{method: grpo, learning_rate: .inf}"),
        12,
        "methods.grpo.learning_rate",
        "finite",
    ),
    ("inf temperature", VALID.replace("temperature: 1.0", "temperature: .inf"), 18, "eval.temperature", "finite"),
    ("nan tau", VALID + "  sparsity: {taus: [.nan]}\n", 20, "eval.sparsity.taus[0]", "finite"),
    ("inf diversity sigma", VALID + "  diversity: {sigma: .inf}\n", 20, "eval.diversity.sigma", "finite"),
    (
        "nan stage split",
        ES.replace("0.01}", "0.01}\n  seq: {sequence: [es, es], split: [.nan, .5]}"),
        13,
        "methods.seq.split[0]",
        "finite",
    ),
    ("zero budget of a trained method", ES.replace("budgets: [4]", "budgets: [0, 4]"), 21, "budgets", "> 0"),
    ("zero epochs", ES.replace("budgets: [4]", "budgets: [0ep, 4]"), 21, "budgets", "> 0"),
    ("absurd budget", ES.replace("budgets: [4]", "budgets: [1000000000000]"), 21, "budgets", "at most"),
    ("absurd epochs", ES.replace("budgets: [4]", "budgets: [99999999999ep]"), 21, "budgets", "at most"),
    ("seed numpy cannot take", VALID.replace("seeds: [0, 1]", "seeds: [0, 4294967296]"), 12, "seeds", "at most"),
    ("absurd dataset size", VALID.replace("size: 64", "size: 1000000000000"), 9, "datasets.arith.size", "less than"),
    (
        "absurd sample count",
        VALID.replace("n: 8", "n: 1000000000").replace("k: [1, 8]", "k: [1]"),
        16,
        "eval.n",
        "less than",
    ),
    (
        "absurd token budget",
        VALID.replace("max_new_tokens: 40", "max_new_tokens: 1000000000000"),
        19,
        "eval.max_new_tokens",
        "less than",
    ),
    ("absurd probe", VALID + "  probe: {prompts: 1000000000000}\n", 20, "eval.probe.prompts", "less than"),
    # method configs (esbench.limits): sizes, token budgets and step sizes have ceilings too
    ("absurd population", ES.replace("population: 4", "population: 10000000000"), 12, "methods.es.population", "less"),
    ("sigma above 1", ES.replace("sigma: 0.01", "sigma: 3.0"), 12, "methods.es.sigma", "less than"),
    (
        "learning rate above 1",
        GRPO.replace("{method: grpo}", "{method: grpo, learning_rate: 5.0}"),
        12,
        "methods.grpo.learning_rate",
        "less than",
    ),
    (
        "absurd completion length",
        GRPO.replace("{method: grpo}", "{method: grpo, max_completion_length: 100000000000}"),
        12,
        "methods.grpo.max_completion_length",
        "less than",
    ),
]


CASES = NAMES + NUMBERS


@pytest.mark.parametrize(("text", "line", "path", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_names_and_numbers_exit_2_with_file_line_and_field(tmp_path, capsys, text, line, path, fragment):
    suite = tmp_path / "suite.yaml"
    suite.write_text(text)
    out = tmp_path / "out"
    with pytest.raises(SuiteError) as exc:
        load_suite(suite)
    rendered = exc.value.render()
    assert f"{suite}:{line}: {path}" in rendered and fragment in rendered, rendered
    for argv in (
        ["validate", str(suite)],
        ["plan", str(suite), "--out", str(out)],
        ["run", str(suite), "--out", str(out)],
    ):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"{suite}:{line}: {path}" in err, err
    assert all(ch.isprintable() or ch == "\n" for ch in err), f"raw control characters reach the terminal: {err!r}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite.yaml"], "a refused suite writes nothing"


def test_names_inside_the_limits_still_validate(tmp_path):
    text = VALID.replace("name: demo", "name: " + "d" * 64).replace("  tiny:\n", "  Tiny_model-1.5:\n")
    suite = tmp_path / "suite.yaml"
    suite.write_text(text + "budgets: [1000000]\n")
    cells = load_suite(suite).cells()
    assert cells[0].labels["model"] == "Tiny_model-1.5" and cells[0].labels["suite"] == "d" * 64


# ---------------------------------------------------------------------------------------------------------------
# Special files and --out


def test_a_fifo_as_the_suite_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "suite.yaml"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    try:
        proc = _cli("validate", str(fifo), cwd=tmp_path, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("esbench validate blocked on a FIFO")
    assert time.monotonic() - t0 < 30
    assert proc.returncode == 2 and f"{fifo}:" in proc.stderr and "not a regular file" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    with pytest.raises(SuiteError, match="not a regular file"):
        load_suite("/dev/zero")


def test_out_naming_a_regular_file_is_refused(tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text(VALID)
    out = tmp_path / "runs"
    out.write_text("not a folder\n")
    for cmd in ("run", "plan"):
        assert main([cmd, str(suite), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"--out {out}" in err and "not a folder" in err, err
    assert out.read_text() == "not a folder\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "suite.yaml"]
