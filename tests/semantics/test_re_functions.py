"""re's module functions in a compiled function: compile, match, search, sub, split,
findall and escape run for real when their arguments are constants (as a pure C function
is folded), so a pattern or match made in the trace is a constant, an invalid pattern raises
re.error in the trace as eagerly. (A repl function is Python code: re.sub(p, f, s) is traced
as the Python it is, and stops at re's pattern cache.) Each case: eager vs cdynamo on the first call and a cache hit, graph
count against torch._dynamo's."""
import re
import unittest

import pytest
import torch

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))


@case(T4)
def compile_then_methods(x):
    pat = re.compile(r"(\d+)-(\d+)")
    m = pat.match("12-345")
    return x + int(m.group(1)) + len(m.group(2)) + len(pat.findall("1-2 3-4"))


@case(T4)
def module_level_search_sub_split(x):
    s = re.sub(r"\s+", " ", "a   b \t c")
    parts = re.split(",", "x,y,,z")
    found = re.search(r"b", s) is not None
    return x * len(parts) + found + len(s) + len(re.escape("a.b*"))


@case(T4)
def flags_and_fullmatch(x):
    ok = re.fullmatch(r"abc", "ABC", re.IGNORECASE) is not None
    none = re.match(r"z", "abc") is None
    return x + ok + none


@case(T4)
def invalid_pattern_raises_re_error(x):
    try:
        re.compile("(")
    except re.error as e:
        return x + len(e.msg)
    return x


@case(T4)
def finditer_of_constants(x):
    return x + sum(int(m.group(0)) for m in re.finditer(r"\d", "1a2b3"))


class _Asserts(unittest.TestCase):
    def runTest(self):
        pass


_T = _Asserts()


@case(T4)
def assert_raises_regex_in_the_frame(x):
    with _T.assertRaisesRegex(ValueError, r"bad \d+"):
        raise ValueError("bad 42")
    return x + 1


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_re_functions(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)
