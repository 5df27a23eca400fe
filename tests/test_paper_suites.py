"""The paper suites encode arXiv 2608.27351 exactly: Table 14 (training) and Table 15 (evaluation), field by field.

The settings are parsed from `tests/fixtures/paper_settings.md`, a verbatim copy of the tables' lines (checked
against `../shared/reference/paper_tables.md` when that file is present), never typed into this test by hand.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
from pathlib import Path

import pytest

from esbench.spec import load_suite

REPO = Path(__file__).resolve().parent.parent
SETTINGS = REPO / "tests" / "fixtures" / "paper_settings.md"
ORIGINAL = REPO.parent / "shared" / "reference" / "paper_tables.md"
TASK_NAMES = {
    "GSM8K": "gsm8k",
    "DeepScaleR": "deepscaler",
    "CSQA": "commonsense_qa",
    "CommonsenseQA": "commonsense_qa",
    "HotpotQA": "hotpotqa",
    "Countdown": "countdown",
    "GPQA": "gpqa_diamond",
    "GPQA Diamond": "gpqa_diamond",
    "MBPP": "mbpp",
    "AIME24": "aime24",
    "AIME25": "aime25",
    "AMC23": "amc23",
    "MATH500": "math500",
}
PAPER_SUITES = ["paper-easy", "paper-hard", "paper-easy-smoke"]
EXPERIMENT_SUITES = ["paper-population", "paper-ablations", "paper-subtraction"]  # issue 14: beyond the main grid


# ---------------------------------------------------------------------------------------------------------------
# parsing the tables


def _entries(text: str) -> dict[str, str]:
    """`Label: text` entries of Table 14/15, continuation lines (indented) joined."""
    joined: list[str] = []
    for line in text.splitlines():
        if line.startswith("  ") and joined:
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    out = {}
    for line in joined:
        m = re.match(r"^(Easy ES|Easy GRPO|Hard ES|Hard GRPO|ES verifier reward): (.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
        if line.startswith("## Table 15"):
            out["Table 15"] = line
        if line.startswith(("## Table 2 ", "## Table 3 ")):
            out[line.split(" - ")[0].removeprefix("## ")] = line
    return out


def _num(pattern: str, text: str, cast=float):
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not found in {text!r}"
    return cast(m.group(1))


def _es(text: str) -> dict:
    out = {
        "population": _num(r"\bN=(\d+)", text, int),
        "sigma": _num(r"sigma=([\d.e-]+)", text),
        "alpha": _num(r"alpha=([\d.e-]+)", text),
        "batch_size": _num(r"batch (\d+)", text, int),
        "temperature": _num(r"\bT=([\d.]+)", text),
        "max_new_tokens": _num(r"(?<![\d.e-])(\d{4})(?!\d|\.\d)", text, int),
    }
    if "population z-score" in text:
        out["centered_ranks"] = False
    return out


def _grpo(text: str) -> dict:
    out = {
        "prompts_per_rollout": _num(r"batch (\d+)", text, int),
        "num_generations": _num(r"(\d+) responses", text, int),
        "learning_rate": _num(r"\blr ([\d.e-]+)", text),
        "temperature": _num(r"\bT=([\d.]+)", text),
        "max_completion_length": _num(r"(?<![\d.e-])(\d{4})(?!\d|\.\d)", text, int),
    }
    for key, pattern, cast in (
        ("ppo_minibatch_prompts", r"PPO minibatch (\d+)", int),
        ("micro_batch", r"microbatch (\d+)", int),
        ("clip_epsilon", r"clip ([\d.]+)", float),
        ("kl_coef", r"KL coef ([\d.]+)", float),
    ):
        if re.search(pattern, text):
            out[key] = _num(pattern, text, cast)
    if "group-relative" in text:
        out["scale_rewards"] = "group"
    return out


def _models(text: str) -> list[str]:
    names = text.split(",")[0].split("/")
    return [n if n.endswith("Instruct") or "Distill" in n else f"{n}-Instruct" for n in names]


def parse_settings(text: str) -> dict:
    e = _entries(text)
    reward = {
        "reward_correct": _num(r"([\d.]+) correct,", e["ES verifier reward"]),
        "reward_format": _num(r"([\d.]+) correct-format-but-wrong", e["ES verifier reward"]),
    }
    t15 = e["Table 15"]
    ks = [int(k) for k in _num(r"K in \{([\d,]+)\}", t15, str).split(",")]
    evaluation = {
        "n": _num(r"(\d+) samples/problem", t15, int),
        "temperature": _num(r"\bT=([\d.]+)", t15),
        "top_p": _num(r"top_p ([\d.]+)", t15),
        "k": sorted({1, *ks}),  # Pass@1 = c/M is reported next to Pass@K
    }
    held_easy = re.findall(r"^  - ([A-Za-z ]+?)(?:,|\s*\(|$)", text.split("- Held-out tasks, easy setting:")[1], re.M)
    held_easy = held_easy[:5]
    held_hard = re.search(r"Held-out tasks, hard setting: (.*)\.", text).group(1).split(", ")

    def tasks(header: str) -> list[str]:
        cols = header.split("Tasks:")[-1] if "Tasks:" in header else header.split(")")[-1]
        return [TASK_NAMES[c.strip(" .")] for c in cols.split("|") if c.strip(" .") != "Average"]

    easy_es, hard_es = _es(e["Easy ES"]), _es(e["Hard ES"])
    easy_grpo = _grpo(e["Easy GRPO"])
    hard_grpo = _grpo(e["Hard GRPO"])
    return {
        "easy": {
            "models": _models(e["Easy ES"]),
            "task": TASK_NAMES[e["Easy ES"].split(", ")[1]],
            "epochs": _num(r"(\d+) epochs?", e["Easy ES"], int),
            "es": {**easy_es, **reward},
            "grpo": {**easy_grpo, **reward},
            "eval": {
                **evaluation,
                "max_new_tokens": _num(r"max new tokens (\d+) \(Easy\)", t15, int),
                "greedy": "Easy also does 1-sample greedy eval" in t15,
            },
            "eval_tasks": tasks(e["Table 2"]),
            "held_out": [TASK_NAMES[h.strip()] for h in held_easy],
        },
        "hard": {
            "models": [e["Hard ES"].split(",")[0]],
            "task": TASK_NAMES[e["Hard ES"].split(", ")[1]],
            "epochs": _num(r"(\d+) epochs?", e["Hard ES"], int),
            "es": {**hard_es, **reward},
            "grpo": {**hard_grpo, "reward_correct": reward["reward_correct"], "reward_format": reward["reward_format"]},
            "grpo_checkpoint": "SofT-GRPO released checkpoint" in e["Hard GRPO"],
            "eval": {
                **evaluation,
                "max_new_tokens": _num(r"/ (\d+) \(Hard\)", t15, int),
                "greedy": False,  # Table 15: the greedy pass is the easy setting's
            },
            "eval_tasks": tasks(e["Table 3"]) + [TASK_NAMES[h] for h in held_hard],
            "held_out": [TASK_NAMES[h] for h in held_hard],
        },
    }


@pytest.fixture(scope="module")
def paper() -> dict:
    return parse_settings(SETTINGS.read_text())


# sha256 of the copied lines, taken when they were copied
COPY_SHA256 = "d4c504c64bcaf727ca45b4c4bee03880e6dfbda0a040c1d9f45ba485749af96f"


def test_settings_copy_matches_the_reference_tables():
    """Every line of the copy appears verbatim in paper_tables.md (when this checkout has it), and the copy is
    unchanged since it was taken (always)."""
    copied = SETTINGS.read_text().splitlines()
    body = copied[copied.index("## Task headers of Tables 2 and 3") + 1 :]
    assert hashlib.sha256("\n".join(body).encode()).hexdigest() == COPY_SHA256
    if not ORIGINAL.exists():
        return
    original = ORIGINAL.read_text().splitlines()
    missing = [ln for ln in body if ln and not ln.startswith("## Task headers") and ln not in original]
    missing = [ln for ln in missing if ln != "## Protocol facts (held-out tasks)"]
    assert not missing


def test_parser_reads_the_tables(paper):
    """Guards the parser itself: a few values read off the printed tables."""
    assert paper["easy"]["es"]["sigma"] == 1.5e-3 and paper["easy"]["es"]["temperature"] == 0
    assert paper["easy"]["grpo"]["ppo_minibatch_prompts"] == 32
    assert paper["hard"]["grpo"]["kl_coef"] == 0.001 and paper["hard"]["es"]["max_new_tokens"] == 8192
    assert paper["easy"]["models"] == ["Qwen2.5-1.5B-Instruct", "Llama-3.2-3B-Instruct", "Qwen2.5-7B-Instruct"]
    assert paper["easy"]["held_out"] == ["commonsense_qa", "hotpotqa", "countdown", "gpqa_diamond", "mbpp"]
    assert paper["easy"]["eval"]["k"] == [1, 16, 32]


# ---------------------------------------------------------------------------------------------------------------
# comparing the suites


def _configs(suite) -> dict[str, list[dict]]:
    """Every training config a suite uses, by kind, including the stages inside sequences."""
    out: dict[str, list[dict]] = {}
    for kind, cfg, _ in suite.methods.values():
        dumped = cfg.model_dump(mode="json")
        stages = dumped["stages"] if kind == "sequence" else [{"kind": kind, "config": dumped}]
        for st in stages:
            out.setdefault(st["kind"], []).append(st["config"])
    return out


def _diff(expected: dict, actual: dict, where: str) -> list[str]:
    return [f"{where}.{k}: suite {actual.get(k)!r} != paper {v!r}" for k, v in expected.items() if actual.get(k) != v]


@pytest.mark.parametrize("name", PAPER_SUITES)
def test_suite_settings_equal_tables_14_and_15(name, paper):
    setting = paper["hard" if "hard" in name else "easy"]
    smoke = name.endswith("-smoke")
    suite = load_suite(REPO / "suites" / f"{name}.yaml")
    spec = suite.spec
    problems: list[str] = []
    models = [m.path.split("/")[-1] for m in spec.models.values()]
    expected_models = setting["models"][:1] if smoke else setting["models"]
    if models != expected_models:
        problems.append(f"models {models} != {expected_models}")
    if [d.task for d in spec.datasets.values()] != [setting["task"]]:
        problems.append(f"datasets {spec.datasets} != {setting['task']}")
    if not smoke and spec.budgets != [f"{setting['epochs']}ep"]:
        problems.append(f"budgets {spec.budgets} != {setting['epochs']} epochs")
    configs = _configs(suite)
    for cfg in configs["es"]:
        problems += _diff(setting["es"], cfg, "es")
    for cfg in configs["grpo"]:
        problems += _diff(setting["grpo"], cfg, "grpo")
    if setting.get("grpo_checkpoint"):
        assert configs.get("checkpoint"), "the hard GRPO row must be the released checkpoint"
    ev = spec.eval
    problems += _diff(setting["eval"], {**ev.model_dump(), "k": ev.ks}, "eval")
    tasks = setting["eval_tasks"]
    if smoke:
        assert set(ev.tasks) <= set(tasks) and setting["task"] in ev.tasks and ev.limit
    else:
        if sorted(ev.tasks) != sorted(tasks):
            problems.append(f"eval.tasks {ev.tasks} != {tasks}")
        if sorted(ev.held_out) != sorted(setting["held_out"]):
            problems.append(f"eval.held_out {ev.held_out} != {setting['held_out']}")
        assert ev.limit is None, "the paper evaluates every problem"
    assert not problems, "\n".join(problems)


def test_a_changed_setting_is_caught(paper, tmp_path):
    """The comparison fails on any difference: flip one ES field and one eval field."""
    text = (REPO / "suites" / "paper-easy.yaml").read_text()
    bad = tmp_path / "paper-easy.yaml"
    bad.write_text(
        text.replace("sigma: 0.0015", "sigma: 0.002").replace("  temperature: 0.6\n", "  temperature: 0.7\n")
    )
    suite = load_suite(bad)
    problems = []
    for cfg in _configs(suite)["es"]:
        problems += _diff(paper["easy"]["es"], cfg, "es")
    problems += _diff(paper["easy"]["eval"], {**suite.spec.eval.model_dump(), "k": suite.spec.eval.ks}, "eval")
    assert any("sigma" in p for p in problems) and any("eval.temperature" in p for p in problems)


def _paper_grid(table: int) -> set[tuple[str, str]]:
    data = json.loads((REPO / "leaderboard" / "reference" / "paper_tables.json").read_text())
    return {(v["model"], v["method"]) for v in data["values"] if v["table"] == table}


@pytest.mark.parametrize(("name", "table"), [("paper-easy", 2), ("paper-hard", 3), ("paper-easy-smoke", 2)])
def test_cell_counts_match_the_papers_grid(name, table):
    suite = load_suite(REPO / "suites" / f"{name}.yaml")
    grid = _paper_grid(table)
    if name.endswith("-smoke"):
        grid = {(m, meth) for m, meth in grid if m == "Qwen2.5-1.5B-Instruct"}
    cells = suite.cells()
    assert len(cells) == len(grid)
    methods = {c.labels["method"] for c in cells}
    assert methods == {"base", "es", "grpo", "es-grpo", "grpo-es"}
    assert {meth for _, meth in grid} == {"Base", "ES", "GRPO", "ES->GRPO", "GRPO->ES"}


def test_models_and_datasets_are_pinned():
    from esbench.tasks import get_task, hub

    for name in PAPER_SUITES + EXPERIMENT_SUITES:
        suite = load_suite(REPO / "suites" / f"{name}.yaml")
        for m in suite.spec.models.values():
            assert re.fullmatch(r"[0-9a-f]{40}", m.revision or ""), f"{name}: {m.path} is not pinned"
        used = {d.task for d in suite.spec.datasets.values()} | set(suite.spec.eval.tasks)
        for t in used:
            key = get_task(t).source.removeprefix("hub:")
            assert key in hub.SOURCES
    # the one source without a confirmed full commit is known and listed (README/CHANGELOG say so)
    assert hub.UNPINNED == {"countdown"}


@pytest.mark.parametrize("name", PAPER_SUITES + EXPERIMENT_SUITES)
def test_validate_and_plan_work_offline(name, monkeypatch, capsys, tmp_path):
    from esbench import cli

    def no_network(*args, **kwargs):
        raise AssertionError("validate/plan must not touch the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    path = str(REPO / "suites" / f"{name}.yaml")
    assert cli.main(["validate", path]) == 0
    assert cli.main(["plan", path, "--json", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = json.loads(out[out.index("[") :])
    assert len(rows) == len(load_suite(path).cells()) and {r["status"] for r in rows} == {"pending"}


def test_hard_sequences_start_from_the_checkpoint_and_train_grpo_with_table_14():
    from esbench.methods.checkpoint import model_to_load

    suite = load_suite(REPO / "suites" / "paper-hard.yaml")
    cells = {c.labels["method"]: c for c in suite.cells()}
    model = cells["base"].spec["model"]
    soft = model_to_load(cells["grpo"].spec["method"], model)
    assert soft["path"] == "zz1358m/SofT-GRPO-master" and soft["subfolder"] == "saved_weight/Deepeeek-Qwen-1.5B+GRPO"
    assert re.fullmatch(r"[0-9a-f]{40}", soft["revision"] or ""), "the SofT-GRPO checkpoint is pinned"
    assert model_to_load(cells["grpo-es"].spec["method"], model)["path"] == "zz1358m/SofT-GRPO-master"
    assert model_to_load(cells["es-grpo"].spec["method"], model)["path"] == model["path"]
    kinds = [s["kind"] for s in cells["es-grpo"].spec["method"]["config"]["stages"]]
    assert kinds == ["es", "grpo"] and "grpo-train" not in cells


def _taus(table: int) -> list[float]:
    data = json.loads((REPO / "leaderboard" / "reference" / "paper_tables.json").read_text())
    return sorted(
        {float(v["tau"]) for v in data["values"] if v["table"] == table and v.get("tau") not in (None, "full")}
    )


@pytest.mark.parametrize(("name", "table", "task"), [("paper-easy", 11, "gsm8k"), ("paper-hard", 12, "math500")])
def test_paper_suites_measure_what_tables_11_12_and_fig_2_measured(name, table, task):
    """Issue 13: the artifact's reward and ES arithmetic, and the analyses switched on with the papers' settings."""
    suite = load_suite(REPO / "suites" / f"{name}.yaml")
    assert {d.reward for d in suite.spec.datasets.values()} == {"paper"}
    sp = suite.spec.eval.sparsity
    assert sp.taus == _taus(table) and sp.task == task and sp.n == 32 and sp.methods == ["es"]
    probe = suite.spec.eval.probe
    assert probe.task == "gpqa_diamond" and probe.samples >= 32  # Fig. 2: GPQA entropy with Pass@16 and Pass@32
    assert suite.spec.eval.diversity.sigma == suite.methods["es"][1].sigma
    es = suite.methods["es"][1]
    assert es.data_order == "keep-tail" and es.precision == "paper-bf16"
    if name == "paper-easy":  # the artifact's topology (paper_protocol.md section 9)
        assert (es.engines, es.engine_sync_every, es.shuffle_seed) == (8, 117, 42)
        (cell,) = [c for c in suite.cells() if c.labels["method"] == "es"][:1]
        from esbench.methods.es import ES

        assert ES.updates_for(cell.spec["budget"], 7473, es) == 234  # 2 x 117, the tail batch kept


def _launch_line(name: str) -> str:
    return (REPO / "suites" / f"{name}.yaml").read_text().splitlines()[0]


@pytest.mark.parametrize("name", EXPERIMENT_SUITES)
def test_experiment_suites_begin_with_their_launch_command(name):
    assert _launch_line(name) == f"# esbench run suites/{name}.yaml"


def test_population_suite_is_table_6():
    """Three Qwen2.5 sizes x N in {8, 16, 32, 64}, at least 300 updates, otherwise the easy-ES defaults."""
    suite = load_suite(REPO / "suites" / "paper-population.yaml")
    cells = suite.cells()
    grid = {(c.spec["model"]["path"], c.spec["method"]["config"]["population"]) for c in cells}
    sizes = ["Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct"]
    assert len(cells) == 12 and grid == {(m, n) for m in sizes for n in (8, 16, 32, 64)}
    assert all(c.spec["budget"] >= 300 for c in cells)
    easy = load_suite(REPO / "suites" / "paper-easy.yaml").methods["es"][1].model_dump()
    for c in cells:  # only N differs from paper-easy's ES
        cfg = c.spec["method"]["config"]
        assert {k for k in cfg if cfg[k] != easy[k]} <= {"population"}


def test_ablation_arms_are_fig_1c_at_matched_evaluations():
    suite = load_suite(REPO / "suites" / "paper-ablations.yaml")
    arms = {name: cfg for name, (_, cfg, _) in suite.methods.items()}
    assert set(arms) == {"es-zscore", "es-none", "es-two-point"}
    assert arms["es-zscore"].normalization == "zscore" and arms["es-none"].normalization == "none"
    assert arms["es-two-point"].antithetic and arms["es-two-point"].normalization == "zscore"
    # matched perturbed evaluations: every arm rolls out the same number of perturbed models per update
    assert len({cfg.population for cfg in arms.values()}) == 1
    from esbench.methods.es import ES

    (cell,) = [c for c in suite.cells() if c.labels["method"] == "es-zscore"]
    assert ES.updates_for(cell.spec["budget"], 7473, arms["es-zscore"]) == 3 * 117  # three epochs


def test_subtraction_suite_is_app_e():
    suite = load_suite(REPO / "suites" / "paper-subtraction.yaml")
    ((kind, cfg, trains),) = suite.methods.values()
    assert kind == "subtraction" and trains
    assert cfg.sigmas == [1e-4, 3e-4, 1e-3]
    (cell,) = suite.cells()
    directions = cell.spec["budget"]
    assert (cfg.prompts, cfg.seeds, directions) == (16, 16, 4)  # regenerated-rollout reward: 16 x 16 x 4
    assert (cfg.prompts, cfg.fixed_samples, directions) == (16, 8, 4)  # frozen rollouts: 16 x 8 x 4
    assert cfg.ce_prompts * directions == 128  # the fixed batch's 128 observations
    assert cell.spec["model"]["path"] == "Qwen/Qwen2.5-1.5B-Instruct"  # the base model of Table 13
