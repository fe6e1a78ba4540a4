"""A plain torch.compile program (no cdynamo in it): a graph break, a recompile, and a
frame that runs natively. Run it with `python -m cdynamo run examples/torch_compile_program.py`
to see what cdynamo did with it (add --report capture.html for the line-by-line report)."""
import sys

import torch


def scale(x, k):
    y = x * k
    torch._dynamo.graph_break()  # a graph break: the rest goes on in a resume function
    return y.relu() + 1


def checked(x):
    if x.shape[0] > 4:
        raise ValueError("too long")  # an exception leaving the frame: it runs natively
    return x.cos()


def main():
    f = torch.compile(scale, backend="eager")
    for n in (3, 3, 5):  # shape 5: a recompile
        out = f(torch.ones(n), 2)
        assert torch.equal(out, scale(torch.ones(n), 2))
    g = torch.compile(checked, backend="eager")
    try:
        g(torch.ones(6))
    except ValueError as e:
        print("raised as in eager:", e)
    print("ok:", out.tolist())
    return 0


if __name__ == "__main__":
    sys.exit(main())
