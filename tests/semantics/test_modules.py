"""nn.Module in the trace: attribute access, containers (ModuleList/ModuleDict/Sequential),
submodules in loops, self.training branches, helper methods, modules as globals/closures.

Most cases pass a freshly built (seeded) module as an argument to a function that calls it,
so eager and compiled runs get equal but distinct modules and their final state is compared.
"""
import pytest
import torch
from torch import nn

from .harness import COMPILE_MODULE, Cases, check

case = Cases()


def lin_args(din=4, dout=3, batch=2):
    return lambda: (nn.Linear(din, dout), torch.randn(batch, din))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class WithHelper(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.scale = 0.5

    def _norm(self, x):
        return x / (x.norm(dim=-1, keepdim=True) + 1e-6)

    def forward(self, x):
        return self._norm(self.proj(x)) * self.scale


class Stack(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


class Indexed(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        x = self.layers[0](x)
        x = self.layers[-1](x)
        for i, layer in enumerate(self.layers[1:]):
            x = x + i * layer(x)
        return x, len(self.layers)


class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})

    def forward(self, x):
        out = {}
        for name, head in self.heads.items():
            out[name] = head(x)
        return out, self.heads["a"](x).sum()


class Dropouty(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        if self.training:
            return y * 2
        return y - 1


class WithBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(4))
        self.momentum = 0.1

    def forward(self, x):
        self.running.mul_(1 - self.momentum).add_(x.mean(0) * self.momentum)
        return x - self.running


class WithParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4))
        self.bias = None

    def forward(self, x):
        y = x * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.fc(x) + self.calls


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Linear(4, 4)

    def forward(self, x):
        for _ in range(3):
            x = self.block(x).tanh()
        return x


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = MLP()
        self.head = nn.Sequential(nn.Linear(2, 2), nn.Sigmoid())

    def forward(self, x):
        return self.head(self.mlp(x))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.bn = nn.BatchNorm2d(2)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return self.pool(torch.relu(self.bn(self.conv(x)))).flatten(1)


class KwargForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, scale=1.0, *, residual=False):
        y = self.fc(x) * scale
        if residual:
            y = y + x
        return y


GLOBAL_MLP = None


def _global_mlp():
    global GLOBAL_MLP
    if GLOBAL_MLP is None:
        torch.manual_seed(1)
        GLOBAL_MLP = MLP().eval()
    return GLOBAL_MLP


def make_closure_caller():
    torch.manual_seed(2)
    m = nn.Linear(4, 4)

    def run(x):
        return m(x).relu()
    return run


CLOSURE_CALLER = make_closure_caller()


def call(m, x):
    return m(x)


@case(lin_args())
def linear_call(m, x):
    return m(x)


@case(lin_args())
def linear_attribute_access(m, x):
    return x @ m.weight.t() + m.bias, m.in_features, m.out_features


@case(lin_args())
def module_weight_shape_branch(m, x):
    if m.weight.shape[0] == 3:
        return m(x) * 2
    return m(x)


@case(lambda: (MLP(), torch.randn(2, 4)))
def mlp_forward(m, x):
    return m(x)


@case(lambda: (MLP(), torch.randn(2, 4)))
def submodule_called_directly(m, x):
    return m.act(m.fc1(x)).sum(-1)


@case(lambda: (WithHelper(), torch.randn(2, 4)))
def forward_with_helper_method(m, x):
    return m(x)


@case(lambda: (Stack(), torch.randn(2, 4)))
def module_list_iteration(m, x):
    return m(x)


@case(lambda: (Indexed(), torch.randn(2, 4)))
def module_list_indexing_slicing(m, x):
    return m(x)


@case(lambda: (Heads(), torch.randn(2, 4)))
def module_dict_items(m, x):
    return m(x)


@case(lambda: (Heads(), torch.randn(2, 4)))
def module_dict_membership_keys(m, x):
    y = x
    if "a" in m.heads:
        y = m.heads["a"](x)
    return y, list(m.heads.keys())


@case(lambda: (nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)), torch.randn(2, 4)))
def sequential_call(m, x):
    return m(x)


@case(lambda: (nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)), torch.randn(2, 4)))
def sequential_index_len_iter(m, x):
    y = m[0](x)
    for layer in m[1:]:
        y = layer(y)
    return y, len(m)


@case(lambda: (Dropouty().train(), torch.randn(2, 4)))
def training_branch_train(m, x):
    return m(x)


@case(lambda: (Dropouty().eval(), torch.randn(2, 4)))
def training_branch_eval(m, x):
    return m(x)


@case(lambda: (nn.Dropout(0.5).eval(), torch.randn(2, 4)))
def dropout_eval_is_identity(m, x):
    return m(x)


@case(lambda: (WithBuffer(), torch.randn(3, 4)))
def buffer_mutated_in_place(m, x):
    return m(x)


@case(lambda: (WithParam(), torch.randn(4)))
def parameter_and_none_attribute(m, x):
    return m(x)


@case(lambda: (Counting(), torch.randn(2, 4)))
def module_python_attribute_mutation(m, x):
    return m(x)


@case(lambda: (Shared(), torch.randn(2, 4)))
def same_submodule_in_loop(m, x):
    return m(x)


@case(lambda: (Nested(), torch.randn(2, 4)))
def nested_modules(m, x):
    return m(x)


@case(lambda: (ConvNet().eval(), torch.randn(2, 1, 5, 5)))
def conv_bn_eval(m, x):
    return m(x)


@case(lambda: (ConvNet().train(), torch.randn(2, 1, 5, 5)))
def conv_bn_train_updates_running_stats(m, x):
    return m(x)


@case(lambda: (KwargForward(), torch.randn(2, 4)))
def module_called_with_kwargs(m, x):
    return m(x, scale=2.0, residual=True)


@case(lambda: (MLP(), torch.randn(2, 4)))
def named_parameters_loop(m, x):
    total = x.sum() * 0
    for name, p in m.named_parameters():
        if name.endswith("weight"):
            total = total + p.sum()
    return total


@case(lambda: (MLP(), torch.randn(2, 4)))
def parameters_sum(m, x):
    return sum(p.sum() for p in m.parameters()) + x.sum()


@case(lambda: (MLP(), torch.randn(2, 4)))
def children_loop(m, x):
    names = [type(c).__name__ for c in m.children()]
    return m.fc1(x), names


@case(lambda: (torch.randn(2, 4),))
def global_module_called(x):
    return _global_mlp()(x)


@case(lambda: (torch.randn(2, 4),))
def closure_module_called(x):
    return CLOSURE_CALLER(x)


@case(lambda: (nn.LayerNorm(4), torch.randn(2, 4)))
def layernorm_module(m, x):
    return m(x)


@case(lambda: (nn.Embedding(10, 3), torch.tensor([[1, 2], [3, 9]])))
def embedding_module(m, idx):
    return m(idx)


@case(lambda: (nn.GELU(), torch.randn(2, 4)))
def activation_module_call_helper(m, x):
    return call(m, x)


@case(lambda: (MLP(), torch.randn(2, 4)))
def module_isinstance_checks(m, x):
    y = x
    for c in m.children():
        if isinstance(c, nn.Linear) and c.in_features == y.shape[-1]:
            y = c(y)
        elif isinstance(c, nn.ReLU):
            y = c(y)
    return y


@case(lambda: (MLP(), torch.randn(2, 4)))
def functional_with_module_params(m, x):
    return torch.nn.functional.linear(x, m.fc1.weight, m.fc1.bias).relu()


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_modules(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


# Compiling the module itself: cdynamo.compile(module)(x) on a fresh module each run.
@pytest.mark.parametrize("factory,shape", [
    (MLP, (2, 4)), (Stack, (2, 4)), (Nested, (2, 4)), (WithHelper, (2, 4)),
    (lambda: Dropouty().eval(), (2, 4)), (WithBuffer, (3, 4)), (Counting, (2, 4)),
    (lambda: ConvNet().train(), (2, 1, 5, 5)), (Heads, (2, 4)),
], ids=["MLP", "Stack", "Nested", "WithHelper", "Dropouty_eval", "WithBuffer", "Counting", "ConvNet_train",
        "Heads"])
def test_compiled_module(factory, shape):
    check(COMPILE_MODULE, lambda: (factory(), torch.randn(*shape)))


def test_compiled_module_with_forward_hooks_is_one_graph_under_wrap_top_frame():
    # torch.compile(module) of a module with hooks of its own under wrap_top_frame: the hooks
    # and the forward are traced as one frame (one graph), as torch._dynamo captures them
    # then; results and the hooks' effects as eager, and a hit on the second call.
    import cdynamo
    import cdynamo.testing

    def make():
        torch.manual_seed(0)
        m = nn.Linear(6, 6, bias=False)
        m.register_forward_pre_hook(lambda mod, inp: (inp[0] + 1,))
        m.register_forward_hook(lambda mod, inp, out: out * 2)
        return m

    m = make()
    counter = cdynamo.testing.CompileCounter()
    cm = cdynamo.compile(m, backend=counter)
    x = torch.randn(3, 6)
    # By default (as torch._dynamo) the hooks and the forward are frames of their own.
    torch.testing.assert_close(cm(x), make()(x))
    assert counter.frame_count == 3
    cdynamo.reset()
    counter = cdynamo.testing.CompileCounter()
    cm = cdynamo.compile(m, backend=counter)
    cdynamo.config.wrap_top_frame = True
    try:
        torch.testing.assert_close(cm(x), make()(x))
        torch.testing.assert_close(cm(x), make()(x))
        assert (counter.frame_count, counter.op_count) == (1, 3)
    # A hook removed afterwards: the compiled module follows it.
        for h in list(m._forward_hooks):
            del m._forward_hooks[h]
        want = make()
        want._forward_hooks.clear()
        torch.testing.assert_close(cm(x), want(x))
    finally:
        cdynamo.config.wrap_top_frame = None

