"""MBPP verdicts computed by the trusted parent, from plain data the sandboxed program computes.

MBPP's protocol (Austin et al. 2021, as the paper's artifact and lm-eval's `mbpp` task run it) executes
`test_imports`, the model's code and then the `assert` test statements in one interpreter, and counts a program as
correct when that script exits cleanly. Run in the program's own interpreter, every part of that verdict is the
program's to forge: an exit status, a completion message, an object whose `__eq__` always answers True, a
rebound `sorted`. So here the program's interpreter (confined by `esbench.tasks.sandbox`) only computes values,
and this process decides:

1. Each test statement is parsed here (the tests come from the data set, not the model). In an `assert`, every
   sub-expression that needs the program (a call, name, attribute or subscript that reaches a name neither a safe
   builtin nor a trusted standard module imported by the tests) is a *probe*.
2. The assert's expression is compiled here with each probe replaced by a call that asks the sandbox to evaluate
   that source (with the values of comprehension or lambda variables it uses, sent as data), and receives the
   result as plain data (`sandbox_guard.encode`/`decode`: built-in scalars and containers, read through the
   built-in types' own methods; anything else is refused). Comparisons, `set()`, `sorted()`, `math.isclose` and
   the truth of the assertion are then evaluated here, with this process's builtins.
3. Other statements (set-up lines) run in the sandbox; an exception there fails the program, as in MBPP.

A program passes when every assert holds, in order, within the time limit. A test list ending in `assert False`
fails whatever the program does; so does `sys.exit(0)`. What a program can still do is answer with the values
the tests expect without computing them (hard-coded answers), as it always could (SECURITY.md).
"""

from __future__ import annotations

import ast
import builtins
import importlib
from collections.abc import Callable
from typing import Any

from esbench.tasks import sandbox_guard
from esbench.tasks.sandbox import SandboxResult, _Stop, session

# builtins a test may use on the program's values, evaluated here
SAFE_BUILTINS = {
    name: getattr(builtins, name)
    for name in (
        "abs",
        "all",
        "any",
        "ascii",
        "bin",
        "bool",
        "bytearray",
        "bytes",
        "chr",
        "complex",
        "dict",
        "divmod",
        "enumerate",
        "filter",
        "float",
        "format",
        "frozenset",
        "hash",
        "hex",
        "int",
        "isinstance",
        "iter",
        "len",
        "list",
        "map",
        "max",
        "min",
        "next",
        "oct",
        "ord",
        "pow",
        "range",
        "repr",
        "reversed",
        "round",
        "set",
        "slice",
        "sorted",
        "str",
        "sum",
        "tuple",
        "type",
        "zip",
        "ValueError",
        "TypeError",
        "Exception",
    )
}
# standard modules a test's own imports may bring in here (pure computation on data)
TRUSTED_MODULES = frozenset(
    {
        "math",
        "cmath",
        "collections",
        "itertools",
        "functools",
        "operator",
        "heapq",
        "bisect",
        "re",
        "string",
        "fractions",
        "decimal",
        "statistics",
        "copy",
        "datetime",
    }
)


class ProbeFailed(Exception):
    """The sandbox could not produce a value for a probe (an exception, or a value that is not plain data)."""


def trusted_imports(imports: list[str]) -> dict[str, Any]:
    """The names that the tests' import lines bind, for those importing only TRUSTED_MODULES."""
    ns: dict[str, Any] = {}
    for line in imports:
        try:
            tree = ast.parse(line)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.partition(".")[0] in TRUSTED_MODULES:
                        mod = importlib.import_module(a.name)
                        ns[a.asname or a.name.partition(".")[0]] = (
                            mod if a.asname else importlib.import_module(a.name.partition(".")[0])
                        )
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.partition(".")[0] in TRUSTED_MODULES:
                    mod = importlib.import_module(node.module)
                    for a in node.names:
                        if a.name != "*" and hasattr(mod, a.name):
                            ns[a.asname or a.name] = getattr(mod, a.name)
    return ns


def _bound_in(node: ast.AST) -> set[str]:
    """Names bound inside `node` by comprehensions, lambdas and walrus targets."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.comprehension):
            out |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
        elif isinstance(n, ast.Lambda):
            a = n.args
            out |= {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x is not None}
        elif isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name):
            out.add(n.target.id)
    return out


class _Probes(ast.NodeTransformer):
    """Replace each sub-expression that needs the program with `__probe__(k, {bound names it uses})`."""

    def __init__(self, trusted: set[str], bound: set[str]):
        self.trusted, self.bound = trusted, bound
        self.sources: list[str] = []

    def _untrusted(self, node: ast.AST) -> bool:
        inner = _bound_in(node)
        return any(
            isinstance(n, ast.Name) and n.id not in self.trusted and n.id not in self.bound and n.id not in inner
            for n in ast.walk(node)
        )

    def _passes_program_object(self, call: ast.Call) -> bool:
        """Does an argument hand the program's own object (a function, a class) to a trusted callable, as in
        `sorted(map(f, xs))`? Then the whole call is evaluated in the sandbox: only its result crosses. Names
        inside a call into the program (`x` in `set(f(x))`) travel with that probe and do not count."""
        inner = _bound_in(call)

        def bare(node: ast.AST) -> bool:
            if isinstance(node, ast.Name):
                return node.id not in self.trusted and node.id not in self.bound and node.id not in inner
            if isinstance(node, ast.Call | ast.Attribute | ast.Subscript):
                head = node.func if isinstance(node, ast.Call) else node.value
                if self._untrusted(head):
                    return False  # a probe of its own
            return any(bare(c) for c in ast.iter_child_nodes(node))

        return any(bare(a) for a in [*call.args, *(k.value for k in call.keywords)])

    def _probe(self, node: ast.expr) -> ast.expr:
        k = len(self.sources)
        self.sources.append(ast.unparse(node))
        used = sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in self.bound})
        env = ast.Dict(keys=[ast.Constant(u) for u in used], values=[ast.Name(u, ast.Load()) for u in used])
        return ast.copy_location(ast.Call(ast.Name("__probe__", ast.Load()), [ast.Constant(k), env], []), node)

    def visit(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            return self._probe(node) if self._untrusted(node) else node
        if isinstance(node, ast.Call | ast.Attribute | ast.Subscript):
            head = node.func if isinstance(node, ast.Call) else node.value
            if self._untrusted(head) or (isinstance(node, ast.Call) and self._passes_program_object(node)):
                return self._probe(node)
        if isinstance(node, ast.Lambda | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            saved = self.bound
            self.bound = saved | _bound_in(node)
            try:
                return self.generic_visit(node)
            finally:
                self.bound = saved
        return self.generic_visit(node)


def judge(code: str, tests: list[str], imports: list[str], timeout: float = 10.0) -> SandboxResult:
    """Run `imports` and `code` in a fresh sandbox, then judge each test statement here (see the module doc)."""
    box = session(timeout)
    failure: str | None = None
    held = False
    try:
        failure = _exec(box, "\n".join(imports), "imports.py") or _exec(box, code, "program.py")
        if failure is None:
            failure = _judge_tests(box, tests, imports)
            held = failure is None
    except _Stop as e:
        failure = str(e)
    finally:
        box.close()
    return SandboxResult(
        returncode=None if box.timed_out else (0 if failure is None else 1),
        stdout=box.stdout(),
        stderr=box.stderr() + ("" if failure is None else f"\n{failure}\n"),
        timed_out=box.timed_out,
        seconds=box.seconds(),
        tests_completed=held,
        failure=failure,
    )


def _exec(box: Any, src: str, file: str) -> str | None:
    if not src.strip():
        return None
    ans = box.request({"op": "exec", "src": src, "file": file})
    return None if ans["ok"] else f"{file}: {str(ans.get('error'))[:300]}"


def _judge_tests(box: Any, tests: list[str], imports: list[str]) -> str | None:
    """None when every statement holds; else which one failed and why."""
    trusted_ns = trusted_imports(imports)
    trusted = set(SAFE_BUILTINS) | set(trusted_ns)
    for i, stmt_src in enumerate(tests):
        try:
            tree = ast.parse(stmt_src, f"test {i}")
        except SyntaxError as e:
            return f"test {i}: does not parse ({e.msg})"
        for stmt in tree.body:
            if not isinstance(stmt, ast.Assert):
                failure = _exec(box, ast.unparse(stmt), f"test {i}")
                if failure:
                    return failure
                continue
            probes = _Probes(trusted, set())
            expr = ast.fix_missing_locations(ast.Expression(probes.visit(stmt.test)))
            ns = {"__builtins__": SAFE_BUILTINS, **trusted_ns, "__probe__": _prober(box, probes.sources)}
            try:
                ok = bool(eval(compile(expr, f"test {i}", "eval"), ns))  # noqa: S307 (data-set code, data values)
            except _Stop:
                raise
            except ProbeFailed as e:
                return f"test {i}: {e}"
            except Exception as e:  # noqa: BLE001 (the assertion raised on the program's values)
                return f"test {i}: {type(e).__name__}: {str(e)[:200]}"
            if not ok:
                return f"test {i}: assertion failed: {stmt_src.strip()[:200]}"
    return None


def _prober(box: Any, sources: list[str]) -> Callable[[int, dict[str, Any]], Any]:
    def probe(k: int, env: dict[str, Any]) -> Any:
        try:
            enc_env = {name: sandbox_guard.encode(v) for name, v in env.items()}
        except sandbox_guard.EncodeError as e:
            raise ProbeFailed(f"cannot send {sorted(env)} to the program: {e}") from None
        ans = box.request({"op": "eval", "src": sources[k], "env": enc_env})
        if not ans["ok"]:
            raise ProbeFailed(f"{sources[k][:120]}: {str(ans.get('error'))[:300]}")
        try:
            return sandbox_guard.decode(ans.get("value"))
        except (ValueError, TypeError, RecursionError) as e:
            raise ProbeFailed(f"{sources[k][:120]}: not plain data ({e})") from None

    return probe


def run_mbpp_tests(
    code: str, tests: list[str], imports: list[str] | tuple[str, ...] = (), timeout: float = 10.0
) -> SandboxResult:
    """MBPP protocol: `imports`, then `code`, then the test statements, in one program's globals; every `assert`
    judged here. The result's `failure` says which statement failed and why."""
    return judge(code, list(tests), list(imports), timeout)


def run_tests(code: str, tests: list[str], imports: list[str] | tuple[str, ...] = (), timeout: float = 10.0) -> bool:
    """True when every test statement held, judged by this process, within the time limit."""
    return judge(code, list(tests), list(imports), timeout).passed
