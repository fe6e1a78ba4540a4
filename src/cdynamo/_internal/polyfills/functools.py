"""functools' C functions, in Python, and the guard of an lru_cache hit."""
import functools

from .registry import polyfill


@polyfill(functools.reduce)
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


def lru_cache_holds(wrapper):
    # Whether a functools.lru_cache wrapper of a function without parameters has cached its
    # result: the guard of a call traced as a cache hit (the tracer's lru_cache call rule).
    return wrapper.cache_info().currsize > 0
