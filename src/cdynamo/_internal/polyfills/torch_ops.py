"""torch operators whose C binding reads a tensor argument as a Python number.

A 0-d tensor passed where the operator's schema takes a Scalar is read with .item() by the
binding (a data-dependent read: no graph can hold it). Where another overload or a
composition of operators takes the tensor itself and computes the same, these call it;
every other call goes to the original (a call of the original from its own polyfill is the
C function itself). As torch._dynamo does for the same operators.
"""
import torch

from .registry import polyfill


def _same_dtype(scalar, tensors):
    return all(isinstance(t, torch.Tensor) and t.dtype == scalar.dtype and t.device == scalar.device
               for t in tensors)


@polyfill(torch._foreach_lerp_)
def _foreach_lerp_(*args, **kwargs):
    if len(args) == 3 and not kwargs and isinstance(args[2], torch.Tensor) and args[2].dim() == 0 \
            and _same_dtype(args[2], args[0]):
        self, end, weight = args
        return torch._foreach_lerp_(self, end, [weight] * len(self))  # the List overload
    return torch._foreach_lerp_(*args, **kwargs)


@polyfill(torch._foreach_lerp)
def _foreach_lerp(*args, **kwargs):
    if len(args) == 3 and not kwargs and isinstance(args[2], torch.Tensor) and args[2].dim() == 0 \
            and _same_dtype(args[2], args[0]):
        self, end, weight = args
        return torch._foreach_lerp(self, end, [weight] * len(self))
    return torch._foreach_lerp(*args, **kwargs)


@polyfill(torch._foreach_pow)
def _foreach_pow(*args, **kwargs):
    if len(args) == 2 and not kwargs and isinstance(args[0], torch.Tensor) and args[0].dim() == 0 \
            and isinstance(args[1], (list, tuple)) and _same_dtype(args[0], args[1]):
        base, exponents = args
        return torch._foreach_pow([base] * len(exponents), exponents)  # the List overload
    return torch._foreach_pow(*args, **kwargs)


def _tensor_value(kwargs):
    value = kwargs.get("value")
    # a 0-d tensor only: the binding refuses others (TypeError), and so does the original here
    return value if len(kwargs) == 1 and isinstance(value, torch.Tensor) and value.dim() == 0 else None


@polyfill(torch.Tensor.addcmul_)
def _addcmul_(self, *args, **kwargs):
    # self + value * tensor1 * tensor2, in that order
    value = _tensor_value(kwargs)
    if len(args) == 2 and value is not None:
        return self.add_(value * args[0] * args[1])
    return self.addcmul_(*args, **kwargs)


@polyfill(torch.Tensor.addcmul)
def _addcmul(self, *args, **kwargs):
    value = _tensor_value(kwargs)
    if len(args) == 2 and value is not None:
        return self + value * args[0] * args[1]
    return self.addcmul(*args, **kwargs)


@polyfill(torch.addcmul)
def _torch_addcmul(*args, **kwargs):
    value = _tensor_value(kwargs)
    if len(args) == 3 and value is not None:
        return args[0] + value * args[1] * args[2]
    return torch.addcmul(*args, **kwargs)


# addcdiv: self + value * tensor1 / tensor2 (the kernel's order: value times tensor1, then the
# division). An optimizer whose step count is a tensor while compiling (Adam's bias
# corrections: torch.optim reads the step with .item() only eagerly) passes its step size so.
@polyfill(torch.Tensor.addcdiv_)
def _addcdiv_(self, *args, **kwargs):
    value = _tensor_value(kwargs)
    if len(args) == 2 and value is not None:
        return self.add_(value * args[0] / args[1])
    return self.addcdiv_(*args, **kwargs)


@polyfill(torch.Tensor.addcdiv)
def _addcdiv(self, *args, **kwargs):
    value = _tensor_value(kwargs)
    if len(args) == 2 and value is not None:
        return self + value * args[0] / args[1]
    return self.addcdiv(*args, **kwargs)


@polyfill(torch.addcdiv)
def _torch_addcdiv(*args, **kwargs):
    value = _tensor_value(kwargs)
    if len(args) == 3 and value is not None:
        return args[0] + value * args[1] / args[2]
    return torch.addcdiv(*args, **kwargs)


@polyfill(torch._C._group_tensors_by_device_and_dtype)
def _group_tensors_by_device_and_dtype(tensorlistlist, with_indices=False):
    # The foreach helpers' grouping (clip_grad_norm_, the foreach optimizers eagerly): the
    # tensors of every list at the positions where the first list's tensor has one device and
    # dtype, per (device, dtype), with those positions when asked. Groups in the order their
    # first tensor comes (the C version's order is its hash map's; each group is independent).
    groups = {}
    for i, t in enumerate(tensorlistlist[0]):
        key = (t.device, t.dtype)
        if key not in groups:
            groups[key] = ([[] for _ in tensorlistlist], [])
        lists, indices = groups[key]
        for lst, src in zip(lists, tensorlistlist):
            lst.append(src[i] if src else None)
        if with_indices:
            indices.append(i)
    return groups


def _scalars_tensor(args, kwargs, at):
    # the scalars of a foreach addcdiv/addcmul given as one 1-d tensor (torch.optim stacks its
    # per-tensor step sizes so while compiling): the binding reads it on the host, which a
    # fake tensor cannot give
    scalars = args[at] if len(args) > at else kwargs.get("scalars")
    if len(args) + len(kwargs) != at + 1 or not isinstance(scalars, torch.Tensor) or scalars.dim() != 1:
        return None
    return list(scalars.unbind(0))


@polyfill(torch._foreach_addcdiv_)
def _foreach_addcdiv_(*args, **kwargs):
    scalars = _scalars_tensor(args, kwargs, 3)
    if scalars is not None:
        self, tensor1, tensor2 = args[:3]
        torch._foreach_add_(self, torch._foreach_mul(torch._foreach_div(tensor1, tensor2), scalars))
        return None
    return torch._foreach_addcdiv_(*args, **kwargs)


@polyfill(torch._foreach_addcmul_)
def _foreach_addcmul_(*args, **kwargs):
    scalars = _scalars_tensor(args, kwargs, 3)
    if scalars is not None:
        self, tensor1, tensor2 = args[:3]
        torch._foreach_add_(self, torch._foreach_mul(torch._foreach_mul(tensor1, tensor2), scalars))
        return None
    return torch._foreach_addcmul_(*args, **kwargs)
