"""NumPy in a trace (docs/conformance.md, mechanism numpy): as torch._dynamo does, an
ndarray the program makes from a tensor is a tensor in the graph, and NumPy functions,
ndarray methods, attributes and operators on it are recorded as torch._numpy calls; arrays
leave the trace as real ndarrays, sharing memory where eager's do. NumPy calls on constants
(np.iinfo, np.dtype) are computed at trace time; NumPy dtypes and scalars from the program
are guarded constants. Each case against eager on a first call and a cache hit, with
torch._dynamo's graph count.

Where torch._numpy differs from NumPy, the result follows torch._numpy, as under
torch._dynamo: a 0-d result is a 0-d ndarray where NumPy gives a scalar (a.mean(),
a[1, 2]), and np.meshgrid gives a list; the cases here avoid those.
"""
import numpy as np
import pytest
import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


def one():
    return lambda: (torch.randn(4, 3),)


@pytest.mark.parametrize("case", [
    "a.T",
    "a + a, a - 1.5, a * 2, -a, abs(a), a ** 2",
    "a > 0, a == a, 0.5 < a",
    "a.copy(), a.transpose(1, 0), a.reshape([1, a.size])",
    "a.max(axis=0), a.all(axis=0), a.sum(axis=1), a.mean(axis=0)",
    "a.size, a.shape, a.ndim, a.itemsize, a.strides, a * 1",
    "a.real, a.imag",
    "a[0], a[:, 1:], a[1:2, 2], a[..., 0]",
    "np.mean(a, 1), np.asarray(np.sum(a)), np.sum(a, axis=0, keepdims=True)",
    "np.linalg.norm(a, axis=0), np.fft.fftshift(a)",
    "tuple(np.meshgrid(a[0], a[1]))",
    "np.exp(a), np.add(a, 1), np.maximum(a, 0.0)",
    "np.concatenate([a, a + 1], axis=0), np.stack((a, a))",
    "torch.from_numpy(a.T), torch.from_numpy(np.mean(a, 0)) * 2",
])
def test_ndarray_operations(case):
    ns = {"np": np, "torch": torch}
    exec(compile(f"def fn(x):\n    a = x.numpy()\n    return {case}\n", "<case>", "exec"), ns)  # noqa: S102
    same_as_eager(ns["fn"], one(), fullgraph=True)


@pytest.mark.parametrize("case", [
    "np.ones_like(x, dtype=np.float64)",
    "np.full_like(x, 2.4, dtype=np.dtype('float'))",
    "x + np.iinfo(np.int16).max",
    "x + np.finfo(np.float32).min",
])
def test_numpy_functions_of_tensors_and_constants(case):
    ns = {"np": np, "torch": torch}
    exec(compile(f"def fn(x):\n    return {case}\n", "<case>", "exec"), ns)  # noqa: S102
    same_as_eager(ns["fn"], one(), fullgraph=True)


def test_numpy_random_is_recorded_not_folded():
    def fn():
        r = np.random.randn(2, 2)
        return r - r, r.shape

    same_as_eager(fn, lambda: (), fullgraph=True)


def test_from_numpy_shares_memory_with_the_tensor():
    # torch.from_numpy(x.numpy()) is x's memory: an in-place change shows in x.
    def fn(x):
        t = torch.from_numpy(x.numpy())
        t.add_(1)
        return t * 2

    same_as_eager(fn, one(), fullgraph=True)


def test_returned_array_is_a_view_of_the_input():
    def fn(x):
        return x.numpy(), x.numpy().T

    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    x = torch.zeros(2, 3)
    for _ in range(2):
        a, at = cdynamo.compile(fn, backend=cnt, fullgraph=True)(x)
        assert type(a) is np.ndarray and type(at) is np.ndarray
        a[0, 1] = 7.0
        assert x[0, 1].item() == 7.0 and at[1, 0] == 7.0
        x.zero_()
    assert cnt.frame_count == 1


def test_numpy_dtype_and_scalar_arguments_are_guarded_constants():
    def fn(x, dt, s):
        return x + np.finfo(dt).max * 0 + s

    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    x = torch.zeros(3, dtype=torch.float64)
    for dt in (np.dtype("float64"), np.ones(1).dtype, np.dtype(float)):  # equal dtypes: one entry
        torch.testing.assert_close(cfn(x, dt, np.float64(2.5)), fn(x, np.dtype("float64"), np.float64(2.5)))
    assert cnt.frame_count == 1
    torch.testing.assert_close(cfn(x, np.dtype("float32"), np.float64(2.5)), fn(x, np.dtype("float32"), 2.5))
    torch.testing.assert_close(cfn(x, np.dtype("float32"), np.float64(-1.0)), fn(x, np.dtype("float32"), -1.0))
    assert cnt.frame_count == 3  # another dtype, another scalar: each a recompile


def test_numpy_scalar_returned_keeps_its_type():
    def fn(x, s):
        return x + s, s * 2

    same_as_eager(fn, lambda: (torch.randn(3), np.float32(1.5)))


def test_data_dependent_branch_on_an_array_breaks_the_graph():
    def fn(x):
        a = x.numpy()
        if np.sum(a) > 0:
            return torch.from_numpy(a + 1)
        return torch.from_numpy(a - 1)

    cdynamo.reset()
    cfn = cdynamo.compile(fn, backend=cdynamo.testing.CompileCounter())
    for x in (torch.ones(3), -torch.ones(3), torch.ones(3)):
        torch.testing.assert_close(cfn(x), fn(x))


def test_numpy_function_without_a_counterpart_is_refused_clearly():
    def fn(x):
        return np.busday_count("2011-01", "2011-02") + x

    cdynamo.reset()
    with pytest.raises(cdynamo.exc.Unsupported, match="torch._numpy counterpart"):
        cdynamo.compile(fn, backend="eager", fullgraph=True)(torch.ones(2))
    cdynamo.reset()
    torch.testing.assert_close(cdynamo.compile(fn, backend="eager")(torch.ones(2)), fn(torch.ones(2)))
