// Real code objects for the table and assembler tests, and Python's own view of them.
//
// The samples are (a) every code object of a few stdlib modules, compiled from their
// source (compiler output in all its variety), and (b) the functions in kSampleSource,
// which cover loops, try/except/finally, with, generators, coroutines, match, except*,
// closures, keyword calls and generated functions big enough to need EXTENDED_ARG with
// one and two prefixes. The (b) functions are run before the tests so that their code is
// quickened: decoding must see through specialized opcodes.
#pragma once
#include <Python.h>

#include <array>
#include <cstdio>
#include <vector>

#include "bytecode/tables.h"
#include "support/pyref.h"

namespace cdynamo_test {

inline const char* kSampleSource = R"PY(
import types, inspect, sys

def loops(n):
    total = 0
    for i in range(n):
        if i % 3 == 0:
            continue
        j = 0
        while j < i:
            j += 2
            if j > 7:
                break
        total += j
    else:
        total += 100
    return total

def tries(x):
    out = []
    try:
        out.append(1 / x)
    except ZeroDivisionError as e:
        out.append(type(e).__name__)
    except (TypeError, ValueError):
        out.append('tv')
    else:
        out.append('else')
    finally:
        out.append('fin')
    try:
        try:
            raise KeyError(x)
        finally:
            out.append('inner')
    except KeyError as k:
        out.append(repr(k))
    return out

class CM:
    def __init__(self, log):
        self.log = log
    def __enter__(self):
        self.log.append('enter')
        return self
    def __exit__(self, *a):
        self.log.append(('exit', a[0] is not None))
        return a[0] is ValueError

def withs(flag):
    log = []
    with CM(log) as c, CM(log):
        log.append('body')
        if flag:
            raise ValueError('x')
    return log

def nested(a):
    b = a * 2
    def inner(c):
        nonlocal b
        b += c
        return lambda d: a + b + c + d
    return inner(3)(4) + sum(x * b for x in range(a)) + len({k: v for k, v in zip('ab', 'cd')})

def gen(n):
    for i in range(n):
        x = yield i
        if x:
            yield from range(x)

class ACM:
    async def __aenter__(self):
        return 'v'
    async def __aexit__(self, *a):
        return False

async def agen():
    for i in range(3):
        yield i

async def coro(n):
    async with ACM() as v:
        return [i async for i in agen()] + [v, n]

def matcher(v):
    match v:
        case [1, *rest]:
            return rest
        case {'k': x}:
            return x
        case str() as s if len(s) > 2:
            return s.upper()
        case _:
            return None

def matches():
    return [matcher(v) for v in ([1, 2, 3], {'k': 5}, 'abcd', 7)]

def star_except():
    r = []
    try:
        raise ExceptionGroup('g', [ValueError(1), TypeError(2)])
    except* ValueError as e:
        r.append(('v', len(e.exceptions)))
    except* TypeError:
        r.append('t')
    return r

def kwcalls(a, *args, b=2, **kw):
    return dict(a=a, b=b, args=args, **kw), sorted([3, 1, 2], key=lambda x: -x), f'{a!r:>5}{b}'

def make_big(nconst, nbody):
    lines = ['def big(x):', '    t = 0']
    lines += [f'    t += {i * 7 + 1000}' for i in range(nconst)]
    lines.append('    if x:')
    lines += [f'        t += x * {i % 5}' for i in range(nbody)]
    lines.append('    while x > 0:')
    lines += [f'        t ^= {i % 3}' for i in range(nbody)]
    lines.append('        x -= 1')
    lines.append('    return t')
    ns = {}
    exec(compile('\n'.join(lines), f'<big {nconst} {nbody}>', 'exec'), ns)
    return ns['big']

BIG = make_big(400, 200)     # > 256 constants, jumps of a few hundred units
HUGE = make_big(10, 12000)   # jumps over 65535 units: two EXTENDED_ARG prefixes

CASES = [(loops, (10,)), (loops, (0,)), (tries, (0,)), (tries, (2,)), (tries, ('s',)),
         (withs, (False,)), (withs, (True,)), (nested, (3,)), (gen, (4,)), (coro, (1,)),
         (matcher, ([1, 5],)), (matches, ()), (star_except, ()), (kwcalls, (1, 2, 3)),
         (BIG, (3,)), (BIG, (0,)), (HUGE, (1,))]

def norm(r):
    if isinstance(r, types.GeneratorType):
        return list(r)
    if isinstance(r, types.CoroutineType):
        try:
            r.send(None)
        except StopIteration as s:
            return ('returned', s.value)
        return 'suspended'
    return r

def outcome(f, args):
    try:
        return ('ok', norm(f(*args)))
    except Exception as e:
        return ('raised', type(e), str(e))

for _ in range(10):  # quicken the sample code
    for f, args in CASES:
        outcome(f, args)

def same_behaviour(f, code, args):
    g = types.FunctionType(code, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    g.__kwdefaults__ = f.__kwdefaults__
    a, b = outcome(f, args), outcome(g, args)
    if a != b:
        print('different behaviour', f.__name__, a, b)
    return a == b

def all_codes(code, out):
    out.append(code)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            all_codes(c, out)
    return out

def sample_codes():
    out = []
    for f, _ in CASES:
        all_codes(f.__code__, out)
    for name in ('dis', 'inspect', 'collections', 'json.decoder', 'ast', 'typing', 'argparse',
                 'asyncio.tasks', 'contextlib', 'dataclasses'):
        __import__(name)
        mod = sys.modules[name]
        all_codes(compile(inspect.getsource(mod), mod.__file__, 'exec'), out)
    seen, uniq = set(), []
    for c in out:
        if id(c) not in seen:
            seen.add(id(c))
            uniq.append(c)
    return uniq

def positions(code):
    return [tuple(-1 if v is None else v for v in p) for p in code.co_positions()]

def lines(code):
    # Adjacent ranges of one line merged: 3.12's co_lines() merges them, 3.11's does not.
    out = []
    for s, e, l in code.co_lines():
        l = -1 if l is None else l
        if out and out[-1][2] == l and out[-1][1] == s // 2:
            out[-1] = (out[-1][0], e // 2, l)
        else:
            out.append((s // 2, e // 2, l))
    return out

def exception_table(code):
    import dis
    return [(e.start // 2, e.end // 2, e.target // 2, e.depth, int(e.lasti))
            for e in dis._parse_exception_table(code)]
)PY";

// The namespace kSampleSource ran in (borrowed; created once, kept for the process).
inline PyObject* samples() {
  static PyObject* globals = [] {
    PyObject* g = PyDict_New();
    PyDict_SetItemString(g, "__builtins__", PyEval_GetBuiltins());
    PyObject* r = PyRun_String(kSampleSource, Py_file_input, g, g);
    if (!r) PyErr_Print();
    Py_XDECREF(r);
    return g;
  }();
  return globals;
}

// Calls a function of kSampleSource; prints and clears a Python error (returns null).
template <class... Args>
cdynamo::Ref callSample(const char* name, Args... args) {
  PyObject* fn = PyDict_GetItemString(samples(), name);
  if (!fn) {
    std::fprintf(stderr, "no sample function %s\n", name);
    return cdynamo::Ref();
  }
  cdynamo::Ref r = cdynamo::Ref::steal(PyObject_CallFunctionObjArgs(fn, args..., nullptr));
  if (!r) PyErr_Print();
  return r;
}

inline std::vector<cdynamo::Ref> sampleCodes() {
  std::vector<cdynamo::Ref> out;
  cdynamo::Ref list = callSample("sample_codes");
  if (!list) return out;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list.get()); ++i) {
    out.push_back(cdynamo::Ref::borrow(PyList_GET_ITEM(list.get(), i)));
  }
  return out;
}

// A list of int tuples from Python as vectors of N ints.
template <size_t N>
std::vector<std::array<int, N>> intTuples(PyObject* list) {
  std::vector<std::array<int, N>> out;
  if (!list) return out;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); ++i) {
    std::array<int, N> t{};
    for (size_t k = 0; k < N; ++k) {
      t[k] = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(PyList_GET_ITEM(list, i), k)));
    }
    out.push_back(t);
  }
  return out;
}

// co_positions() of `code`, one Position per code unit, None as -1.
inline std::vector<cdynamo::bytecode::Position> pyPositions(PyObject* code) {
  std::vector<cdynamo::bytecode::Position> out;
  cdynamo::Ref list = callSample("positions", code);
  for (const auto& t : intTuples<4>(list.get())) out.push_back({t[0], t[1], t[2], t[3]});
  return out;
}

// co_lines() of `code` as (start unit, end unit, line or -1).
// (start, end, line) ranges with adjacent ranges of one line merged, as `lines` gives them.
inline std::vector<std::array<int, 3>> mergedLines(const std::vector<std::array<int, 3>>& in) {
  std::vector<std::array<int, 3>> out;
  for (const auto& r : in) {
    std::array<int, 3> x = r;
    if (x[2] < -1) x[2] = -1;
    if (!out.empty() && out.back()[2] == x[2] && out.back()[1] == x[0])
      out.back()[1] = x[1];
    else
      out.push_back(x);
  }
  return out;
}

inline std::vector<std::array<int, 3>> pyLines(PyObject* code) {
  cdynamo::Ref list = callSample("lines", code);
  return intTuples<3>(list.get());
}

inline std::string bytesField(PyObject* code, const char* name) {
  cdynamo::Ref b = cdynamo::Ref::steal(PyObject_GetAttrString(code, name));
  if (!b || !PyBytes_Check(b.get())) return std::string();
  return std::string(PyBytes_AS_STRING(b.get()), PyBytes_GET_SIZE(b.get()));
}

inline long intField(PyObject* code, const char* name) {
  cdynamo::Ref v = cdynamo::Ref::steal(PyObject_GetAttrString(code, name));
  return v ? PyLong_AsLong(v.get()) : -1;
}

}  // namespace cdynamo_test
