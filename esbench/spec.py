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
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from esbench.backends import BackendSpec

# MAX_CELLS, the suite file's limits and SuiteError are part of this module's interface
from esbench.limits import MAX_CELLS as MAX_CELLS
from esbench.spec_schema import (
    SCHEMA,
    CellSpec,
    DatasetSpec,
    DiversitySpec,
    EvalSpec,
    Loc,
    ModelSpec,
    ProbeSpec,
    SparsitySpec,
    SuiteSpec,
    budget_is_zero,
    name_problem,
    number_problems,
)
from esbench.suite_yaml import MAX_BYTES as MAX_BYTES
from esbench.suite_yaml import MAX_DEPTH as MAX_DEPTH
from esbench.suite_yaml import MAX_INT_CHARS as MAX_INT_CHARS
from esbench.suite_yaml import MAX_NODES as MAX_NODES
from esbench.suite_yaml import SuiteError as SuiteError
from esbench.suite_yaml import _fmt, _line, parse, printable


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
    problems: list[tuple[Loc, str]] = [((key,), "unknown key") for key in sorted(set(obj) - _CELL_KEYS)]
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
    lines: dict[Loc, int]

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


def _model_at(parent: Loc, root: type[BaseModel]) -> type[BaseModel] | None:
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
        settings: dict[str, type[BaseModel]] = {
            "probe": ProbeSpec,
            "diversity": DiversitySpec,
            "sparsity": SparsitySpec,
        }
        return settings.get(parent[1])
    if len(parent) == 2:
        entries: dict[str, type[BaseModel]] = {"models": ModelSpec, "datasets": DatasetSpec}
        return entries.get(parent[0])
    return None


def _pydantic_problems(
    err: ValidationError,
    lines: dict[Loc, int],
    prefix: Loc = (),
    root: type[BaseModel] = SuiteSpec,
    raw_loc: bool = False,
) -> list[tuple[int, Any, str]]:
    """(line, field path, message) of each error; with `raw_loc`, the path as a tuple."""
    problems: list[tuple[int, Any, str]] = []
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


def _sequence_config(
    entry: dict[str, Any],
    where: Loc,
    done: dict[str, tuple[str, BaseModel, bool]],
    raw: dict[str, dict[str, Any]],
    lines: dict[Loc, int],
    problems: list[tuple[int, str, str]],
) -> dict[str, Any] | None:
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
        where: Loc = ("methods", name)
        if where in bad_names:  # reported above
            continue
        entry = dict(entry or {})
        # `stage_only: true`: a configuration that sequences use as a stage but that is not a cell of its own
        # (the paper's hard ES->GRPO trains GRPO, while its GRPO row is a released checkpoint)
        if entry.pop("stage_only", False) is not False:
            if (where + ("stage_only",)) in lines and spec.methods[name].get("stage_only") is not True:
                at: Loc = where + ("stage_only",)
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
