"""MBPP verdicts are computed by the trusted parent: a program cannot pass without its values being right."""

from __future__ import annotations

import pytest

from esbench.tasks import sandbox_guard
from esbench.tasks.mbpp_judge import SAFE_BUILTINS, _Probes, run_mbpp_tests, run_tests, trusted_imports

_TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4"]
_WRONG = "def add(a, b):\n    return a - b\n"
_RIGHT = "def add(a, b):\n    return a + b\n"

# Programs that try to pass without passing the tests. Every one must fail.
_GAMING = {
    "exits 0 at top level": _WRONG + "import sys\nsys.exit(0)\n",
    "os._exit(0) at top level": _WRONG + "import os\nos._exit(0)\n",
    "exits 0 through unittest.main()": _WRONG
    + "import unittest\nclass T(unittest.TestCase):\n    def test_ok(self):\n        pass\nunittest.main()\n",
    "the function raises SystemExit(0)": "def add(a, b):\n    raise SystemExit(0)\n",
    "the function calls os._exit(0)": "def add(a, b):\n    import os\n    os._exit(0)\n",
    "an atexit handler exits 0": _WRONG + "import atexit, os\natexit.register(os._exit, 0)\n",
    "builtins.AssertionError replaced": _WRONG
    + "import builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\n",
    "an object whose __eq__ is always True": "class Yes:\n    def __eq__(self, o):\n        return True\n"
    "    __hash__ = object.__hash__\ndef add(a, b):\n    return Yes()\n",
    "an int subclass whose __eq__ is always True": "class I(int):\n    def __eq__(self, o):\n        return True\n"
    "    __hash__ = int.__hash__\ndef add(a, b):\n    return I(a - b)\n",
    "a list subclass that iterates to the expected values": "class L(list):\n    def __iter__(self):\n"
    "        return iter([3])\ndef add(a, b):\n    return L([0])\n",
    "rebinds builtins the tests use": "import builtins\nbuiltins.bool = lambda x: True\n"
    "builtins.set = lambda *a: 3\n" + _WRONG,
    "replaces the guard's encoder to answer the expected value": _WRONG
    + "import sys\ng = sys.modules['__main__']\ng.encode = lambda v, *a: ['b', True]\n",
    "writes a forged answer line to the reply pipe": _WRONG + "import os\nfor fd in range(3, 12):\n    try:\n"
    '        os.write(fd, b\'{"ok": true, "value": ["i", "3"]}\\n\')\n    except OSError:\n        pass\n',
    "kills itself with SIGKILL": "def add(a, b):\n    import signal\n    signal.raise_signal(signal.SIGKILL)\n",
    "a trace function jumps over the failing asserts": _WRONG
    + "import sys\ndef jump(frame, event, arg):\n    return jump\nsys.settrace(jump)\n",
    "returns a generator that is never data": "def add(a, b):\n    while True:\n        yield 3\n",
    "an ordinary wrong answer": _WRONG,
}


@pytest.mark.parametrize("name", list(_GAMING))
def test_programs_that_game_mbpp_fail(name):
    r = run_mbpp_tests(_GAMING[name], _TESTS, timeout=5)
    assert not r.passed and r.tests_completed is False, (name, r.failure)
    assert r.failure


def test_a_test_list_ending_in_assert_false_fails_whatever_the_program():
    """The verdict is the parent's: no program can make `assert False` hold."""
    forge = _RIGHT + "import sys\ng = sys.modules['__main__']\ng.decode = lambda v: True\n"
    for code in (_RIGHT, forge):
        r = run_mbpp_tests(code, [*_TESTS, "assert False"])
        assert not r.passed and "test 3: assertion failed" in r.failure


_HONEST_MODULES = (
    "asyncio concurrent.futures decimal fractions statistics datetime calendar json re string heapq bisect "
    "collections itertools functools operator math cmath random array struct copy typing dataclasses enum "
    "textwrap unicodedata hashlib zlib io csv time threading queue numbers pprint difflib bz2 lzma base64 "
    "binascii abc contextlib weakref types inspect ast tokenize fnmatch glob pathlib tempfile shutil os sys "
    "logging warnings traceback secrets uuid locale codecs gettext argparse unittest doctest"
).split()


def test_honest_solutions_pass():
    honest = [
        _RIGHT,
        _RIGHT + "if __name__ == '__main__':\n    print(add(1, 2))\n",
        "import " + ", ".join(_HONEST_MODULES) + "\n" + _RIGHT,
        "import asyncio\nasync def _add(a, b):\n    await asyncio.sleep(0)\n    return a + b\n"
        "def add(a, b):\n    return asyncio.run(_add(a, b))\n",
        # files and directories in the working directory, threads, dataclasses, namedtuples
        "import collections, dataclasses, logging, os, tempfile, threading\nfrom pathlib import Path\n"
        "P = collections.namedtuple('P', 'x y')\nlogging.getLogger('x').info('hi')\n"
        "Path('scratch.txt').write_text('x')\nos.makedirs('a/b', exist_ok=True)\n"
        "with tempfile.TemporaryDirectory() as d:\n    open(os.path.join(d, 'f'), 'w').close()\n"
        "t = threading.Thread(target=print, args=('thread',))\nt.start()\nt.join()\n"
        "@dataclasses.dataclass\nclass C:\n    x: int = 0\n" + _RIGHT,
    ]
    for code in honest:
        r = run_mbpp_tests(code, _TESTS)
        assert r.passed and r.tests_completed, (code[:80], r.failure, r.stderr[-500:])


# MBPP's own test styles (sanitized split), with reference-style solutions
_MBPP_STYLE = [
    (
        "import math\ndef volume_sphere(r):\n    return 4 / 3 * math.pi * r ** 3",
        ["assert math.isclose(volume_sphere(10), 4188.790204786391, rel_tol=0.001)"],
        ["import math"],
    ),
    (
        "def similar_elements(a, b):\n    return tuple(set(a) & set(b))",
        ["assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))"],
        [],
    ),
    (
        "import heapq as hq\ndef heap_queue_largest(nums, n):\n    return hq.nlargest(n, nums)",
        ["assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],3)==[85, 75, 65]"],
        [],
    ),
    (
        "def is_not_prime(n):\n    return n < 2 or any(n % i == 0 for i in range(2, int(n ** 0.5) + 1))",
        ["assert is_not_prime(2) == False", "assert is_not_prime(10) == True", "assert not is_not_prime(7)"],
        [],
    ),
    (
        "def square_nums(xs):\n    return list(map(lambda x: x ** 2, xs))",
        ["assert square_nums([1, 2, 3])==([1, 4, 9])"],
        [],
    ),
    (
        "from collections import Counter\ndef count(xs):\n    return Counter(xs)",
        ["assert count('aab') == {'a': 2, 'b': 1}"],
        [],
    ),
    (
        "def pairs(xs):\n    return map(lambda t: (t, t), xs)",
        ["assert list(pairs([1, 2])) == [(1, 1), (2, 2)]", "assert sorted(pairs([2, 1]))[0] == (1, 1)"],
        [],
    ),
    ("def rev(s):\n    return s[::-1]", ["assert rev('abc') == 'cba'", "assert rev('') == ''"], []),
    ("def f(x):\n    return x / 3", ["assert abs(f(1) - 0.3333) < 1e-3", "assert round(f(2), 2) == 0.67"], []),
    ("def big(n):\n    return 2 ** n", ["assert big(300) == 2 ** 300", "assert big(-1) == 0.5"], []),
    ("def none(x):\n    return None", ["assert none(1) is None", "assert none(2) == None"], []),
    ("def d(x):\n    return {x: [x, (x,)]}", ["assert d(1) == {1: [1, (1,)]}"], []),
    ("def b(x):\n    return bytes([x])", ["assert b(65) == b'A'"], []),
    ("def g(n):\n    return (i for i in range(n))", ["assert sum(g(4)) == 6", "assert list(g(2)) == [0, 1]"], []),
    ("from fractions import Fraction\ndef h(a, b):\n    return Fraction(a, b)", ["assert h(1, 2) == 0.5"], []),
    (
        "def comp(n):\n    return [i * i for i in range(n)]",
        ["assert all(comp(k)[-1] == (k - 1) ** 2 for k in range(1, 5))", "assert comp(3) == [x * x for x in range(3)]"],
        [],
    ),
    (
        "class Pair:\n    def __init__(s, a, b):\n        s.a, s.b = a, b\ndef longest(ps, n):\n    return len(ps)",
        ["assert longest([Pair(5, 24), Pair(15, 25)], 2) == 2"],
        [],
    ),
    ("def sq(x):\n    return x * x", ["x = 4", "assert sq(x) == 16"], []),
    (
        "def sorter(xs):\n    return sorted(xs, key=lambda t: t[1])",
        ["assert sorted(sorter([(1, 2), (0, 1)]), key=lambda t: -sq(t[0])) == [(1, 2), (0, 1)]"],
        [],
    ),
]


def test_mbpp_test_styles_judge_honest_solutions_right():
    for code, tests, imports in _MBPP_STYLE:
        if "sq(" in tests[0] and "def sq" not in code:
            code += "\ndef sq(x):\n    return x * x"
        r = run_mbpp_tests(code, tests, imports)
        assert r.passed, (code[:60], tests, r.failure)


def test_mbpp_test_styles_judge_wrong_solutions_wrong():
    for code, tests, imports in _MBPP_STYLE:
        broken = code.replace("return ", "return 7 or ", 1)
        assert not run_tests(broken, tests, imports), (broken[:60], tests)


def test_probes_are_the_calls_into_the_program():
    trusted = set(trusted_imports(["import math"])) | set(SAFE_BUILTINS)
    cases = {
        "math.isclose(f(2), 3.14, rel_tol=0.1)": ["f(2)"],
        "set(f(x)) == set([1])": ["f(x)"],
        "all(f(i) == i for i in range(3))": ["f(i)"],
        "sorted(map(f, [1, 2])) == [1]": ["sorted(map(f, [1, 2]))"],
        "len(math.pi * g(1).attr) == 0": ["g(1).attr"],
    }
    import ast

    for src, want in cases.items():
        p = _Probes(trusted, set())
        p.visit(ast.parse(src, mode="eval").body)
        assert p.sources == want, src


def test_encoding_crosses_data_only():
    for v in (None, True, 3, -(2**200), 1.5, float("inf"), 2j, "s", b"b", [1, (2, {3})], {1: frozenset()}, range(3)):
        assert sandbox_guard.decode(sandbox_guard.encode(v)) == v
    with pytest.raises(sandbox_guard.EncodeError):
        sandbox_guard.encode(object())
    with pytest.raises(sandbox_guard.EncodeError):
        sandbox_guard.encode(2 ** (4 * sandbox_guard.MAX_INT_HEX + 8))
    for bad in (["i", "zz"], ["f", "1e5000x"], ["q"], ["S", [["l", []]]], "x", ["d", [["n"]]]):
        with pytest.raises((ValueError, TypeError)):
            sandbox_guard.decode(bad)
