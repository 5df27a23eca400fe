"""The paper suites encode arXiv 2608.27351 exactly: Table 14 (training) and Table 15 (evaluation), field by field.

The settings are parsed from `tests/fixtures/paper_settings.md`, a verbatim copy of the tables' lines (checked
against `../shared/reference/paper_tables.md` when that file is present), never typed into this test by hand. The
artifact's training-run line adds the engine topology (8 single-GPU engines, re-synced each epoch) and the dtype
(bf16) that every stage computes in; `tests/methods/test_stage_dtypes.py` checks the stages keep it at run time.
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
        ("kl_coef", r"KL coef(?:ficient)? ([\d.]+)", float),  # v2 writes "KL coefficient" in the easy row
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
    # Table 14's hardware line: the ES runs' engines, each with its own bf16 restore residuals (both settings)
    engines = _num(r"(\d+) single-GPU vLLM engines", e["ES verifier reward"], int)
    easy_es["engines"] = hard_es["engines"] = engines
    run = re.search(r"^- Training run \(easy setting.*$", text, re.M).group(0)  # the artifact's own run
    easy_es["engine_sync_every"] = _num(r"\((\d+) per epoch\)", run, int)  # re-synced after each epoch
    easy_es["shuffle_seed"] = _num(r"seed (\d+)", run, int)
    assert _num(r"(\d+) single-GPU vLLM engines", run, int) == engines
    dtype = {"bf16": "bfloat16"}[_num(r", (bf16)\.$", run, str)]
    easy_grpo = _grpo(e["Easy GRPO"])
    hard_grpo = _grpo(e["Hard GRPO"])
    return {
        "dtype": dtype,
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
COPY_SHA256 = "d33ef7f303e9cb22ace7c23bac11eb2dcb741f222d11885bc15bf61dbe380034"


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
    assert paper["easy"]["grpo"]["kl_coef"] == 0.001 and paper["easy"]["grpo"]["clip_epsilon"] == 0.2  # v2's cell
    assert paper["easy"]["es"]["engines"] == paper["hard"]["es"]["engines"] == 8 and paper["dtype"] == "bfloat16"
    assert (paper["easy"]["es"]["engine_sync_every"], paper["easy"]["es"]["shuffle_seed"]) == (117, 42)
    assert "engine_sync_every" not in paper["hard"]["es"]  # the artifact's run is the easy one
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
    """The comparison fails on any difference: flip one ES field, the easy GRPO's KL and one eval field."""
    text = (REPO / "suites" / "paper-easy.yaml").read_text()
    bad = tmp_path / "paper-easy.yaml"
    bad.write_text(
        text.replace("sigma: 0.0015", "sigma: 0.002")
        .replace("  temperature: 0.6\n", "  temperature: 0.7\n")
        .replace("kl_coef: 0.001 ", "kl_coef: 0.0   ")
    )
    suite = load_suite(bad)
    problems = []
    for cfg in _configs(suite)["es"]:
        problems += _diff(paper["easy"]["es"], cfg, "es")
    for cfg in _configs(suite)["grpo"]:
        problems += _diff(paper["easy"]["grpo"], cfg, "grpo")
    problems += _diff(paper["easy"]["eval"], {**suite.spec.eval.model_dump(), "k": suite.spec.eval.ks}, "eval")
    assert any("sigma" in p for p in problems) and any("eval.temperature" in p for p in problems)
    assert sum("grpo.kl_coef" in p for p in problems) == 3  # the GRPO cell and both sequences' GRPO stages


def _setting(name: str) -> str:
    return "hard" if "hard" in name else "easy"


@pytest.mark.parametrize("name", PAPER_SUITES + EXPERIMENT_SUITES)
def test_every_easy_grpo_has_table_14s_kl(name, paper):
    """v2 Table 14: clip 0.2 and KL coefficient 0.001 for the easy GRPO too, in every GRPO and GRPO stage of every
    suite of the easy setting (the experiment suites train ES only; the hard GRPO is checked with its row)."""
    grpos = _configs(load_suite(REPO / "suites" / f"{name}.yaml")).get("grpo", [])
    expected = paper[_setting(name)]["grpo"]
    assert expected["kl_coef"] == 0.001 and expected["clip_epsilon"] == 0.2
    assert all((g["kl_coef"], g["clip_epsilon"]) == (0.001, 0.2) for g in grpos), grpos
    assert len(grpos) == (3 if name.startswith("paper-easy") else 1 if name == "paper-hard" else 0)


class _SeedRecorder:
    """A backend that records the sampling seed of every `generate` call (one call per member)."""

    def __init__(self):
        self.seeds: list[int | None] = []

    def generate(self, prompts, *, temperature, max_new_tokens, seed):
        from esbench.backends import Generation

        self.seeds.append(seed)
        return [[Generation("", 0)] for _ in prompts]


class _NoEdits:
    def perturb(self, *args):
        pass

    def restore(self):
        pass


@pytest.mark.parametrize("name", PAPER_SUITES + EXPERIMENT_SUITES)
def test_es_runs_the_papers_engines_and_samples_each_member_with_its_own_seed(name, paper):
    """8 single-GPU engines (Table 14's hardware) in every ES, the hard one included; and sampled rollouts (the hard
    setting's T = 0.6) seed each member independently, as vLLM does by default (issue 23): the seeds `generate`
    receives differ across the members of an update and between updates. Common seeds stay a named option."""
    from esbench.es import population
    from esbench.methods.es import ESConfig, rollout_spec

    configs = _configs(load_suite(REPO / "suites" / f"{name}.yaml")).get("es", [])
    assert configs or name == "paper-subtraction"
    for cfg in configs:
        assert cfg["engines"] == paper[_setting(name)]["es"]["engines"] == 8, name
        if cfg["temperature"] == 0:
            continue
        es = ESConfig.model_validate(cfg)
        assert not es.common_sampling_seed, name
        backend = _SeedRecorder()
        for step in (0, 1):
            population.roll_out_members(backend, _NoEdits(), rollout_spec(es), 42, step, range(es.population), ["q"])
        assert None not in backend.seeds and len(set(backend.seeds)) == 2 * es.population, name
        common = rollout_spec(es.model_copy(update={"common_sampling_seed": True}))
        assert len({common.sampling_seed(42, 0, i) for i in range(es.population)}) == 1
    if name == "paper-hard":
        assert any(cfg["temperature"] > 0 for cfg in configs), "the hard ES samples at T = 0.6"


def test_paper_stages_compute_in_the_papers_dtype(paper, tmp_path):
    """The artifact's run is bf16: every paper suite's model is bf16; ES perturbs, rolls out and evaluates in bf16
    (paper-bf16, and it hands the model back at the suite's dtype: tests/methods/test_es_dtype.py); GRPO keeps an
    fp32 master under autocast in the suite's dtype (verl's mixed precision) and probes a copy at that dtype
    (tests/methods/test_stage_dtypes.py runs both sequences and checks every stage's and probe's dtype)."""
    from esbench.es import BF16_MODES
    from esbench.methods.grpo_trl import GRPOSettings, grpo_config

    for name in PAPER_SUITES + EXPERIMENT_SUITES:
        suite = load_suite(REPO / "suites" / f"{name}.yaml")
        assert {m.dtype for m in suite.spec.models.values()} == {paper["dtype"]}, name
        configs = _configs(suite)
        assert all(cfg["precision"] in BF16_MODES for cfg in configs.get("es", [])), name
        for cfg in configs.get("grpo", []):
            args = grpo_config(GRPOSettings(**cfg), 1, str(tmp_path), 0, True, compute=paper["dtype"])
            assert args.bf16 and not args.fp16, name
            assert args.beta == 0.001 and args.use_bias_correction_kl is False  # verl's k3 in the loss


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
    from esbench.methods import model_to_load

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
