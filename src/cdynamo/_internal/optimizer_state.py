"""An optimizer's state made for real while its first step is traced (see
createOptimizerStateForReal in csrc/trace/protocol/calls.cpp)."""
import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily


def create_missing_state(init_group, optimizer, nlists):
    """Runs ``init_group`` (a torch.optim optimizer's own _init_group) for every param group,
    with fresh lists for the ``nlists`` it fills, when some parameter with a gradient has no
    state yet; True when that made state (SGD's makes none: its step stores the momentum
    buffers). Out of the trace's fake mode: the state is real tensors."""
    state = optimizer.state
    if not any(p.grad is not None and p not in state for g in optimizer.param_groups for p in g["params"]):
        return False
    before = [(k, len(v)) for k, v in state.items()]
    with unset_fake_temporarily():
        for group in optimizer.param_groups:
            init_group(optimizer, group, *[[] for _ in range(nlists)])
    after = [(k, len(v)) for k, v in state.items()]
    return len(before) != len(after) or any(a[0] is not b[0] or a[1] != b[1] for a, b in zip(before, after))
