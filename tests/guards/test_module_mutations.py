"""A compiled stack of modules whose state changes between calls: a parameter replaced, its
requires_grad flipped, its data given another shape or dtype, a hook added and removed, an
attribute set, the training flag flipped. Each change is compared with eager (outputs,
gradients) on the first call after it and on the next (a hit), and the graph count says that
what changed the computation compiled again while an unchanged stack still hits."""
import copy

import torch
from torch import nn

import cdynamo
from cdynamo.testing import CompileCounter


class Gate(nn.Module):
    """Scales by a plain attribute, and only while training."""

    def __init__(self):
        super().__init__()
        self.scale = 2.0

    def forward(self, x):
        return x * self.scale if self.training else x


def make_stack():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16), Gate(), nn.Linear(16, 16), nn.LayerNorm(16),
                         nn.Linear(16, 16))


def check_against_eager(compiled_stack, eager_stack, x):
    """Both calls of the compiled stack (a first call or a hit) against eager: output, and the
    gradients of every parameter and of x."""
    for _ in range(2):
        xc = x.detach().clone().requires_grad_(x.requires_grad)
        xe = x.detach().clone().requires_grad_(x.requires_grad)
        got, want = compiled_stack(xc), eager_stack(xe)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.requires_grad == want.requires_grad
        torch.testing.assert_close(got, want)
        if want.requires_grad:
            for m in (compiled_stack, eager_stack):
                m.zero_grad(set_to_none=True)
            got.sum().backward()
            want.sum().backward()
            for (name, pc), (_, pe) in zip(compiled_stack.named_parameters(), eager_stack.named_parameters()):
                assert (pc.grad is None) == (pe.grad is None), name
                if pe.grad is not None:
                    torch.testing.assert_close(pc.grad, pe.grad, msg=name)
            if x.requires_grad:
                torch.testing.assert_close(xc.grad, xe.grad)


def both(stack, eager, fn):
    """Applies the same change to the compiled stack's module and to its eager twin."""
    fn(stack)
    fn(eager)


def compiled_stack():
    """A stack, its eager twin, the compiled stack and its counter, after a first checked call."""
    stack = make_stack()
    eager = copy.deepcopy(stack)
    cnt = CompileCounter()
    cf = cdynamo.compile(stack, backend=cnt)
    x = torch.randn(4, 16)
    check_against_eager(cf, eager, x)
    return stack, eager, cnt, cf, x


def test_every_module_mutation_is_seen_by_the_guards(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "recompile_limit", 32)  # every state below gets its own entry
    stack, eager, cnt, cf, x = compiled_stack()
    assert cnt.frame_count == 1
    seen = cnt.frame_count

    def changed(fn, recompiles=True):
        nonlocal seen
        both(stack, eager, fn)
        check_against_eager(cf, eager, x)
        if recompiles:
            assert cnt.frame_count > seen, "a change the graph depends on must not hit the old entry"
        seen = cnt.frame_count

    # A parameter replaced by another of the same metadata: new values, same entry is fine,
    # but the result must use the new values.
    new_w = torch.randn(16, 16)
    changed(lambda m: setattr(m[0], "weight", nn.Parameter(new_w.clone())), recompiles=False)
    # requires_grad flipped on one parameter.
    changed(lambda m: m[3].weight.requires_grad_(False))
    changed(lambda m: m[3].weight.requires_grad_(True), recompiles=False)  # the first entry's state again
    # The data of a parameter given another shape in place (the last Linear now has 8 outputs).
    new_w8, new_b8 = torch.randn(8, 16), torch.randn(8)

    def shrink(m):
        m[5].weight.data = new_w8.clone()
        m[5].bias.data = new_b8.clone()

    changed(shrink)
    # A non-contiguous layout of the same shape.
    new_t = torch.randn(16, 16)

    def transposed(m):
        m[0].weight.data = new_t.clone().t()

    changed(transposed)
    # A forward hook added, then removed.
    handles = []
    both(stack, eager, lambda m: handles.append(m[1].register_forward_hook(lambda mod, i, o: o * 3)))
    check_against_eager(cf, eager, x)
    assert cnt.frame_count > seen
    seen = cnt.frame_count
    for h in handles:
        h.remove()
    check_against_eager(cf, eager, x)
    # An attribute the forward reads, set on the instance.
    changed(lambda m: setattr(m[2], "scale", 5.0))
    changed(lambda m: setattr(m[1], "eps", 0.5))
    # The training flag flipped (Gate is the identity in eval mode).
    changed(lambda m: m.eval())
    changed(lambda m: m.train(), recompiles=False)  # an entry for training mode with these values may exist
    # The whole stack in float64, with a float64 input.
    both(stack, eager, lambda m: m.double())
    check_against_eager(cf, eager, x.double())
    assert cnt.frame_count > seen
    # An input that needs its gradient.
    check_against_eager(cf, eager, x.double().requires_grad_())


def test_an_unchanged_stack_hits_after_its_state_comes_back():
    stack, eager, cnt, cf, x = compiled_stack()
    both(stack, eager, lambda m: m[3].weight.requires_grad_(False))
    check_against_eager(cf, eager, x)
    assert cnt.frame_count == 2
    both(stack, eager, lambda m: m[3].weight.requires_grad_(True))
    check_against_eager(cf, eager, x)  # the first entry again
    assert cnt.frame_count == 2
