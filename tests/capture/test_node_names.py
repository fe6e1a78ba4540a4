"""Graph nodes are named as torch._dynamo names them: a node the program stores into a local
(in the compiled frame or in a function it inlines) takes the local's name, made unique as FX
makes names while the graph grows (x, x_1, ...; a name FX reserves, a builtin or keyword, gets
a suffix), and inputs keep their source's name (l_x_, target L_x_). Each function is compiled
by cdynamo and by torch._dynamo in the same run and the call nodes' names compared; the
compiled result is compared with eager on the first call and on a cache hit."""
import pytest
import torch

import cdynamo
import cdynamo.testing


def stored_twice(x):
    a = x + 1
    b = x + 2
    a = a * b
    y = a.sin()
    return y


def locals_named_like_builtins(x, y):
    sum = x + y
    z = torch.relu(sum)
    input = z.cos()
    x_1 = input + 1
    x = x_1 + 2
    torch_ = x * 2
    output = torch_ - 1
    return x, sum, output


def unpacked_and_looped(x):
    a, b = x.split(2)
    c = a + 1
    for i in range(3):
        c = c + i
    return c


def helper(t):
    out = t * 2
    tmp = out + 1
    return tmp


def names_from_inlined_frames(x):
    r = helper(x)
    out = helper(r)
    return out


def aliases_keep_the_first_name(x):
    v = x.view(-1)
    v2 = v
    w = v2 * 2
    return w, v2


def cell_of_the_frame(x):
    def g():
        return c + 1

    c = x * 2
    d = g()
    return d


def comprehension_variables(x):
    ys = [t * 2 for t in x.unbind(0)]
    s = ys[0]
    for t in ys[1:]:
        s = s + t
    return s


def inside_no_grad(x):
    with torch.no_grad():
        y = x + 1
    z = y * 2
    return z


def in_place_result_stored(x):
    x = x.clone()
    y = x.add_(1)
    z = y * 2
    return z


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        h = self.lin(x)
        out = h.relu() + 1
        return out


def locals_named_like_what_graph_code_uses(x):
    torch_ = x + 1
    getattr = torch_ * 2
    len = getattr.sum(0)
    output = len + torch.ones(3)
    return output


CASES = [locals_named_like_what_graph_code_uses, stored_twice, locals_named_like_builtins, unpacked_and_looped, names_from_inlined_frames,
         aliases_keep_the_first_name, cell_of_the_frame, comprehension_variables, inside_no_grad,
         in_place_result_stored, Model()]


def call_names(compile_fn, fn, args):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append([(n.op, n.name) for n in gm.graph.nodes if n.op != "placeholder"])
        return gm

    compiled = compile_fn(fn, backend)
    outs = [compiled(*args) for _ in range(2)]
    return graphs, outs


@pytest.mark.parametrize("fn", CASES, ids=lambda f: getattr(f, "__name__", type(f).__name__))
def test_node_names_are_torch_dynamos(fn):
    args = (torch.randn(4, 3),) if fn is not locals_named_like_builtins else (torch.randn(4, 3), torch.randn(4, 3))
    expected = fn(*args)
    cdynamo.reset()
    got, outs = call_names(lambda f, b: cdynamo.compile(f, backend=b), fn, args)
    torch._dynamo.reset()
    reference, _ = call_names(lambda f, b: torch.compile(f, backend=b), fn, args)
    torch._dynamo.reset()
    assert len(got) == 1, got  # compiled once; the second call was a hit
    assert got == reference
    for out in outs:
        torch.testing.assert_close(out, expected)


def test_names_never_shadow_what_the_graph_code_uses():
    # Locals named after builtins, torch itself and the output node: each such name gets a
    # suffix, and the generated forward still runs.
    fn = locals_named_like_what_graph_code_uses
    cdynamo.reset()
    gms = []

    def backend(gm, example_inputs):
        gms.append(gm)
        return gm

    cf = cdynamo.compile(fn, backend=backend)
    x = torch.randn(2, 3)
    for _ in range(2):
        torch.testing.assert_close(cf(x), fn(x))
    assert len(gms) == 1
    names = {n.name: n.op for n in gms[0].graph.nodes}
    assert names.get("output_1") == "output" and names.get("output") == "call_function", names
    assert {"getattr", "len", "torch"}.isdisjoint(names), names
    torch.testing.assert_close(gms[0](x)[0], fn(x))
