"""Suite YAML -> validated, frozen spec -> grid of cells with content-hashed ids.

A suite is a grid: models x train datasets x methods x budgets x seeds, evaluated with one `eval` block. Models,
datasets and methods are mappings keyed by a name, so a duplicate name is a duplicate YAML key (rejected) and the
error path reads like `methods.es.sigma`. Every error names the file, the line and the field path, and the suite
is rejected before anything is written. Hostile files (alias bombs, deep nesting, huge or binary files, grids of
billions of cells) hit the MAX_* limits below and get the same kind of error, not a hang or a traceback.

A cell's id is the SHA-256 of its *normalised* spec (defaults filled in, display names dropped, keys sorted), so
it does not change when the YAML is reordered, reformatted, or an entry is renamed. Following HELM, two entries
that normalise to the same cell are an error rather than a silent merge; the one deliberate merge is `base`,
which trains nothing and so ignores datasets and budgets.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from esbench.backends import BackendSpec
from esbench.limits import (  # noqa: F401  (part of this module's interface)
    MAX_CELLS,
    MAX_EPOCHS,
    MAX_NEW_TOKENS,
    MAX_ROWS,
    MAX_SAMPLES,
    MAX_SEED,
    MAX_TEMPERATURE,
    MAX_UPDATES,
)
from esbench.models import ModelPath
from esbench.suite_yaml import (  # noqa: F401  (the limits and SuiteError are part of this module's interface)
    MAX_BYTES,
    MAX_DEPTH,
    MAX_INT_CHARS,
    MAX_NODES,
    SuiteError,
    _fmt,
    _line,
    parse,
    printable,
)

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


def number_problems(data: Any, path: tuple = ()) -> list[tuple[tuple, str]]:
    """(field path, message) of every number that no field accepts: inf and NaN (YAML `.inf`/`.nan`; a bound
    like `sigma > 0` lets inf through, and NaN compares false with every bound) and integers beyond 64 bits."""
    out: list[tuple[tuple, str]] = []
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
        out = handler(self)
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


class SuiteSpec(_Strict):
    name: str = Field(description="Suite name; also its output folder under runs/.")
    description: str = ""
    models: dict[str, ModelSpec] = Field(min_length=1)
    datasets: dict[str, DatasetSpec] = Field(default_factory=dict)
    methods: dict[str, dict[str, Any]] = Field(min_length=1, description="name -> {method: kind, **config}")
    budgets: list[int | str] = Field(
        default_factory=lambda: [0],
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
    def _distinct_in_range(cls, v: list, info: ValidationInfo) -> list:
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


@dataclass(frozen=True)
class Cell:
    """One grid point. `spec` is the normalised content that the id hashes; `labels` are display names only."""

    spec: dict[str, Any]
    labels: dict[str, str]
    id: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", cell_id(self.spec))

    @property
    def name(self) -> str:
        """Readable path `model/dataset/method/b<budget>/s<seed>`; `--only` globs match it or the id."""
        lb = self.labels
        return f"{lb['model']}/{lb['dataset']}/{lb['method']}/b{self.spec['budget']}/s{self.spec['seed']}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "labels": self.labels, "spec": self.spec}

    @functools.cached_property
    def typed(self) -> CellSpec:
        return CellSpec.model_validate(self.spec)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Cell:
        """A cell from its `cell.json`; the stored id must be the hash of the stored spec."""
        cell = cls(obj["spec"], obj["labels"])
        if obj.get("id") not in (None, cell.id):
            raise ValueError(f"cell.json id {obj.get('id')} does not match its spec (hash {cell.id})")
        return cell


MAX_CELL_JSON_BYTES = 1 << 20
"""Largest cell.json `run-cell` reads: a cell is a few KB (the same cap as a suite file)."""
_CELL_KEYS = {"id", "name", "labels", "spec"}
_LABEL_KEYS = {"suite", "model", "dataset", "method"}


class CellError(ValueError):
    """A cell.json that is refused, in one line: every problem as `field.path: message`."""


def validate_cell(obj: Any, where: str = "cell.json") -> Cell:
    """The cell a `cell.json` object holds, checked as strictly as a suite's cells: the same models of every field,
    the method's own config model, the suite's rules for names, budgets and seeds, a spec consistent with whether
    the method trains, and the id and name that spec and labels give. Only the Python objects are built: nothing is
    loaded and no method runs. A forger who recomputes the id gets past the hash check, not past these."""
    from esbench.methods import registry

    if not isinstance(obj, dict) or not _CELL_KEYS <= set(obj):
        raise CellError(f"{where}: expected an object with id, name, labels and spec (a cell.json written by esbench)")
    problems: list[tuple[tuple, str]] = [((key,), "unknown key") for key in sorted(set(obj) - _CELL_KEYS)]
    problems += number_problems(obj)
    labels, spec = obj["labels"], obj["spec"]
    if not isinstance(labels, dict) or set(labels) != _LABEL_KEYS:
        problems.append((("labels",), f"must be an object with exactly {', '.join(sorted(_LABEL_KEYS))}"))
    else:
        for key in sorted(_LABEL_KEYS):
            if not (key == "dataset" and labels[key] == "-") and (problem := name_problem(labels[key])):
                problems.append((("labels", key), problem))
    typed = None
    if not isinstance(spec, dict):
        problems.append((("spec",), "must be an object"))
    elif "schema_" in spec:  # the field's Python name: a cell.json names it `schema`
        problems.append((("spec", "schema_"), "unknown key 'schema_'"))
    elif not problems:
        try:
            typed = CellSpec.model_validate(spec)
        except ValidationError as e:
            problems += [(loc, msg) for _, loc, msg in _pydantic_problems(e, {}, ("spec",), CellSpec, raw_loc=True)]
    if typed is not None:
        method = ("spec", "method")
        try:
            cls = registry.get(typed.method.kind)
        except KeyError as e:
            problems.append((method + ("kind",), e.args[0]))
            cls = None
        if cls is not None:
            try:
                cls.Config.model_validate(typed.method.config)
            except ValidationError as e:
                at = method + ("config",)
                problems += [(loc, msg) for _, loc, msg in _pydantic_problems(e, {}, at, cls.Config, raw_loc=True)]
            if cls.trains and typed.dataset is None:
                problems.append((("spec", "dataset"), f"method {typed.method.kind!r} trains: it needs a dataset"))
            if cls.trains and budget_is_zero(typed.budget):
                problems.append((("spec", "budget"), f"method {typed.method.kind!r} trains: its budget must be > 0"))
            if not cls.trains and (typed.dataset is not None or typed.budget != 0):
                msg = f"method {typed.method.kind!r} trains nothing: its cells have dataset null and budget 0"
                problems.append((("spec", "dataset" if typed.dataset is not None else "budget"), msg))
        if isinstance(labels, dict) and (labels.get("dataset") == "-") != (typed.dataset is None):
            problems.append((("labels", "dataset"), "is '-' exactly when the spec has no dataset"))
    if not problems:
        cell = Cell(spec, labels)
        if obj["id"] != cell.id:
            problems.append((("id",), f"{str(obj['id'])[:40]!r} does not match its spec (hash {cell.id})"))
        if obj["name"] != cell.name:
            problems.append((("name",), f"{str(obj['name'])[:80]!r} is not the name its labels give ({cell.name})"))
    if problems:
        shown = "; ".join(f"{_fmt(loc)}: {msg[:200]}" for loc, msg in problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise CellError(printable(f"{where}: {shown}{more}"))
    return cell


def load_cell_json(path: str | os.PathLike[str]) -> Cell:
    """A cell from a `cell.json` someone else wrote: a regular file of at most MAX_CELL_JSON_BYTES, strict JSON
    (esbench.untrusted), then `validate_cell`. Raises a ValueError with a one-line reason."""
    from esbench.untrusted import load_json

    return validate_cell(load_json(path, MAX_CELL_JSON_BYTES), os.fspath(path))


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def cell_id(spec: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Suite:
    spec: SuiteSpec
    file: str
    methods: dict[str, Any]  # name -> (kind, validated config model)
    lines: dict[tuple, int]

    @property
    def name(self) -> str:
        return self.spec.name

    def cells(self) -> list[Cell]:
        """Expand the grid; raises SuiteError if two distinct entries give the same cell."""
        out: dict[str, Cell] = {}
        problems = []
        ev = self.spec.eval.model_dump()
        ev["k"] = self.spec.eval.ks
        for mname, model in self.spec.models.items():
            for meth_name, (kind, cfg, trains) in self.methods.items():
                combos = [(d, b) for d in self.spec.datasets for b in self.spec.budgets] if trains else [(None, 0)]
                for dname, budget in combos:
                    for seed in self.spec.seeds:
                        spec = {
                            "schema": SCHEMA,
                            "model": model.model_dump(),
                            "dataset": self.spec.datasets[dname].model_dump() if dname else None,
                            "method": {"kind": kind, "config": cfg.model_dump(mode="json")},
                            "budget": budget,
                            "seed": seed,
                            "eval": ev,
                            "backend": self.spec.backend.model_dump(),
                        }
                        labels = {
                            "suite": self.spec.name,
                            "model": mname,
                            "dataset": dname or "-",
                            "method": meth_name,
                        }
                        cell = Cell(spec, labels)
                        prior = out.get(cell.id)
                        if prior and (trains or prior.labels["method"] != meth_name):
                            line = self.lines.get(("methods", meth_name), 1)
                            problems.append((line, f"methods.{meth_name}", f"gives the same cells as {prior.name}"))
                        out.setdefault(cell.id, cell)
        if problems:
            raise SuiteError(self.file, problems)
        return list(out.values())


# ---------------------------------------------------------------------------------------------------------------
# Loading


def _model_at(parent: tuple, root: type[BaseModel]) -> type[BaseModel] | None:
    """The pydantic model whose keys live at `parent` (for "expected one of" in unknown-key messages)."""
    if root is not SuiteSpec:
        return root
    if parent == ():
        return SuiteSpec
    if parent == ("eval",):
        return EvalSpec
    if parent == ("backend",):
        return BackendSpec
    if len(parent) == 2 and parent[0] == "eval":
        return {"probe": ProbeSpec, "diversity": DiversitySpec, "sparsity": SparsitySpec}.get(parent[1])
    if len(parent) == 2:
        return {"models": ModelSpec, "datasets": DatasetSpec}.get(parent[0])
    return None


def _pydantic_problems(
    err: ValidationError,
    lines: dict[tuple, int],
    prefix: tuple = (),
    root: type[BaseModel] = SuiteSpec,
    raw_loc: bool = False,
) -> list:
    """(line, field path, message) of each error; with `raw_loc`, the path as a tuple."""
    problems = []
    for e in err.errors():
        loc = prefix + tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = f"unknown key {loc[-1]!r}"
            model = _model_at(loc[len(prefix) : -1], root)
            if model is not None:
                msg += f"; expected one of: {_expected_keys(model)}"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif "input" in e and e["type"] not in ("value_error", "assertion_error") and not isinstance(e["input"], dict):
            msg += f" (got {e['input']!r})"
        problems.append((_line(lines, loc), loc if raw_loc else _fmt(loc), msg))
    return problems


def _expected_keys(model: type[BaseModel]) -> str:
    return ", ".join(f.alias or name for name, f in model.model_fields.items())


def _sequence_config(entry, where, done, raw, lines, problems) -> dict | None:
    """`{sequence: [a, b], split: [...]}` -> the sequence recipe's config with the named stages' configs inlined."""
    extra = set(entry) - {"sequence", "split"}
    for key in sorted(extra):
        problems.append((_line(lines, where + (key,)), _fmt(where + (key,)), f"unknown key {key!r} for a sequence"))
    names = entry["sequence"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        problems.append(
            (
                _line(lines, where + ("sequence",)),
                _fmt(where + ("sequence",)),
                "must be a list of method names defined in this suite",
            )
        )
        return None
    stages = []
    for i, stage_name in enumerate(names):
        at = where + ("sequence", i)
        if stage_name not in raw or "sequence" in (raw[stage_name] or {}):
            problems.append(
                (_line(lines, at), _fmt(at), f"{stage_name!r} is not a (non-sequence) method of this suite")
            )
            continue
        if stage_name not in done:  # that entry is itself invalid and already reported
            return None
        kind, cfg, _ = done[stage_name]
        stages.append({"kind": kind, "config": cfg.model_dump(mode="json")})
    if extra or len(stages) != len(names):
        return None
    return {"stages": stages, "split": entry.get("split")}


def load_suite(path: str | Path) -> Suite:
    """Parse and validate a suite file. Raises SuiteError with every problem found; writes nothing."""
    from esbench.methods import registry

    file, data, lines, problems = parse(path)
    numbers = number_problems(data)
    if numbers:  # before the schema: `sigma > 0` would let inf through and report NaN as "not > 0"
        raise SuiteError(file, problems + [(_line(lines, at), _fmt(at), msg) for at, msg in numbers])
    bad_names = set()
    for section in ("models", "datasets", "methods"):
        entries = data.get(section)
        for name in entries if isinstance(entries, dict) else ():
            if problem := name_problem(name):
                bad_names.add((section, name))
                problems.append((_line(lines, (section, name)), _fmt((section, name)), problem))
    try:
        spec = SuiteSpec.model_validate(data)
    except ValidationError as e:
        problems += _pydantic_problems(e, lines)
        raise SuiteError(file, problems) from None
    methods: dict[str, Any] = {}
    stage_only: set[str] = set()
    # plain entries first: a sequence refers to them by name and embeds their validated configs
    entries = sorted(spec.methods.items(), key=lambda kv: "sequence" in (kv[1] or {}))
    for name, entry in entries:
        where = ("methods", name)
        if where in bad_names:  # reported above
            continue
        entry = dict(entry or {})
        # `stage_only: true`: a configuration that sequences use as a stage but that is not a cell of its own
        # (the paper's hard ES->GRPO trains GRPO, while its GRPO row is a released checkpoint)
        if entry.pop("stage_only", False) is not False:
            if (where + ("stage_only",)) in lines and spec.methods[name].get("stage_only") is not True:
                at = where + ("stage_only",)
                problems.append((_line(lines, at), _fmt(at), "must be true or false"))
            stage_only.add(name)
        if "sequence" in entry:
            kind = "sequence"
            entry = _sequence_config(entry, where, methods, spec.methods, lines, problems)
            if entry is None:
                continue
        else:
            kind = entry.pop("method", name)
        try:
            cls = registry.get(kind)
        except KeyError as e:
            problems.append((_line(lines, where + ("method",)), _fmt(where + ("method",)), e.args[0]))
            continue
        try:
            methods[name] = (kind, cls.Config.model_validate(entry), cls.trains)
        except ValidationError as e:
            problems += _pydantic_problems(e, lines, where, cls.Config)
    unused = sorted(stage_only - {st for e in spec.methods.values() for st in ((e or {}).get("sequence") or [])})
    for name in unused:
        at = ("methods", name, "stage_only")
        problems.append((_line(lines, at), _fmt(at), "a stage-only method must be a stage of some sequence"))
    # YAML order for display; stage-only entries live on inside the sequences that embed them
    methods = {name: methods[name] for name in spec.methods if name in methods and name not in stage_only}
    trained = [name for name, (_, _, trains) in methods.items() if trains]
    if trained:
        # point at the empty field if it is written, else at the method that needs it
        for key, empty, msg in (
            ("datasets", not spec.datasets, "empty grid: datasets is empty"),
            ("budgets", all(budget_is_zero(b) for b in spec.budgets), "no budget > 0"),
        ):
            if empty:
                where = (key,) if (key,) in lines else ("methods", trained[0])
                problems.append(
                    (
                        lines[where] if where in lines else 1,
                        _fmt(where),
                        f"{msg}, but method {trained[0]!r} trains (give {key})",
                    )
                )
        if not all(budget_is_zero(b) for b in spec.budgets):
            for i, b in enumerate(spec.budgets):
                if budget_is_zero(b):
                    at = ("budgets", i)
                    msg = (
                        f"a budget of {b!r} trains nothing, but method {trained[0]!r} trains: every budget must be > 0"
                    )
                    problems.append((_line(lines, at), _fmt(at), msg + " (base is the untrained cell)"))
    if problems:
        raise SuiteError(file, problems)
    per_model = sum(len(spec.datasets) * len(spec.budgets) if trains else 1 for _, _, trains in methods.values())
    size = len(spec.models) * per_model * len(spec.seeds)
    if size > MAX_CELLS:
        key = max(("models", "methods", "datasets", "budgets", "seeds"), key=lambda k: len(getattr(spec, k)))
        msg = f"the grid has {size} cells, more than {MAX_CELLS}; split it into smaller suites"
        raise SuiteError(file, [(_line(lines, (key,)), key, msg)])
    suite = Suite(spec=spec, file=file, methods=methods, lines=lines)
    suite.cells()  # duplicate-cell check
    return suite
    file, data, lines, problems = parse(path)
