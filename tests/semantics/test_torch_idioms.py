"""Torch idioms: torch.Size arithmetic and comparisons, shape unpacking, factories of
constants, dtype conversions, views, in-place ops and item assignment, grad-mode and
compiling queries, __torch_function__ checks."""
import pytest
import torch
import torch.nn.functional as F
import torch._dynamo

import cdynamo
import cdynamo.testing

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))
T23 = tensors((2, 3))
T234 = tensors((2, 3, 4))


@case(T234)
def shape_unpacking(x):
    b, n, d = x.shape
    return x.reshape(b * n, d), (b, n, d)


@case(T234)
def shape_star_unpacking(x):
    *lead, d = x.shape
    return x.view(-1, d), lead


@case(T234)
def size_indexing_negative_and_slice(x):
    s = x.size()
    return x.reshape(s[0], -1), s[-1], s[1:]


@case(T234)
def size_returned_is_torch_size(x):
    return x.shape, x.size(), x.sum()


@case(T23)
def size_arithmetic(x):
    s = x.shape + (1,)
    t = x.shape[:1] + torch.Size([3, 1])
    return x.reshape(s), t, s


@case(T23)
def size_comparisons(x):
    if x.shape == (2, 3) and x.shape != torch.Size([3, 2]) and x.size() == torch.Size([2, 3]):
        return x + 1
    return x


@case(T23)
def size_numel_and_len(x):
    return x * (x.shape.numel() + len(x.shape))


@case(T23)
def size_in_new_tensor(x):
    return torch.zeros(x.shape) + x, torch.ones(x.size(0), x.size(1) * 2)


@case(T23)
def torch_tensor_of_constants(x):
    w = torch.tensor([1.0, 2.0, 3.0])
    return x * w


@case(T4)
def torch_tensor_int_dtype(x):
    idx = torch.tensor([3, 0], dtype=torch.long)
    return x[idx]


@case(T4)
def torch_zeros_ones_full(x):
    return x + torch.zeros(4) + torch.ones(4) * 2 + torch.full((4,), 0.5)


@case(T4)
def torch_arange_linspace(x):
    return x * torch.arange(4) + torch.linspace(0, 1, 4)


@case(T4)
def like_factories(x):
    return torch.zeros_like(x) + torch.ones_like(x) + torch.full_like(x, 3.0) + torch.empty_like(x).fill_(1)


@case(T4)
def new_factories(x):
    return x.new_zeros(2), x.new_ones((3,)), x.new_full((2,), 7.0), x.new_tensor([1.0, 2.0])


@case(T4)
def to_dtype(x):
    return x.to(torch.float64), x.to(dtype=torch.int32), x.double(), x.long(), x.half().float()


@case(T4)
def to_same_dtype_and_device(x):
    return x.to(x.dtype), x.to("cpu"), x.to(x.device, torch.float16)


@case(T4)
def type_as_and_dtype_attr(x):
    y = torch.arange(4).type_as(x)
    return y, y.dtype == x.dtype


@case(T234)
def view_star_shape(x):
    shape = (4, 6)
    return x.view(*shape), x.view(shape), x.view(2, -1)


@case(T234)
def reshape_permute_transpose(x):
    return x.permute(2, 0, 1).reshape(4, 6), x.transpose(0, 1).contiguous(), x.flatten(1)


@case(T23)
def unsqueeze_squeeze_expand(x):
    return x.unsqueeze(0).expand(3, 2, 3), x[None, :, None].squeeze(), x[..., None].shape


@case(lambda: (torch.randn(4),))
def inplace_add_on_arg(x):
    x.add_(1)
    return x


@case(lambda: (torch.randn(4), torch.randn(4)))
def inplace_chain_on_arg(x, y):
    x.mul_(2).add_(y)
    y.zero_()
    return x.sum()


@case(lambda: (torch.randn(4),))
def inplace_on_local_then_return(x):
    y = x.clone()
    y.relu_()
    y += 1
    return y


@case(lambda: (torch.randn(3, 4), torch.randn(4)))
def setitem_row(x, y):
    x[0] = y
    return x * 2


@case(lambda: (torch.randn(4),))
def setitem_scalar_and_slice(x):
    x[1] = 5.0
    x[2:] = 0
    return x.sum()


@case(lambda: (torch.randn(4),))
def setitem_mask(x):
    x[x < 0] = 0.0
    return x


@case(lambda: (torch.randn(4, 4),))
def getitem_advanced(x):
    return x[1:3, ::2], x[:, -1], x[[0, 2]], x[..., 0], x[None, 1]


@case(lambda: (torch.randn(4),))
def augmented_assign_on_arg(x):
    x += 1
    x *= 2
    return x


@case(lambda: (torch.randn(4, requires_grad=True),))
def is_grad_enabled_query(x):
    return x * 2, torch.is_grad_enabled()


@case(T4)
def is_compiling_selects_equivalent_path(x):
    if torch.compiler.is_compiling():
        y = x * 2
    else:
        y = x + x
    return y


@case(T4)
def dynamo_is_compiling_selects_equivalent_path(x):
    if not torch._dynamo.is_compiling():
        return x.add(x)
    return x.mul(2)


@case(T4)
def has_torch_function_check(x):
    if torch.overrides.has_torch_function((x,)):
        return x
    return x + 1


@case(T4)
def has_torch_function_unary(x):
    if not torch._C._has_torch_function_unary(x):
        return x * 3
    return x


@case(T4)
def is_tensor_and_torch_is_tensor(x):
    if torch.is_tensor(x) and torch.is_floating_point(x):
        return x + 1
    return x


@case(T23)
def tensor_methods_returning_python_values(x):
    return x + 1, x.dim(), x.numel(), x.size(1), x.stride(), x.is_contiguous(), x.element_size()


@case(T4)
def dtype_attributes(x):
    return x + 1, x.dtype.is_floating_point, x.dtype.itemsize, torch.finfo(x.dtype).eps


@case(T4)
def functional_ops(x):
    return F.relu(x), F.softmax(x, dim=0), F.pad(x, (1, 1)), F.gelu(x)


@case(T23)
def reductions_with_keepdim(x):
    v, i = x.max(dim=1)
    return x.sum(0), x.mean(-1, keepdim=True), v, i, x.argmin()


@case(T23)
def torch_where_and_masking(x):
    return torch.where(x > 0, x, torch.zeros_like(x)), x.masked_fill(x < 0, -1.0)


@case(lambda: (torch.randn(4), torch.randn(4)))
def comparisons_produce_bool_tensors(x, y):
    return x > y, (x == y).any(), torch.maximum(x, y)


@case(T4)
def chunk_split_unbind(x):
    a, b = x.chunk(2)
    c = x.split([1, 3])
    d = x.unbind()
    return a + b, c, d


@case(T23)
def cat_stack_with_list_arg(x):
    return torch.cat([x, x * 2], dim=1), torch.stack((x, x), 0)


@case(T4)
def scalar_tensor_arithmetic(x):
    s = torch.tensor(2.0)
    return x * s + torch.tensor(1)


@case(lambda: (torch.randn(3, 4), torch.randn(4, 5)))
def matmul_variants(a, b):
    return a @ b, torch.mm(a, b), torch.matmul(a, b).t(), torch.einsum("ij,jk->ik", a, b)


@case(T4)
def tensor_dunder_ops_with_python_scalars(x):
    return 2 - x, 3 / (x.abs() + 1), x ** 2, -x, x // 1, x % 2, abs(x)


@case(lambda: (torch.randint(0, 10, (4,)),))
def integer_tensor_ops(x):
    return x // 3, x % 3, x & 1, x | 2, x << 1, x.float() / 2


@case(lambda: (torch.randn(4) > 0, torch.randn(4) > 0))
def bool_tensor_ops(a, b):
    return a & b, a | b, ~a, a ^ b


@case(T4)
def detach_clone_contiguous(x):
    return x.detach().clone().contiguous() + 1


@case(lambda: (torch.randn(2, 3, dtype=torch.float64),))
def float64_input(x):
    return x.sum(dtype=torch.float32), x.float() * 2


@case(T4)
def dtype_promotion(x):
    return x + torch.arange(4), x.int() + 1.5, torch.ones(2, dtype=torch.int8) * 300


@case(T4)
def torch_size_constructor(x):
    s = torch.Size([2, 2])
    return x.reshape(s), s


@case(T4)
def torch_function_mode_free_function_call(x):
    return torch.add(x, 1, alpha=2), torch.clamp(x, -0.5, 0.5), torch.flip(x, [0])


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_torch_idioms(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


def _is_compiling_probe(x):
    return x + 1, torch.compiler.is_compiling()


def test_is_compiling_true_in_trace():
    """torch.compiler.is_compiling() is False eagerly and True inside the trace (cdynamo and dynamo)."""
    x = torch.randn(4)
    assert _is_compiling_probe(x)[1] is False
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(_is_compiling_probe, backend=cnt)
    for _ in range(2):
        y, flag = cfn(x)
        torch.testing.assert_close(y, x + 1)
        assert flag is True, cdynamo.stats()["native_frames"]
    assert cnt.frame_count == 1 and cdynamo.stats()["frames_native"] == 0, cdynamo.stats()
    dcnt = torch._dynamo.testing.CompileCounter()
    assert torch.compile(_is_compiling_probe, backend=dcnt)(x)[1] is True
    assert dcnt.frame_count == 1


def _dynamo_compiling_probe(x):
    return x + 1, torch.compiler.is_dynamo_compiling(), torch.compiler.is_exporting()


def test_is_dynamo_compiling_true_in_trace():
    """torch.compiler.is_dynamo_compiling() answers as is_compiling() does (False eagerly,
    True in the trace, as under torch._dynamo); is_exporting() stays False."""
    x = torch.randn(4)
    assert _dynamo_compiling_probe(x)[1:] == (False, False)
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(_dynamo_compiling_probe, backend=cnt)
    for _ in range(2):
        y, flag, exporting = cfn(x)
        torch.testing.assert_close(y, x + 1)
        assert flag is True and exporting is False, cdynamo.stats()["native_frames"]
    assert cnt.frame_count == 1 and cdynamo.stats()["frames_native"] == 0, cdynamo.stats()
    dcnt = torch._dynamo.testing.CompileCounter()
    assert torch.compile(_dynamo_compiling_probe, backend=dcnt)(x)[1:] == (True, False)
    assert dcnt.frame_count == 1


def test_isinstance_buffer_reads_the_flag_of_the_tensor():
    # torch.nn.Buffer(t) is a plain tensor carrying a flag its metaclass's __instancecheck__
    # reads: the answer is the object's, guarded, not its type's.
    def f(b):
        if isinstance(b, torch.nn.Buffer):
            return b + 1
        return b - 1

    check(f, lambda: (torch.nn.Buffer(torch.ones(5)),))
    check(f, lambda: (torch.ones(5),))
    counter = cdynamo.testing.CompileCounter()
    c = cdynamo.compile(f, backend=counter, fullgraph=True)
    for b in (torch.nn.Buffer(torch.ones(3)), torch.ones(3), torch.nn.Buffer(torch.ones(3))):
        torch.testing.assert_close(c(b), f(b))
    assert counter.frame_count == 2


def test_compiled_function_called_inside_a_trace_is_traced_into_it():
    # As torch._dynamo: the outer compile's backend gets one graph with the inner function's ops.
    inner_counter = cdynamo.testing.CompileCounter()
    inner = cdynamo.compile(lambda x: x.sin() + 1, backend=inner_counter)

    def outer(x):
        return inner(x) * 2

    counter = cdynamo.testing.CompileCounter()
    c = cdynamo.compile(outer, backend=counter, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(c(x), outer(x))
    torch.testing.assert_close(c(x), outer(x))
    assert (counter.frame_count, counter.op_count) == (1, 3)
    again = cdynamo.compile(inner, backend=counter, fullgraph=True)
    torch.testing.assert_close(again(x), x.sin() + 1)
    assert counter.frame_count == 2
