"""itertools' C iterators, in Python: each polyfill is registered for the original it stands for.

The iterators are classes, not generators, where the original may never end (count, repeat,
cycle) or takes its items from another iterator (chain, islice, ...): the tracer runs a
generator to its end, but steps an iterator object one item at a time (its ``__next__``
inlined), so ``zip(range(3), count())`` takes three items and stops, and each item is taken
from the source only when the program takes it, as the C iterators do, so a source the
program also uses directly (``s = islice(it, 3); next(s); list(it)``) gives the program's
items in the program's order. The traced program sees the original's type; an instance that
outlives the trace (returned, stored) is rebuilt as a real iterator of that type in the same
state by the class's ``rebuild`` (a staticmethod taking the instance; through the C type's own
``__setstate__`` where it has one). The others (product, permutations, combinations,
chain.from_iterable) are generators: they end, and take all their input first.
"""
import itertools
import operator

from .registry import polyfill


@polyfill(itertools.chain.from_iterable)
def chain_from_iterable(iterables):
    for it in iterables:
        yield from it


@polyfill(itertools.chain)
class chain:
    def __init__(self, *iterables):
        self.source = iter(iterables)
        self.active = None

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self.active is None:
                self.active = iter(next(self.source))  # StopIteration: the end
            try:
                return next(self.active)
            except StopIteration:
                self.active = None

    @staticmethod
    def rebuild(self):
        real = itertools.chain()
        real.__setstate__((self.source,) if self.active is None else (self.source, self.active))
        return real


_ISLICE_STOP = "Stop argument for islice() must be None or an integer: 0 <= x <= sys.maxsize."
_ISLICE_INDEX = "Indices for islice() must be None or an integer: 0 <= x <= sys.maxsize."


def _islice_index(value, message):
    if value is None:
        return None
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(message) from None


@polyfill(itertools.islice)
class islice:
    # CPython's islice: `next` is the index of the next item to give, `count` how many the
    # source gave; items before `next` are skipped when the next one is asked for (even
    # past `stop`: islice(it, 3, 3) takes three), and nothing is taken once it has ended.
    def __init__(self, iterable, *args):
        if not args:
            raise TypeError("islice expected at least 2 arguments, got 1")
        if len(args) > 3:
            raise TypeError(f"islice expected at most 4 arguments, got {len(args) + 1}")
        start, step = 0, 1
        if len(args) == 1:
            stop = _islice_index(args[0], _ISLICE_STOP)
        else:
            start = _islice_index(args[0], _ISLICE_INDEX)
            start = 0 if start is None else start
            stop = _islice_index(args[1], _ISLICE_STOP)
            if len(args) == 3:
                step = _islice_index(args[2], _ISLICE_INDEX)
                step = 1 if step is None else step
        if stop is not None and stop < 0:
            raise ValueError(_ISLICE_STOP)
        if start < 0:
            raise ValueError(_ISLICE_INDEX)
        if step < 1:
            raise ValueError("Step for islice() must be a positive integer or None.")
        self.source = iter(iterable)
        self.next = start
        self.stop = stop
        self.step = step
        self.count = 0
        self.ended = False

    def __iter__(self):
        return self

    def __next__(self):
        if self.ended:
            raise StopIteration
        try:
            while self.count < self.next:
                next(self.source)
                self.count += 1
            if self.stop is not None and self.count >= self.stop:
                raise StopIteration
            item = next(self.source)
        except StopIteration:
            self.ended = True
            raise
        self.count += 1
        self.next += self.step
        if self.stop is not None and self.next > self.stop:
            self.next = self.stop
        return item

    @staticmethod
    def rebuild(self):
        if self.ended:
            return itertools.islice((), 0)
        stop = None if self.stop is None else self.stop - self.count
        return itertools.islice(self.source, self.next - self.count, stop, self.step)


@polyfill(itertools.compress)
class compress:
    def __init__(self, data, selectors):
        self.data = iter(data)
        self.selectors = iter(selectors)

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            d = next(self.data)
            if next(self.selectors):
                return d

    @staticmethod
    def rebuild(self):
        return itertools.compress(self.data, self.selectors)


@polyfill(itertools.filterfalse)
class filterfalse:
    def __init__(self, predicate, iterable):
        self.predicate = predicate
        self.source = iter(iterable)

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            x = next(self.source)
            if not (x if self.predicate is None else self.predicate(x)):
                return x

    @staticmethod
    def rebuild(self):
        return itertools.filterfalse(self.predicate, self.source)


@polyfill(itertools.takewhile)
class takewhile:
    def __init__(self, predicate, iterable):
        self.predicate = predicate
        self.source = iter(iterable)
        self.stopped = False

    def __iter__(self):
        return self

    def __next__(self):
        if self.stopped:
            raise StopIteration
        x = next(self.source)
        if not self.predicate(x):
            self.stopped = True
            raise StopIteration
        return x

    @staticmethod
    def rebuild(self):
        real = itertools.takewhile(self.predicate, self.source)
        real.__setstate__(self.stopped)
        return real


@polyfill(itertools.dropwhile)
class dropwhile:
    def __init__(self, predicate, iterable):
        self.predicate = predicate
        self.source = iter(iterable)
        self.started = False

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            x = next(self.source)
            if self.started or not self.predicate(x):
                self.started = True
                return x

    @staticmethod
    def rebuild(self):
        real = itertools.dropwhile(self.predicate, self.source)
        real.__setstate__(self.started)
        return real


@polyfill(itertools.starmap)
class starmap:
    def __init__(self, function, iterable):
        self.function = function
        self.source = iter(iterable)

    def __iter__(self):
        return self

    def __next__(self):
        return self.function(*next(self.source))

    @staticmethod
    def rebuild(self):
        return itertools.starmap(self.function, self.source)


@polyfill(itertools.accumulate)
class accumulate:
    def __init__(self, iterable, func=None, *, initial=None):
        self.source = iter(iterable)
        self.func = func
        self.initial = initial
        self.total = None
        self.started = False

    def __iter__(self):
        return self

    def __next__(self):
        if self.initial is not None:
            self.total, self.initial, self.started = self.initial, None, True
            return self.total
        x = next(self.source)
        if not self.started:
            self.total, self.started = x, True
        else:
            self.total = self.total + x if self.func is None else self.func(self.total, x)
        return self.total

    @staticmethod
    def rebuild(self):
        real = itertools.accumulate(self.source, self.func, initial=self.initial)
        if self.started:
            real.__setstate__(self.total)
        return real


@polyfill(itertools.pairwise)
class pairwise:
    def __init__(self, iterable):
        self.source = iter(iterable)
        self.started = False
        self.ended = False
        self.previous = None

    def __iter__(self):
        return self

    def __next__(self):
        if self.ended:
            raise StopIteration
        try:
            if not self.started:
                self.previous = next(self.source)
                self.started = True
            b = next(self.source)
        except StopIteration:
            self.ended = True
            raise
        a, self.previous = self.previous, b
        return a, b

    @staticmethod
    def rebuild(self):
        if self.ended:
            return itertools.pairwise(())
        if not self.started:
            return itertools.pairwise(self.source)
        return itertools.pairwise(itertools.chain((self.previous,), self.source))


@polyfill(itertools.zip_longest)
class zip_longest:
    def __init__(self, *iterables, fillvalue=None):
        self.sources = [iter(it) for it in iterables]
        self.alive = [True] * len(self.sources)
        self.active = len(self.sources)
        self.fillvalue = fillvalue

    def __iter__(self):
        return self

    def __next__(self):
        if not self.active:
            raise StopIteration
        values = []
        for i in range(len(self.sources)):
            if not self.alive[i]:
                values.append(self.fillvalue)
                continue
            try:
                values.append(next(self.sources[i]))
            except StopIteration:
                self.alive[i] = False
                self.active -= 1
                if not self.active:
                    raise
                values.append(self.fillvalue)
        return tuple(values)

    @staticmethod
    def rebuild(self):
        if not self.active:
            return itertools.zip_longest()
        return itertools.zip_longest(*[s if alive else iter(()) for s, alive in zip(self.sources, self.alive)],
                                     fillvalue=self.fillvalue)


@polyfill(itertools.product)
def product(*iterables, repeat=1):
    pools = [tuple(pool) for pool in iterables] * repeat
    result = [[]]
    for pool in pools:
        result = [x + [y] for x in result for y in pool]
    for prod in result:
        yield tuple(prod)


@polyfill(itertools.permutations)
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


@polyfill(itertools.combinations)
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



@polyfill(itertools.count)
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


@polyfill(itertools.repeat)
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


@polyfill(itertools.cycle)
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


class _TeeBuffer:
    """What the copies of one tee() share: their source and every item taken from it."""

    def __init__(self, iterable):
        self.source = iter(iterable)
        self.items = []
        self.real = None  # the real tee the copies are rebuilt from, once one is


@polyfill(itertools._tee)
class tee_iterator:
    def __init__(self, iterable):
        self.buffer = iterable if isinstance(iterable, _TeeBuffer) else _TeeBuffer(iterable)
        self.index = 0

    def __iter__(self):
        return self

    def __next__(self):
        buffer = self.buffer
        if self.index < len(buffer.items):
            item = buffer.items[self.index]
        else:
            item = next(buffer.source)  # StopIteration: the end
            buffer.items.append(item)
        self.index += 1
        return item

    @staticmethod
    def rebuild(self):
        # One real tee over the buffered items and the rest of the source, made once for all
        # the copies (they share the source as the originals do); each copy is a copy of it
        # moved to its own position (those items are buffered, the source is not touched).
        buffer = self.buffer
        if buffer.real is None:
            buffer.real = itertools.tee(itertools.chain(tuple(buffer.items), buffer.source), 1)[0]
        real = buffer.real.__copy__()
        for _ in range(self.index):
            next(real)
        return real


@polyfill(itertools.tee)
def tee(iterable, n=2):
    if n < 0:
        raise ValueError("n must be >= 0")
    # Through itertools._tee (this module's tee_iterator, traced): the program sees that type.
    buffer = _TeeBuffer(iterable)
    return tuple(itertools._tee(buffer) for _ in range(n))
