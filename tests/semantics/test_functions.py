"""Functions inlined into the trace: argument passing of every kind, closures, nonlocal,
inner functions and lambdas made in the trace, functools.partial, decorators, recursion."""
import functools

import pytest
import torch

from .harness import Call, Cases, check, tensors

case = Cases()
T4 = tensors((4,))


def add(a, b):
    return a + b


def scale(x, factor=2.0, *, bias=0.0):
    return x * factor + bias


def total(*args):
    out = args[0]
    for a in args[1:]:
        out = out + a
    return out


def with_kwargs(x, **kwargs):
    for k in sorted(kwargs):
        x = x + kwargs[k]
    return x, sorted(kwargs)


def everything(a, b=1, *rest, c, d=4, **kw):
    return a * b + sum(rest) + c * d + len(kw)


def helper_returns_tuple(x):
    return x.sin(), x.cos()


def helper_mutates_list(xs, v):
    xs.append(v)


class Mul:
    def __init__(self, k):
        self.k = k

    def __call__(self, t):
        return t * self.k


def make_adder(n):
    def adder(x):
        return x + n
    return adder


def counter_factory():
    count = 0

    def inc(x):
        nonlocal count
        count += 1
        return x * count
    return inc


def fact(n):
    if n <= 1:
        return 1
    return n * fact(n - 1)


def tensor_pow_rec(x, n):
    if n == 0:
        return torch.ones_like(x)
    return x * tensor_pow_rec(x, n - 1)


def double_it(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) * 2
    return wrapper


@double_it
def decorated_at_import(x):
    return x + 1


GLOBAL_ADDER = make_adder(10)
GLOBAL_PARTIAL = functools.partial(scale, factor=3.0)


@case(T4)
def call_positional(x):
    return add(x, 1)


@case(T4)
def call_keyword(x):
    return add(b=x, a=2)


@case(T4)
def call_using_default(x):
    return scale(x)


@case(T4)
def call_override_default_and_kwonly(x):
    return scale(x, 0.5, bias=1.0)


@case(T4)
def call_star_args(x):
    return total(x, x * 2, 3)


@case(T4)
def call_with_unpacked_list(x):
    parts = [x, 1, 2]
    return total(*parts)


@case(T4)
def call_kwargs_collector(x):
    return with_kwargs(x, p=1, q=2)


@case(T4)
def call_with_unpacked_dict(x):
    opts = {"factor": 4.0, "bias": -1.0}
    return scale(x, **opts)


@case(T4)
def call_all_parameter_kinds(x):
    return x * everything(2, 3, 5, 6, c=7, e=1, f=2)


@case(T4)
def call_returning_tuple(x):
    s, c = helper_returns_tuple(x)
    return s * s + c * c


@case(T4)
def call_mutating_list(x):
    xs = []
    helper_mutates_list(xs, x + 1)
    helper_mutates_list(xs, x + 2)
    return torch.stack(xs)


@case(lambda: ([torch.randn(2)],))
def call_mutating_list_arg(xs):
    helper_mutates_list(xs, xs[0] * 3)
    return len(xs)


@case(T4)
def nested_calls(x):
    return add(scale(x, 2.0), add(x, 1))


@case(T4)
def closure_from_global_factory(x):
    return GLOBAL_ADDER(x)


@case(T4)
def closure_made_in_trace(x):
    add5 = make_adder(5)
    return add5(x) + make_adder(1)(x)


@case(T4)
def inner_function_reads_enclosing(x):
    k = 3

    def inner(y):
        return y * k
    return inner(x) + inner(1)


@case(T4)
def inner_function_captures_tensor(x):
    y = x.cos()

    def inner(z):
        return z + y
    return inner(x)


@case(T4)
def nonlocal_counter_in_trace(x):
    n = 0

    def bump():
        nonlocal n
        n += 1
    bump()
    bump()
    return x * n


@case(T4)
def nonlocal_via_factory(x):
    inc = counter_factory()
    a = inc(x)
    b = inc(x)
    return a + b


@case(T4)
def lambda_in_trace(x):
    f = lambda t, k=2: t * k  # noqa: E731
    return f(x) + f(x, 3)


@case(T4)
def lambda_captures_local(x):
    c = 5
    g = lambda t: t + c  # noqa: E731
    return g(x)


@case(T4)
def lambda_passed_to_helper(x):
    def apply(fn, v):
        return fn(v)
    return apply(lambda t: t.relu(), x)


@case(T4)
def partial_made_in_trace(x):
    p = functools.partial(scale, factor=0.5)
    return p(x, bias=2.0)


@case(T4)
def partial_from_global(x):
    return GLOBAL_PARTIAL(x)


@case(T4)
def partial_of_torch_function(x):
    clamp01 = functools.partial(torch.clamp, min=0.0, max=1.0)
    return clamp01(x)


@case(T4)
def decorator_applied_at_import(x):
    return decorated_at_import(x)


@case(T4)
def decorator_applied_in_trace(x):
    def inner(t):
        return t - 1
    wrapped = double_it(inner)
    return wrapped(x)


@case(T4)
def decorator_syntax_in_trace(x):
    @double_it
    def inner(t):
        return t * 3
    return inner(x)


@case(T4)
def recursion_constant_depth(x):
    return x * fact(5)


@case(T4)
def recursion_on_tensor(x):
    return tensor_pow_rec(x, 3)


@case(T4)
def local_recursive_function(x):
    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)
    return x + fib(6)


@case(T4)
def function_stored_in_dict(x):
    ops = {"sin": torch.sin, "add1": lambda t: t + 1}
    return ops["add1"](ops["sin"](x))


@case(T4)
def function_stored_in_list(x):
    fns = [torch.relu, torch.neg, make_adder(2)]
    for f in fns:
        x = f(x)
    return x


@case(T4)
def higher_order_map_like(x):
    def apply_all(fns, v):
        return [f(v) for f in fns]
    return apply_all([torch.sin, torch.cos], x)


@case(lambda: Call(torch.randn(4), scale=3.0))
def compiled_fn_with_keyword_arg(x, scale=1.0):
    return x * scale


@case(lambda: Call(torch.randn(4), torch.randn(4), alpha=0.5))
def compiled_fn_with_kwonly(x, y, *, alpha=1.0):
    return x + alpha * y


@case(lambda: (torch.randn(4), torch.randn(4), torch.randn(4)))
def compiled_fn_with_varargs(*xs):
    return sum(xs)


@case(lambda: Call(torch.randn(4), a=1, b=2))
def compiled_fn_with_varkw(x, **opts):
    return x + opts["a"] * opts["b"], sorted(opts.keys())


@case(T4)
def default_mutable_argument_read(x, cfg={"k": 2}):  # noqa: B006
    return x * cfg["k"]


@case(T4)
def callable_class_instance_call(x):
    return Mul(4)(x)


@case(T4)
def generator_function_consumed(x):
    def gen(n):
        for i in range(n):
            yield x * i
    return list(gen(3))


@case(T4)
def function_attributes_read(x):
    return x * len(add.__name__)


@case(T4)
def made_function_annotations_read(x):
    # The annotations a def gives are read back (not an empty dict), the same dict on every read.
    def g(a: int, b: "torch.Tensor" = None) -> float:
        return a
    ann = g.__annotations__
    ann["extra"] = 3
    return x + 1, g.__annotations__, g.__annotations__ is ann, sorted(g.__annotations__)


@case(T4)
def made_function_without_annotations(x):
    def h():
        return 1
    return x + 1, h.__annotations__, h.__annotations__ is h.__annotations__


@case(T4, expect_graphs=2)
def made_function_annotations_after_break(x):
    # The function crosses a graph break: the rebuilt function keeps what the def gave it.
    def g(a: torch.Tensor) -> int:
        return a
    y = x + 1
    torch._dynamo.graph_break()
    return y * 2, g.__annotations__


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_functions(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)
