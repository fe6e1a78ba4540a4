"""Python versions of C functions of the standard library, traced in their place.

When the traced program calls one of the callables in ``POLYFILLS`` (``itertools.chain``,
``functools.reduce``, ...), the tracer inlines the Python function given here instead: the
C function cannot be traced, its Python equivalent can, and gives the same items in the same
order, calling the program's functions the same number of times. A polyfill that is a
generator gives an iterator of the type of the original (itertools.chain, ...): the tracer
gives its result that type.

The iterators that may never end (count, repeat, cycle) are classes here, not generators:
the tracer runs a generator to its end, but steps an iterator object one item at a time
(its ``__next__`` inlined), so ``zip(range(3), count())`` takes three items and stops. The
traced program sees the original's type; an instance that outlives the trace (returned,
stored) is rebuilt as a real iterator of that type in the same state by the class's
``rebuild`` (a staticmethod taking the instance).
"""
import functools
import itertools
import operator

import torch


def chain(*iterables):
    for it in iterables:
        yield from it


def chain_from_iterable(iterables):
    for it in iterables:
        yield from it


def islice(iterable, *args):
    s = slice(*args)
    start = 0 if s.start is None else s.start
    stop = s.stop
    step = 1 if s.step is None else s.step
    if start < 0 or (stop is not None and stop < 0) or step <= 0:
        raise ValueError("Indices for islice() must be None or an integer: 0 <= x <= sys.maxsize.")
    it = iter(iterable)
    nexti = start
    i = 0
    while stop is None or i < stop:
        try:
            item = next(it)
        except StopIteration:
            return
        if i == nexti:
            yield item
            nexti += step
        i += 1


def compress(data, selectors):
    for d, s in zip(data, selectors):
        if s:
            yield d


def filterfalse(predicate, iterable):
    if predicate is None:
        for x in iterable:
            if not x:
                yield x
    else:
        for x in iterable:
            if not predicate(x):
                yield x


def takewhile(predicate, iterable):
    for x in iterable:
        if not predicate(x):
            return
        yield x


def dropwhile(predicate, iterable):
    it = iter(iterable)
    for x in it:
        if not predicate(x):
            yield x
            break
    for x in it:
        yield x


def starmap(function, iterable):
    for args in iterable:
        yield function(*args)


def accumulate(iterable, func=None, *, initial=None):
    it = iter(iterable)
    total = initial
    if initial is None:
        try:
            total = next(it)
        except StopIteration:
            return
    yield total
    for x in it:
        total = total + x if func is None else func(total, x)
        yield total


def pairwise(iterable):
    it = iter(iterable)
    try:
        a = next(it)
    except StopIteration:
        return
    for b in it:
        yield a, b
        a = b


def zip_longest(*iterables, fillvalue=None):
    iterators = [iter(it) for it in iterables]
    done = [False] * len(iterators)
    active = len(iterators)
    if not active:
        return
    while True:
        values = []
        for i in range(len(iterators)):
            if done[i]:
                values.append(fillvalue)
                continue
            try:
                values.append(next(iterators[i]))
            except StopIteration:
                done[i] = True
                active -= 1
                if not active:
                    return
                values.append(fillvalue)
        yield tuple(values)


def product(*iterables, repeat=1):
    pools = [tuple(pool) for pool in iterables] * repeat
    result = [[]]
    for pool in pools:
        result = [x + [y] for x in result for y in pool]
    for prod in result:
        yield tuple(prod)


def permutations(iterable, r=None):
    pool = tuple(iterable)
    n = len(pool)
    r = n if r is None else r
    if r > n:
        return
    indices = list(range(n))
    cycles = list(range(n, n - r, -1))
    yield tuple(pool[i] for i in indices[:r])
    while n:
        for i in reversed(range(r)):
            cycles[i] -= 1
            if cycles[i] == 0:
                indices[i:] = indices[i + 1:] + indices[i:i + 1]
                cycles[i] = n - i
            else:
                j = cycles[i]
                indices[i], indices[-j] = indices[-j], indices[i]
                yield tuple(pool[i] for i in indices[:r])
                break
        else:
            return


def combinations(iterable, r):
    pool = tuple(iterable)
    n = len(pool)
    if r > n:
        return
    indices = list(range(r))
    yield tuple(pool[i] for i in indices)
    while True:
        for i in reversed(range(r)):
            if indices[i] != i + n - r:
                break
        else:
            return
        indices[i] += 1
        for j in range(i + 1, r):
            indices[j] = indices[j - 1] + 1
        yield tuple(pool[i] for i in indices)


def methodcaller(name, /, *args, **kwargs):
    # operator.methodcaller: a callable calling obj.<name>(*args, **kwargs). The tracer
    # cannot make the C object from values it holds (tensors among the arguments), so the
    # object is this closure, as torch._dynamo models it; it calls the same method with
    # the same arguments, and raises methodcaller's TypeError for a name that is no str.
    if not isinstance(name, str):
        raise TypeError("method name must be a string")

    def caller(obj, /):
        return getattr(obj, name)(*args, **kwargs)

    return caller


def reduce(function, iterable, *initial):
    if len(initial) > 1:
        raise TypeError(f"reduce expected at most 3 arguments, got {2 + len(initial)}")
    it = iter(iterable)
    if initial:
        value = initial[0]
    else:
        try:
            value = next(it)
        except StopIteration:
            raise TypeError("reduce() of empty iterable with no initial value") from None
    for element in it:
        value = function(value, element)
    return value


class count:
    def __init__(self, start=0, step=1):
        self.next_value = start
        self.step = step

    def __iter__(self):
        return self

    def __next__(self):
        value = self.next_value
        self.next_value = value + self.step
        return value

    @staticmethod
    def rebuild(self):
        return itertools.count(self.next_value, self.step)


class repeat:
    def __init__(self, object, times=None):
        self.object = object
        self.times = None if times is None else max(times, 0)

    def __iter__(self):
        return self

    def __next__(self):
        if self.times is not None:
            if self.times <= 0:
                raise StopIteration
            self.times -= 1
        return self.object

    @staticmethod
    def rebuild(self):
        if self.times is None:
            return itertools.repeat(self.object)
        return itertools.repeat(self.object, self.times)


class cycle:
    def __init__(self, iterable):
        self.source = iter(iterable)
        self.saved = []
        self.index = 0
        self.exhausted = False

    def __iter__(self):
        return self

    def __next__(self):
        if not self.exhausted:
            try:
                item = next(self.source)
            except StopIteration:
                self.exhausted = True
            else:
                self.saved.append(item)
                return item
        if not self.saved:
            raise StopIteration
        item = self.saved[self.index]
        self.index = (self.index + 1) % len(self.saved)
        return item

    @staticmethod
    def rebuild(self):
        if self.exhausted:
            return itertools.cycle(self.saved[self.index:] + self.saved[:self.index])
        # What the source has left, then what was taken of it: a real cycle saves both in
        # that order, which is the order this one repeats them in.
        return itertools.cycle(itertools.chain(self.source, self.saved))


# ---- torch operators whose C binding reads a tensor argument as a Python number
#
# A 0-d tensor passed where the operator's schema takes a Scalar is read with .item() by
# the binding (a data-dependent read: no graph can hold it). Where another overload or a
# composition of operators takes the tensor itself and computes the same, these call it;
# every other call goes to the original (a call of the original from its own polyfill is
# the C function itself). As torch._dynamo does for the same operators.

def _same_dtype(scalar, tensors):
    return all(isinstance(t, torch.Tensor) and t.dtype == scalar.dtype and t.device == scalar.device
               for t in tensors)


def _foreach_lerp_(*args, **kwargs):
    if len(args) == 3 and not kwargs and isinstance(args[2], torch.Tensor) and args[2].dim() == 0 \
            and _same_dtype(args[2], args[0]):
        self, end, weight = args
        return torch._foreach_lerp_(self, end, [weight] * len(self))  # the List overload
    return torch._foreach_lerp_(*args, **kwargs)


def _foreach_lerp(*args, **kwargs):
    if len(args) == 3 and not kwargs and isinstance(args[2], torch.Tensor) and args[2].dim() == 0 \
            and _same_dtype(args[2], args[0]):
        self, end, weight = args
        return torch._foreach_lerp(self, end, [weight] * len(self))
    return torch._foreach_lerp(*args, **kwargs)


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


def _addcmul_(self, *args, **kwargs):
    # self + value * tensor1 * tensor2, in that order
    value = _tensor_value(kwargs)
    if len(args) == 2 and value is not None:
        return self.add_(value * args[0] * args[1])
    return self.addcmul_(*args, **kwargs)


def _addcmul(self, *args, **kwargs):
    value = _tensor_value(kwargs)
    if len(args) == 2 and value is not None:
        return self + value * args[0] * args[1]
    return self.addcmul(*args, **kwargs)


def _torch_addcmul(*args, **kwargs):
    value = _tensor_value(kwargs)
    if len(args) == 3 and value is not None:
        return args[0] + value * args[1] * args[2]
    return torch.addcmul(*args, **kwargs)


POLYFILLS = {
    itertools.chain: chain,
    itertools.chain.from_iterable: chain_from_iterable,
    itertools.islice: islice,
    itertools.compress: compress,
    itertools.filterfalse: filterfalse,
    itertools.takewhile: takewhile,
    itertools.dropwhile: dropwhile,
    itertools.starmap: starmap,
    itertools.accumulate: accumulate,
    itertools.pairwise: pairwise,
    itertools.zip_longest: zip_longest,
    itertools.product: product,
    itertools.permutations: permutations,
    itertools.combinations: combinations,
    functools.reduce: reduce,
    operator.methodcaller: methodcaller,
    itertools.count: count,
    itertools.repeat: repeat,
    itertools.cycle: cycle,
    torch._foreach_lerp_: _foreach_lerp_,
    torch._foreach_lerp: _foreach_lerp,
    torch._foreach_pow: _foreach_pow,
    torch.addcmul: _torch_addcmul,
    torch.Tensor.addcmul_: _addcmul_,
    torch.Tensor.addcmul: _addcmul,
}


# ---- torch's own C helpers that take the program's callables -------------------------------

def fx_map_aggregate(a, fn):
    # torch._C._fx_map_aggregate (torch.fx.node.map_aggregate): `fn` called on each leaf of
    # nested tuples, lists, dicts and slices, depth first in order; lists come back as
    # fx's immutable_list, dicts as immutable_dict, namedtuples as their own class.
    if isinstance(a, tuple):
        parts = [fx_map_aggregate(item, fn) for item in a]
        return type(a)(*parts) if hasattr(a, "_fields") else tuple(parts)
    if isinstance(a, list):
        return _fx_immutable.immutable_list([fx_map_aggregate(item, fn) for item in a])
    if isinstance(a, dict):
        return _fx_immutable.immutable_dict([(k, fx_map_aggregate(v, fn)) for k, v in a.items()])
    if isinstance(a, slice):
        return slice(fx_map_aggregate(a.start, fn), fx_map_aggregate(a.stop, fn), fx_map_aggregate(a.step, fn))
    return fn(a)


def fx_map_arg(a, fn):
    # torch._C._fx_map_arg (torch.fx.node.map_arg): the same walk, `fn` called on fx Nodes only.
    return fx_map_aggregate(a, lambda leaf: fn(leaf) if isinstance(leaf, _fx_node.Node) else leaf)


def _torch_polyfills():
    global _fx_immutable, _fx_node
    try:
        import torch._C
        import torch.fx.immutable_collections as _fx_immutable
        import torch.fx.node as _fx_node
    except ImportError:
        return {}
    return {torch._C._fx_map_aggregate: fx_map_aggregate, torch._C._fx_map_arg: fx_map_arg}


POLYFILLS.update(_torch_polyfills())
