"""Strings: f-strings, %-formatting and .format on constants, str methods, strings as keys."""
import pytest
import torch

from .harness import Cases, check, tensors, with_args

case = Cases()
T4 = tensors((4,))

PREFIX = "layer"


@case(T4)
def fstring_of_ints(x):
    name = f"layer_{2}_{'a'}"
    return x * len(name), name


@case(with_args(3))
def fstring_of_arg(x, i):
    key = f"{PREFIX}.{i}.weight"
    return x + i, key


@case(T4)
def fstring_format_spec(x):
    s = f"{3.14159:.2f}|{7:03d}|{'ab':>4}"
    return x * len(s), s


@case(T4)
def fstring_of_shape(x):
    s = f"shape={tuple(x.shape)}"
    return x + 1, s


@case(T4)
def fstring_repr_conversion(x):
    s = f"{'q'!r}"
    return x * len(s), s


@case(T4)
def percent_formatting(x):
    s = "%s-%d-%.1f" % ("a", 5, 2.25)
    return x * len(s), s


@case(T4)
def str_format_method(x):
    s = "{}:{name}".format(1, name="n")
    t = "{0}{0}{1}".format("a", "b")
    return x + len(s) + len(t), s, t


@case(T4)
def str_concat_and_repeat(x):
    s = "ab" + "cd"
    s = s * 2
    s += "!"
    return x * len(s), s


@case(T4)
def str_methods_case(x):
    s = "Hello World"
    return x * len(s.lower()), s.upper(), s.lower(), s.title(), s.swapcase()


@case(T4)
def str_split_join(x):
    parts = "a.b.c".split(".")
    joined = "-".join(parts)
    return x * len(parts), parts, joined


@case(T4)
def str_startswith_endswith(x):
    name = "encoder.layer.weight"
    if name.startswith("encoder") and name.endswith(("weight", "bias")):
        return x * 2
    return x


@case(T4)
def str_strip_replace(x):
    s = "  pad me  ".strip().replace("me", "you")
    return x + len(s), s, "xxhixx".lstrip("x"), "xxhixx".rstrip("x")


@case(T4)
def str_find_index_count(x):
    s = "banana"
    return x * s.find("n") + s.index("a") + s.count("a") + s.rfind("a")


@case(T4)
def str_membership(x):
    if "ell" in "hello" and "z" not in "hello":
        return x + 1
    return x


@case(T4)
def str_indexing_slicing(x):
    s = "abcdef"
    return x * len(s[1:4]), s[0], s[-1], s[::2], s[::-1]


@case(T4)
def str_comparisons(x):
    if "abc" < "abd" and "b" > "a" and "x" == "x":
        return x + 1
    return x


@case(T4)
def str_predicates(x):
    if "123".isdigit() and "abc".isalpha() and " ".isspace() and "Ab".istitle() is False:
        return x * 3
    return x * 3 if "a1".isalnum() else x


@case(T4)
def str_partition_rsplit(x):
    head, sep, tail = "k=v=w".partition("=")
    r = "a.b.c".rsplit(".", 1)
    return x + len(tail), head, sep, tail, r


@case(T4)
def str_as_dict_key(x):
    d = {"scale": 2.0, "shift": 1.0}
    key = "sc" + "ale"
    return x * d[key] + d["shift"]


@case(with_args("mean"))
def str_arg_selects_reduction(x, reduction):
    if reduction == "mean":
        return x.mean()
    elif reduction == "sum":
        return x.sum()
    return x


@case(with_args("relu"))
def str_arg_getattr_torch(x, name):
    return getattr(torch, name)(x)


@case(T4)
def str_zfill_center_ljust(x):
    return x + 1, "7".zfill(3), "a".center(5, "*"), "b".ljust(3, "-")


@case(T4)
def str_encode_len(x):
    return x * len("é".encode("utf-8"))


@case(T4)
def str_of_dtype(x):
    s = str(x.dtype)
    return x + 1, s


@case(T4)
def str_building_in_loop(x):
    s = ""
    for i in range(3):
        s += str(i)
        x = x + i
    return x, s


@case(T4)
def str_join_generator(x):
    s = ",".join(str(i) for i in range(3))
    return x * len(s), s


@case(T4)
def str_splitlines_and_ord(x):
    lines = "a\nbb\nccc".splitlines()
    return x * len(lines[-1]), lines


@case(T4)
def repr_of_constants(x):
    return x + 1, repr(1.5), repr("s"), repr([1, "a"])


@case(lambda: ("a_b_c",), expect_graphs=0)
def no_tensor_string_processing(s):
    parts = s.split("_")
    return "-".join(p.upper() for p in parts), len(parts)


@case(lambda: ("x", 3), expect_graphs=0)
def no_tensor_fstring(name, n):
    return f"{name}{n}", "%s=%d" % (name, n)


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_strings(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)
