"""Suite parsing, validation errors (file, line, field path, expectation) and content-hashed cell ids."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from esbench.cli import main
from esbench.spec import SuiteError, load_suite

VALID = """\
# esbench run suite.yaml
name: demo
models:
  tiny:
    path: builtin:tiny
datasets:
  arith:
    task: tiny_arith
    size: 64
methods:
  base: {}
seeds: [0, 1]
eval:
  tasks: [tiny_arith, tiny_max]
  held_out: [tiny_max]
  n: 8
  k: [1, 8]
  temperature: 1.0
  max_new_tokens: 40
"""


def write(tmp_path, text, name="suite.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_valid_suite_expands_grid(tmp_path):
    suite = load_suite(write(tmp_path, VALID))
    cells = suite.cells()
    assert [c.spec["seed"] for c in cells] == [0, 1]
    assert all(c.spec["dataset"] is None and c.spec["budget"] == 0 for c in cells), "base ignores data/budget"
    assert cells[0].spec["eval"]["k"] == [1, 8]
    assert len({c.id for c in cells}) == 2


def test_default_k_is_powers_of_two_up_to_n(tmp_path):
    suite = load_suite(write(tmp_path, VALID.replace("  k: [1, 8]\n", "").replace("n: 8", "n: 12")))
    assert suite.cells()[0].spec["eval"]["k"] == [1, 2, 4, 8]


REFORMATTED = """\
# same suite, keys reordered, flow style, comments, a renamed model label, defaults written out
eval: {max_new_tokens: 40, temperature: 1.0, k: [8, 1], n: 8, tasks: [tiny_arith, tiny_max],
       held_out: [tiny_max], top_p: 1.0, greedy: true}
seeds: [1, 0]
methods: {base: {method: base}}
datasets: {arith: {size: 64, task: tiny_arith}}
models:
  my-tiny: {revision: null, path: "builtin:tiny"}   # label differs, content does not
name: demo
"""


def test_cell_ids_are_content_hashes_stable_under_reformatting(tmp_path):
    a = {c.spec["seed"]: c.id for c in load_suite(write(tmp_path, VALID, "a.yaml")).cells()}
    b = {c.spec["seed"]: c.id for c in load_suite(write(tmp_path, REFORMATTED, "b.yaml")).cells()}
    assert a == b
    changed = load_suite(write(tmp_path, VALID.replace("n: 8", "n: 16"), "c.yaml")).cells()
    assert {c.id for c in changed}.isdisjoint(a.values()), "a different eval setting must change the id"


def test_cell_ids_are_pinned_across_machines(tmp_path):
    """The id is a function of content only: recomputing it from the canonical JSON gives the same value."""
    import hashlib
    import json

    cell = load_suite(write(tmp_path, VALID)).cells()[0]
    blob = json.dumps(cell.spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert cell.id == hashlib.sha256(blob.encode()).hexdigest()[:16]


def test_a_tiny_cell_id_names_the_model_recipe(tmp_path, monkeypatch):
    """`builtin:tiny` is built from code, so its cells are stamped with the recipe's hash: a new tiny model gives
    new ids (an old run is neither taken for it nor resumed as it), and a cell of another recipe is refused."""
    from esbench.models import tiny
    from esbench.spec import validate_cell
    from esbench.spec_schema import ModelSpec

    suite = write(tmp_path, VALID)
    cells = load_suite(suite).cells()
    assert all(c.spec["model"]["recipe"] == tiny.recipe_hash() for c in cells)
    stale = {**cells[0].spec, "model": {**cells[0].spec["model"], "recipe": "0" * 16}}
    with pytest.raises(ValueError, match="builds builtin:tiny from recipe"):
        validate_cell({**cells[0].to_json(), "spec": stale}, "cell.json")
    with pytest.raises(ValueError, match="belongs to `builtin:` models"):
        ModelSpec(path="Qwen/Qwen2.5-1.5B-Instruct", recipe="0" * 16)
    assert "recipe" not in ModelSpec(path="Qwen/Qwen2.5-1.5B-Instruct").model_dump(), "hub cells keep their ids"
    recipe = {**tiny.RECIPE, "data": {**tiny.RECIPE["data"], "grouped_share": 0.1}}
    monkeypatch.setattr(tiny, "RECIPE", recipe)
    assert {c.id for c in load_suite(suite).cells()}.isdisjoint(c.id for c in cells)


# (description, suite text, expected line, expected field path, expected message fragment)
BAD = [
    ("yaml syntax", VALID.replace("  n: 8", "  n: [8"), 17, "", "YAML syntax error"),
    ("unknown top-level key", VALID + "extra: 1\n", 20, "extra", "unknown key 'extra'"),
    (
        "unknown nested key",
        VALID.replace("    size: 64", "    size: 64\n    sise: 3"),
        10,
        "datasets.arith.sise",
        "unknown key",
    ),
    ("wrong type", VALID.replace("n: 8", "n: eight"), 16, "eval.n", "valid integer"),
    ("wrong type in list", VALID.replace("seeds: [0, 1]", "seeds: [0, x]"), 12, "seeds[1]", "valid integer"),
    ("out of range n", VALID.replace("n: 8", "n: 0"), 16, "eval.n", "greater than 0"),
    ("out of range top_p", VALID.replace("  n: 8", "  top_p: 1.5\n  n: 8"), 16, "eval.top_p", "less than or equal"),
    (
        "negative temperature",
        VALID.replace("temperature: 1.0", "temperature: -1"),
        18,
        "eval.temperature",
        "greater than or equal to 0",
    ),
    ("k larger than n", VALID.replace("k: [1, 8]", "k: [1, 16]"), 17, "eval.k", "larger than n=8"),
    ("unknown method", VALID.replace("base: {}", "bogus: {}"), 11, "methods.bogus.method", "unknown method 'bogus'"),
    (
        "unknown builtin model",
        VALID.replace("builtin:tiny", "builtin:huge"),
        5,
        "models.tiny.path",
        "unknown builtin model",
    ),
    ("unknown local model", VALID.replace("builtin:tiny", "./no/such/dir"), 5, "models.tiny.path", "unknown model"),
    (
        "unknown eval task",
        VALID.replace("tasks: [tiny_arith, tiny_max]", "tasks: [tiny_arith, gsm9k]"),
        14,
        "eval.tasks",
        "unknown task 'gsm9k'",
    ),
    ("unknown train task", VALID.replace("task: tiny_arith", "task: nope"), 8, "datasets.arith.task", "unknown task"),
    (
        "duplicate model name",
        VALID.replace("models:\n", "models:\n  tiny: {path: builtin:tiny}\n"),
        5,
        "models.tiny",
        "duplicate key 'tiny'",
    ),
    (
        "duplicate method name",
        VALID.replace("  base: {}", "  base: {}\n  base: {method: base}"),
        12,
        "methods.base",
        "duplicate key",
    ),
    ("duplicate seeds", VALID.replace("seeds: [0, 1]", "seeds: [1, 1]"), 12, "seeds", "duplicate"),
    (
        "empty grid: no methods",
        VALID.replace("  base: {}\n", "").replace("methods:", "methods: {}"),
        10,
        "methods",
        "at least 1",
    ),
    ("empty grid: no seeds", VALID.replace("seeds: [0, 1]", "seeds: []"), 12, "seeds", "at least 1"),
    (
        "empty grid: no models",
        VALID.replace("models:\n  tiny:\n    path: builtin:tiny\n", "models: {}\n"),
        3,
        "models",
        "at least 1",
    ),
    ("missing field", VALID.replace("name: demo\n", ""), 2, "name", "required"),
    (
        "held-out task not evaluated",
        VALID.replace("held_out: [tiny_max]", "held_out: [tiny_reverse]"),
        15,
        "eval.held_out",
        "not in eval.tasks",
    ),
    (
        "bad config key for method",
        VALID.replace("base: {}", "base: {sigma: 0.1}"),
        11,
        "methods.base.sigma",
        "unknown key",
    ),
    ("not a mapping", "- just\n- a list\n", 1, "", "must be a YAML mapping"),
    (
        "es sigma must be positive",
        VALID.replace("base: {}", "es: {method: es, sigma: -1}"),
        11,
        "methods.es.sigma",
        "greater than 0",
    ),
    (
        "es antithetic with odd population",
        VALID.replace("base: {}", "es: {method: es, population: 5, antithetic: true}") + "budgets: [4]\n",
        11,
        "methods.es",
        "even population",
    ),
    (
        "es unknown option",
        VALID.replace("base: {}", "es: {method: es, sigmaa: 1}"),
        11,
        "methods.es.sigmaa",
        "unknown key",
    ),
    (
        "trained method without datasets",
        VALID.replace("base: {}", "es: {method: es}").replace(
            "datasets:\n  arith:\n    task: tiny_arith\n    size: 64\n", ""
        )
        + "budgets: [5]\n",
        7,
        "methods.es",
        "empty grid: datasets is empty",
    ),
    (
        "trained method with empty datasets",
        VALID.replace("base: {}", "es: {method: es}").replace(
            "datasets:\n  arith:\n    task: tiny_arith\n    size: 64\n", "datasets: {}\n"
        )
        + "budgets: [5]\n",
        6,
        "datasets",
        "empty grid: datasets is empty",
    ),
    (
        "trained method without budget",
        VALID.replace("base: {}", "es: {method: es}") + "budgets: [0]\n",
        20,
        "budgets",
        "no budget > 0",
    ),
    (
        "malformed epoch budget",
        VALID.replace("base: {}", "es: {method: es}") + "budgets: [2 epochs]\n",
        20,
        "budgets",
        "'2ep'",
    ),
    (
        "two names for one method config",
        VALID.replace("base: {}", "es: {method: es, sigma: 0.001}\n  es2: {method: es, sigma: 0.001}")
        + "budgets: [4]\n",
        12,
        "methods.es2",
        "same cells",
    ),
]


@pytest.mark.parametrize(("text", "line", "path", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_invalid_suite_exits_2_naming_file_line_field_and_writes_nothing(tmp_path, capsys, text, line, path, fragment):
    suite = write(tmp_path, text)
    out = tmp_path / "out"
    for argv in (["validate", str(suite)], ["plan", str(suite)], ["run", str(suite), "--out", str(out)]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    expected = f"{suite}:{line}: {path + ': ' if path else ''}"
    assert expected in err, err
    assert fragment in err, err
    assert not out.exists(), "an invalid suite must write nothing"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite.yaml"]


def test_trained_methods_expand_over_datasets_budgets_and_seeds(tmp_path):
    text = VALID.replace("base: {}", "base: {}\n  es: {method: es, sigma: 0.01}") + "budgets: [10, 1ep]\n"
    cells = load_suite(write(tmp_path, text)).cells()
    es = [c for c in cells if c.spec["method"]["kind"] == "es"]
    assert len(cells) == 2 + 4 and len(es) == 4
    assert sorted({c.spec["budget"] for c in es}, key=str) == [10, "1ep"]
    assert es[0].spec["method"]["config"]["sigma"] == 0.01 and es[0].spec["method"]["config"]["population"] == 30
    assert es[0].spec["dataset"] == {"task": "tiny_arith", "size": 64, "reward": "verifier"}


def test_unknown_keys_name_the_expected_ones(tmp_path):
    for text, expected in [
        (
            VALID.replace("n: 8", "n: 8\n  samples: 3"),
            "eval.samples: unknown key 'samples'; expected one of: tasks, held_out, limit, n, k",
        ),
        (
            VALID.replace("base: {}", "es: {method: es, sigmaa: 1}") + "budgets: [4]\n",
            "methods.es.sigmaa: unknown key 'sigmaa'; expected one of: population, sigma, alpha",
        ),
        (
            VALID.replace("size: 64", "size: 64\n    split: x"),
            "datasets.arith.split: unknown key 'split'; expected one of: task, size",
        ),
    ]:
        with pytest.raises(SuiteError) as exc:
            load_suite(write(tmp_path, text))
        assert expected in str(exc.value)


def test_error_lists_every_problem(tmp_path):
    text = VALID.replace("n: 8", "n: 0").replace("seeds: [0, 1]", "seeds: [x]")
    with pytest.raises(SuiteError) as exc:
        load_suite(write(tmp_path, text))
    paths = [p[1] for p in exc.value.problems]
    assert "eval.n" in paths and "seeds[0]" in paths


def test_missing_file_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(tmp_path / "absent.yaml")])
    assert exc.value.code == 2
    assert "absent.yaml" in capsys.readouterr().err


def test_shipped_suites_validate(repo):
    for path in sorted((repo / "suites").glob("*.yaml")):
        assert load_suite(path).cells(), path
        first = path.read_text().splitlines()[0]
        assert first.startswith("# esbench run suites/"), f"{path.name} must begin with the command that runs it"


def test_the_tiny_suite_copies_stay_the_demo_grid():
    """tiny-vllm.yaml is tiny.yaml on the vLLM backend, and the plug-in example is tiny.yaml plus one method (read as
    YAML: the plug-in need not be installed), so retuning the demo without them (as happened before v1.7) fails."""
    import yaml

    root = Path(__file__).resolve().parent.parent

    def grid(path, *drop):
        return {k: v for k, v in yaml.safe_load((root / path).read_text()).items() if k not in ("name", *drop)}

    demo = grid("suites/tiny.yaml")
    vllm = grid("suites/tiny-vllm.yaml")
    assert vllm.pop("backend") == {"kind": "vllm"} and vllm == demo
    example = grid("examples/esbench-random-search/tiny-random-search.yaml", "description")
    assert example["methods"].pop("random-search")["method"] == "random-search"
    assert example == grid("suites/tiny.yaml", "description")
