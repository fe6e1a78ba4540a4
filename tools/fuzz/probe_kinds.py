"""Exhaustive differential probes over value kinds (a complement to the random grammar).

    python tools/fuzz/probe_kinds.py [binary|builtins|all] [--dynamic]

Each case is a small function `f(x)` that builds a value of one kind (list, tuple, deque,
namedtuple, torch.Size, dict, OrderedDict, defaultdict, set, frozenset, str, iterators,
...), applies one operator or builtin to it, and returns `x + 1` (so that the frame has a
graph) with the result. It runs eagerly and under cdynamo (counting backend), and the type
and repr of the result, or the exception's type and message, must be the same. Results that
depend on object addresses (ids, hashes of ids, default reprs) are not compared.

The grammar draws programs at random; these probes take every pair instead: on 2026-12-06
they found deque + deque made a list, list + deque concatenated, a symbolic x.shape a
tuple, deque([x]) == [x] True, reversed(set) accepted, dict | OrderedDict a dict and
zip(it, it) over a string duplicated items, each fixed with a test (tools/fuzz/RUNS.md).
Prints each difference and a count; exit status 1 if any.
"""
import argparse
import collections
import itertools
import sys
import warnings

import torch

import cdynamo
import cdynamo.testing

D = collections.deque
OD = collections.OrderedDict
P = collections.namedtuple("P", "a b")

# Binary operators: both operands from this table (x is the function's tensor argument).
OPERANDS = {
    "list": "[x, 1]", "tuple": "(x, 1)", "deque": "D([x, 1])", "deque_maxlen": "D([x, 1], maxlen=2)", "namedtuple": "P(x, 1)",
    "dict": "{'a': x}", "OrderedDict": "OD(a=x)", "set": "{1, 2}", "frozenset": "frozenset({1, 3})", "str": "'ab'",
    "int": "2", "const_tuple": "(1, 2)", "const_list": "[1, 2]", "size": "x.shape", "None": "None", "float": "1.5",
    "defaultdict": "collections.defaultdict(int, a=1)", "range": "range(2)",
}
OPERATORS = ["+", "*", "==", "!=", "<", "|", "&", "-", "^", "in", "is"]

# Builtins and methods applied to one value.
VALUES = {
    "list": "[3, 1, 2]", "tuple": "(3, 1, 2)", "deque": "D([3, 1, 2])", "deque_maxlen": "D([3, 1, 2], maxlen=2)",
    "namedtuple": "P(3, 1)", "dict": "{'b': 1, 'a': 2}", "OrderedDict": "OD(b=1, a=2)",
    "defaultdict": "collections.defaultdict(int, b=1)", "set": "{3, 1}", "frozenset": "frozenset({3, 1})",
    "range": "range(1, 4)", "str": "'bca'", "keys": "{'b': 1, 'a': 2}.keys()", "values": "{'b': 1, 'a': 2}.values()",
    "items": "{'b': 1, 'a': 2}.items()", "zip": "zip([1, 2], 'ab')", "map": "map(abs, [-1, 2])",
    "filter": "filter(None, [0, 1, 2])", "generator": "(v for v in [1, 2])", "enumerate": "enumerate('ab')",
    "size": "x.shape", "tensor_list": "[x, x]", "tensor_tuple": "(x, 1)", "empty_list": "[]", "empty_deque": "D()",
}
BUILTINS = [
    "len(v)", "bool(v)", "list(v)", "tuple(v)", "sorted(v)", "list(reversed(v))", "list(iter(v))", "type(v).__name__",
    "isinstance(v, (list, tuple))", "sum(v)", "min(v)", "max(v)", "any(v)", "all(v)", "list(enumerate(v))", "dict(v)",
    "set(v)", "v[0]", "v[-1]", "v[1:]", "v.copy()", "v * 2", "v == v", "list(v) == v", "len(set(v))", "next(iter(v))",
    "v.count(1)", "v.index(1)", "list(zip(v, v))", "list(map(str, v))", "1 in v", "[k for k in v]", "{k: 1 for k in v}",
    "v.__class__.__name__",
]


def _outcome(fn):
    try:
        r = fn(torch.ones(2))[1]
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        return ("raised", type(e).__name__, str(e)[:150])
    if isinstance(r, torch.Tensor):
        return ("tensor",)
    text = repr(r).replace("\n", "")[:200]
    return ("ok", type(r).__name__, None if " at 0x" in text else text)


def _case(body, dynamic):
    """(eager outcome, compiled outcome) of `def f(x): return x + 1, <body>`."""
    namespace = {"D": D, "OD": OD, "P": P, "collections": collections, "torch": torch}
    exec("def f(x):\n    return x + 1, (%s)\n" % body, namespace)
    fn = namespace["f"]
    eager = _outcome(fn)
    if eager[0] == "tensor":  # an elementwise tensor result: compared by the test suites
        return eager, eager
    cdynamo.reset()
    compiled = cdynamo.compile(fn, backend=cdynamo.testing.CompileCounter(), dynamic=dynamic)
    return eager, _outcome(compiled)


def cases(which):
    if which in ("binary", "all"):
        for (a, ea), (b, eb), op in itertools.product(OPERANDS.items(), OPERANDS.items(), OPERATORS):
            yield "%s %s %s" % (a, op, b), "%s %s %s" % (ea, op, eb)
    if which in ("builtins", "all"):
        for (name, ev), call in itertools.product(VALUES.items(), BUILTINS):
            yield "%s: %s" % (name, call), "(lambda v: %s)(%s)" % (call, ev)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("which", nargs="?", default="all", choices=["binary", "builtins", "all"])
    ap.add_argument("--dynamic", action="store_true", help="compile with dynamic=True (symbolic x.shape)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    n = diffs = 0
    for label, body in cases(args.which):
        eager, compiled = _case(body, args.dynamic)
        n += 1
        if eager != compiled:
            diffs += 1
            print("DIFF %s\n  compiled %s\n  eager    %s" % (label, compiled, eager))
    print("%d cases, %d differences" % (n, diffs))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
