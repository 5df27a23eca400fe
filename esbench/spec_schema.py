"""The suite schema: the pydantic models a suite file and a cell's frozen spec are validated against.

What each field may hold (names, budgets, seeds, the eval settings, the model and dataset entries) lives here;
`esbench.spec` builds on it: it expands a validated suite into cells, hashes their ids, and loads suite files and
cell.json. The two are separate so that the field rules read on their own, apart from the grid and the loading.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from esbench.backends import BackendSpec
from esbench.limits import (
    MAX_EPOCHS,
    MAX_NEW_TOKENS,
    MAX_ROWS,
    MAX_SAMPLES,
    MAX_SEED,
    MAX_TEMPERATURE,
    MAX_UPDATES,
)
from esbench.models import ModelPath
from esbench.suite_yaml import _fmt

Loc = tuple[Any, ...]
"""A field path: mapping keys and list indices from the root of a suite (or cell.json), e.g. ("methods", "es")."""

SCHEMA = "esbench.suite/1"
MAX_NAME = 64
_NAME = rf"^[A-Za-z0-9][A-Za-z0-9_.-]{{0,{MAX_NAME - 1}}}$"
"""Names of suites, models, datasets and methods: they become folder names (runs/<suite>), labels in cell.json and
the terminal's tables, so they are kept to characters that are safe in all three (no `/`, no markup, no controls)."""
_REVISION = r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,127}$"  # a hub commit, branch or tag (refs/pr/1)


_EPOCHS = re.compile(r"([0-9]+(\.[0-9]+)?)ep")


def name_problem(name: Any) -> str | None:
    """Why `name` is not a valid suite, model, dataset or method name (None if it is)."""
    if isinstance(name, str) and re.fullmatch(_NAME, name):
        return None
    shown = repr(name) if len(repr(name)) <= 40 else repr(name)[:37] + "..."
    return (
        f"invalid name {shown}: at most {MAX_NAME} letters, digits, '_', '.' or '-', beginning with a letter or digit"
    )


def budget_problem(budget: Any) -> str | None:
    """Why `budget` is not an update count or an epoch budget such as '2ep' within the limits (None if it is)."""
    if isinstance(budget, str):
        m = _EPOCHS.fullmatch(budget)
        if m is None:
            return f"budget {budget[:40]!r} must be an update count or epochs like '2ep'"
        if float(m.group(1)) > MAX_EPOCHS:
            return f"budget {budget[:40]!r}: at most {MAX_EPOCHS} epochs"
        return None
    if isinstance(budget, bool) or not isinstance(budget, int):
        return f"budget {budget!r} must be an update count or epochs like '2ep'"
    if budget < 0:
        return f"budget must be >= 0, got {budget}"
    if budget > MAX_UPDATES:
        return f"budget {budget}: at most {MAX_UPDATES} updates"
    return None


def budget_is_zero(budget: int | str) -> bool:
    """0 updates or 0 epochs: what only methods that train nothing have."""
    return budget == 0 or (isinstance(budget, str) and float(budget.removesuffix("ep") or 0) == 0)


def seed_problem(seed: Any) -> str | None:
    if isinstance(seed, bool) or not isinstance(seed, int):
        return f"seed {seed!r} must be a whole number"
    if not 0 <= seed <= MAX_SEED:
        return f"seed {seed} must be >= 0 and at most {MAX_SEED} (numpy's seed range)"
    return None


def number_problems(data: Any, path: Loc = ()) -> list[tuple[Loc, str]]:
    """(field path, message) of every number that no field accepts: inf and NaN (YAML `.inf`/`.nan`; a bound
    like `sigma > 0` lets inf through, and NaN compares false with every bound) and integers beyond 64 bits."""
    out: list[tuple[Loc, str]] = []
    stack = [(data, path)]
    while stack:
        value, at = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            out.append((at, f"must be a finite number, got {value}"))
        elif isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
            out.append((at, "integer does not fit in 64 bits"))
        elif isinstance(value, dict):
            stack.extend((v, at + (k,)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, at + (i,)) for i, v in enumerate(value))
    return sorted(out, key=lambda p: _fmt(p[0]))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _Stamped(_Strict):
    """A spec with stamped fields (filled in by esbench, never written by hand), left out of its dump when unset so
    the cells that have none keep the ids they had before the stamp existed."""

    _omitted_if_none: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for key in self._omitted_if_none:
            if out.get(key) is None:
                out.pop(key, None)
        return out


class ModelSpec(_Stamped):
    _omitted_if_none = ("recipe",)  # hub and local-model cells
    path: ModelPath = Field(description="`builtin:tiny`, a Hugging Face id (`org/name`), or a local directory.")
    revision: str | None = Field(
        None, pattern=_REVISION, description="Hub revision (commit) to pin; ignored for local paths."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Compute dtype.")
    recipe: str | None = Field(
        None,
        description="Filled in for `builtin:` models, not written by hand: the hash of the recipe the embedded model "
        "is built from (esbench.models.tiny.recipe_hash). It is part of the cell id, so a run of an earlier tiny "
        "model is never taken for a run of this one (nor resumed as one); other models record none.",
    )

    @model_validator(mode="before")
    @classmethod
    def _stamp_recipe(cls, data: Any) -> Any:
        """A suite never writes the recipe; a cell.json from before it is read as the current model, and its id, the
        hash of what it stores, still differs from a current cell's."""
        if isinstance(data, dict) and str(data.get("path", "")).startswith("builtin:") and data.get("recipe") is None:
            from esbench.models import tiny

            return {**data, "recipe": tiny.recipe_hash()}
        return data

    @model_validator(mode="after")
    def _current_recipe(self) -> ModelSpec:
        from esbench.models import tiny

        builtin = self.path.startswith("builtin:")
        if builtin and self.recipe != tiny.recipe_hash():
            raise ValueError(
                f"recipe {self.recipe}: this esbench builds {self.path} from recipe {tiny.recipe_hash()} only "
                "(a cell of an earlier tiny model; run the current suite instead)"
            )
        if not builtin and self.recipe is not None:
            raise ValueError("recipe belongs to `builtin:` models")
        return self


class DatasetSpec(_Stamped):
    _omitted_if_none = ("reward_version",)  # `verifier` cells
    task: str = Field(description="A registered task whose `train` split is the training data.")
    size: int | None = Field(
        None, gt=0, le=MAX_ROWS, description="Number of training problems; default: the whole split."
    )
    reward: Literal["verifier", "paper"] = Field(
        "verifier",
        description="Training reward: the task's verifier (the one evaluation uses), or `paper`, the authors' "
        "artifact's math rule (last box, MATH normalisation, string equality; math tasks only).",
    )
    reward_version: int | None = Field(
        None,
        description="Filled in for `reward: paper`, not written by hand: the rule's version "
        "(esbench.rewards.PAPER_REWARD_VERSION). It is part of the cell id, so cells trained under an earlier rule "
        "have other ids; `verifier` cells record none and keep theirs.",
    )

    @field_validator("task")
    @classmethod
    def _known(cls, v: str) -> str:
        from esbench.tasks import get_task

        get_task(v)
        return v

    @model_validator(mode="before")
    @classmethod
    def _stamp_paper_version(cls, data: Any) -> Any:
        """A suite never writes the version. A cell.json from before it (rule 1) is read as the current rule; its
        id, the hash of what it stores, still differs from that of a current cell."""
        if isinstance(data, dict) and data.get("reward") == "paper" and data.get("reward_version") is None:
            from esbench.rewards import PAPER_REWARD_VERSION

            return {**data, "reward_version": PAPER_REWARD_VERSION}
        return data

    @model_validator(mode="after")
    def _paper_reward_is_for_math(self) -> DatasetSpec:
        from esbench.rewards import PAPER_REWARD_VERSION
        from esbench.tasks import get_task

        if self.reward == "paper" and get_task(self.task).verifier != "math":
            raise ValueError(f"reward: `paper` is the artifact's math reward; task {self.task} is not a math task")
        if self.reward == "paper" and self.reward_version != PAPER_REWARD_VERSION:
            raise ValueError(
                f"reward_version {self.reward_version}: this esbench implements version {PAPER_REWARD_VERSION} "
                "of the paper reward only"
            )
        if self.reward != "paper" and self.reward_version is not None:
            raise ValueError("reward_version belongs to `reward: paper`")
        return self


def _registered(name: str | None) -> str | None:
    from esbench.tasks import get_task

    if name is not None:
        get_task(name)
    return name


OptionalTask = Annotated[str | None, AfterValidator(_registered)]


class ProbeSpec(_Strict):
    """Measured during training every `every` updates, for every training method alike."""

    task: OptionalTask = Field(
        None, description="Probe task; default the first held-out task, else the first eval task."
    )
    prompts: int = Field(16, gt=0, le=MAX_ROWS, description="The first `prompts` test problems of the probe task.")
    samples: int = Field(
        4, gt=0, le=MAX_SAMPLES, description="Sampled responses per probe prompt (at the eval temperature)."
    )
    every: int = Field(10, gt=0, le=MAX_UPDATES, description="Probe before update 0 and after every `every` updates.")


class DiversitySpec(_Strict):
    """Population diversity around each cell's final weights: N members θ + σεᵢ (ES's population at its last update
    for an ES cell; the same-σ neighbourhood for base and GRPO)."""

    sigma: float = Field(gt=0, description="Perturbation scale of the members (set it to the ES cells' σ).")
    members: int = Field(8, ge=2, le=MAX_SAMPLES, description="Population size N.")
    prompts: int = Field(16, gt=0, le=MAX_ROWS, description="The first `prompts` test problems of the task.")
    samples: int = Field(8, gt=0, le=MAX_SAMPLES, description="Samples m per member and prompt, estimating each pᵢ.")
    task: OptionalTask = Field(None, description="Task; default the first eval task.")


class SparsitySpec(_Strict):
    """Functional sparsity of trained cells (paper Tables 11-12, Eq. 16): reset the changed coordinates with
    |Δθ| ≤ τ to θ₀ and re-evaluate Pass@1."""

    taus: list[float] = Field(min_length=1, description="Magnitude thresholds τ.")
    task: OptionalTask = Field(None, description="Task re-evaluated; default the first eval task.")
    n: int | None = Field(None, gt=0, le=MAX_SAMPLES, description="Samples per problem; default eval.n.")
    methods: list[Annotated[str, Field(pattern=_NAME)]] | None = Field(
        None, description="Method kinds analysed (paper: [es], thresholded ES); default every trained cell."
    )

    @field_validator("taus")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        if any(t <= 0 for t in v) or len(set(v)) != len(v):
            raise ValueError(f"taus must be distinct and > 0, got {v}")
        return sorted(v)


class EvalSpec(_Strict):
    tasks: list[str] = Field(min_length=1, description="Registered eval tasks (lm-eval task configs).")
    held_out: list[str] = Field(default_factory=list, description="Tasks that measure forgetting.")
    limit: int | None = Field(
        None, gt=0, le=MAX_ROWS, description="Evaluate only the first `limit` problems of each task."
    )
    n: int = Field(32, gt=0, le=MAX_SAMPLES, description="Samples per problem (paper: 32).")
    k: list[int] | None = Field(None, description="Pass@k / Maj@k values, each <= n; default powers of 2.")
    temperature: float = Field(0.6, ge=0, le=MAX_TEMPERATURE, description="Sampling temperature (paper: 0.6).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling threshold (paper: 1.0).")
    max_new_tokens: int = Field(
        2048, gt=0, le=MAX_NEW_TOKENS, description="Generation budget (paper: 2048 easy, 8192 hard)."
    )
    greedy: bool = Field(True, description="Also run one greedy (temperature 0) pass per problem.")
    entropy: bool = Field(True, description="Record the mean token entropy of the sampled responses per task.")
    probe: ProbeSpec | None = Field(None, description="Entropy and success on a fixed probe set during training.")
    diversity: DiversitySpec | None = Field(None, description="JS diversity of a σ-population around the result.")
    sparsity: SparsitySpec | None = Field(None, description="Thresholded-update re-evaluation of trained cells.")
    save_weights: bool = Field(False, description="Keep trained cells' final weights (final.safetensors).")

    @field_validator("tasks", "held_out")
    @classmethod
    def _tasks(cls, v: list[str], info: ValidationInfo) -> list[str]:
        from esbench.tasks import get_task

        if len(set(v)) != len(v):
            raise ValueError(f"duplicate task names in {v}")
        for name in v:
            get_task(name)
        if info.field_name == "held_out" and "tasks" in info.data:
            missing = sorted(set(v) - set(info.data["tasks"]))
            if missing:
                raise ValueError(f"{missing} not in eval.tasks; held-out tasks must also be evaluated")
        return v

    @field_validator("k")
    @classmethod
    def _k_valid(cls, v: list[int] | None, info: ValidationInfo) -> list[int] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("must list at least one k")
        if any(k <= 0 for k in v):
            raise ValueError(f"every k must be > 0, got {v}")
        if len(set(v)) != len(v):
            raise ValueError(f"duplicate k values in {v}")
        n = info.data.get("n")
        if n is not None and max(v) > n:
            raise ValueError(f"k={max(v)} is larger than n={n}; every k must be <= n (samples per problem)")
        return v

    @property
    def ks(self) -> list[int]:
        if self.k is not None:
            return sorted(self.k)
        return [2**i for i in range(self.n.bit_length()) if 2**i <= self.n]


def _no_budget() -> list[int | str]:
    """The default budgets, [0]: a suite of untrained methods (base) needs none."""
    return [0]


class SuiteSpec(_Strict):
    name: str = Field(description="Suite name; also its output folder under runs/.")
    description: str = ""
    models: dict[str, ModelSpec] = Field(min_length=1)
    datasets: dict[str, DatasetSpec] = Field(default_factory=dict)
    methods: dict[str, dict[str, Any]] = Field(min_length=1, description="name -> {method: kind, **config}")
    budgets: list[int | str] = Field(
        default_factory=_no_budget,
        description="Budgets of trained methods: an int counts updates; '2ep' means two epochs of the train set.",
    )
    seeds: list[int] = Field(min_length=1)
    eval: EvalSpec
    backend: BackendSpec = Field(default_factory=BackendSpec, description="Generation backend of every cell.")

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if problem := name_problem(v):
            raise ValueError(problem)
        return v

    @field_validator("budgets", "seeds")
    @classmethod
    def _distinct_in_range(cls, v: list[Any], info: ValidationInfo) -> list[Any]:
        if len(set(v)) != len(v):
            raise ValueError(f"duplicate values in {v}")
        check = budget_problem if info.field_name == "budgets" else seed_problem
        for x in v:
            if problem := check(x):
                raise ValueError(problem)
        return v


# ---------------------------------------------------------------------------------------------------------------
# Cells


class MethodRef(_Strict):
    kind: str = Field(description="A registered method.")
    config: dict[str, Any] = Field(description="Its config as validated by the method's `Config`.")


class CellSpec(_Strict):
    """The frozen spec of one cell, typed: what `cell.json` holds under `spec` and what the runner executes."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, populate_by_name=True)

    schema_: Literal["esbench.suite/1"] = Field(alias="schema")
    model: ModelSpec
    dataset: DatasetSpec | None
    method: MethodRef
    budget: StrictInt | StrictStr
    seed: StrictInt
    eval: EvalSpec
    backend: BackendSpec = Field(default_factory=BackendSpec)

    @field_validator("budget")
    @classmethod
    def _budget(cls, v: int | str) -> int | str:
        if problem := budget_problem(v):
            raise ValueError(problem)
        return v

    @field_validator("seed")
    @classmethod
    def _seed(cls, v: int) -> int:
        if problem := seed_problem(v):
            raise ValueError(problem)
        return v
