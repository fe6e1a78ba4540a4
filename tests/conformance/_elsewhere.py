"""A second module for the conformance regressions: globals that its own functions change."""
hits = 0


def bump(x):
    global hits
    hits += 1
    return x * hits


def call(f, *args):
    return f(*args)
