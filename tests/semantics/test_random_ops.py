"""Random ops in a compiled function: every draw happens in eager's order, from the same
generator state, whether the draws share one graph or sit on both sides of a graph break.

check() seeds the generator before building each call's arguments, so eager, the first
compiled call and the cache hit all enter the function with the same generator state; a
draw dropped, repeated, moved across another draw or across a break changes the values.
The shapes are the ones a mixture-of-experts training step has: in-place noise on a tensor
made in the function, routing through nonzero (a graph break), dropout per routed expert.
"""
import pytest
import torch
from torch import nn

from .harness import Cases, check

case = Cases()


class Router(nn.Module):
    """Jitter noise drawn in place into a tensor created in the function, then routing."""

    def __init__(self, experts=3, dim=4, jitter=0.5):
        super().__init__()
        self.classifier = nn.Linear(dim, experts)
        self.jitter = jitter

    def forward(self, h):
        if self.training and self.jitter > 0:
            h = h * torch.empty_like(h).uniform_(1.0 - self.jitter, 1.0 + self.jitter)
        logits = self.classifier(h)
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]), logits


class Experts(nn.Module):
    """Each routed expert runs dropout on its tokens; which experts run depends on the data."""

    def __init__(self, experts=3, dim=4):
        super().__init__()
        self.router = Router(experts, dim)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(dim, dim), nn.Dropout(0.5)) for _ in range(experts))

    def forward(self, h):
        mask, logits = self.router(h)
        out = torch.zeros_like(h)
        hit = torch.greater(mask.sum(0), 0).nonzero()  # data-dependent size: a graph break
        for e in hit:
            rows = torch.where(mask[:, e[0]])[0]
            out.index_add_(0, rows, self.experts[int(e[0])](h[rows]))
        return out + torch.nn.functional.dropout(out, 0.25), logits


def _experts():
    torch.manual_seed(3)
    return Experts().train()


@case(lambda: (Router().train(), torch.randn(5, 4)))
def jitter_in_place_on_a_new_tensor(m, x):
    return m(x)


@case(lambda: (torch.randn(3, 4),))
def several_in_place_draws_in_one_graph(x):
    a = torch.empty_like(x).uniform_(-1, 1)
    b = torch.empty_like(x).normal_()
    c = torch.empty_like(x).bernoulli_(0.5)
    return x * a + b - c, torch.rand(2)


@case(lambda: (torch.randn(3, 4),), expect_graphs=2)
def draws_on_both_sides_of_a_break(x):
    a = torch.nn.functional.dropout(x, 0.5) + torch.rand(4)
    torch._dynamo.graph_break()
    b = torch.empty_like(x).uniform_() * torch.rand(4)
    return a, b, torch.randn(2)


@case(lambda: (torch.randn(3, 4),), expect_graphs=2)
def draw_only_after_the_break(x):
    y = x.sin()
    torch._dynamo.graph_break()
    return y + torch.rand_like(x)


@case(lambda: (torch.randn(3, 4),), expect_graphs=4)
def random_draw_decides_a_branch(x):
    # LayerDrop: the draw's value picks whether a layer runs, so the branch reads a tensor
    # made by a random op in the graph before the break; it must be drawn once. One graph
    # per branch plus the return (torch._dynamo makes none: it runs the frame eagerly).
    for scale in (2.0, 3.0, 4.0):
        if torch.rand([]) < 0.5:
            continue
        x = x * scale
    return x, torch.rand(2)


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_random_ops(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


def test_routed_experts_train_step():
    # The seeded routing sends tokens to two experts: one graph up to nonzero, then pieces
    # between the data-dependent reads of each iteration (torch.where, int() of the expert
    # index) holding that expert's dropout, and the final dropout. torch._dynamo makes 1
    # graph: after the break inside the loop it runs the rest of the frame eagerly.
    def step(m, x):
        return m(x)

    check(step, lambda: (_experts(), torch.randn(6, 4)), expect_graphs=6)

