"""The fuzzer's program grammar: hypothesis strategies that build the source of one module.

A program is a module with a small class ``K`` (method ``m``, property ``p``, a method that
stores an attribute) and a function ``f(x, y, n, lst, dct, obj)`` whose body is drawn from the
productions below. Every local has one type for the whole body (all are assigned in a fixed
prologue), so any statement can use any variable and the program always compiles; what it
does at run time (raise, break the graph, mutate its arguments) is left to the draw.

Beyond the typed expressions and statements: stateful families (an object whose state a
later statement reads, see ``stateful``) and everyday idioms (calls against defaults and
variadics, sort keys, string formatting, a user context manager, super(), see ``idiom``),
with the module-level helpers ``helper``, ``helper_int``, ``kwh``, ``K2`` and ``Ctx``.

Types: T tensor (1-d, the length of the inputs, or 0-d), I int, F float, B bool, L list of
ints, D dict str -> int, S set of ints, P tuple of ints, plus the K instance ``k0``, the
input ``obj`` (a Box with ``.t``, ``.a``) and the globals ``G0`` (int) and ``GL`` (list).

Every production a draw takes is recorded by name in ``Program.tags`` (coverage, and the
signature of a minimal failing program). Choices are drawn with ``st.integers`` whose 0 is
the simplest option, and blocks with ``st.lists``, so hypothesis shrinks a failure towards
a short program made of leaves.
"""
import dataclasses

from hypothesis import strategies as st

TENSORS = ["x", "y", "t0", "t1"]
INTS = ["n", "i0", "i1"]
LISTS = ["l0", "lst"]
DICTS = ["d0", "dct"]
ASSIGNABLE = {"T": ["t0", "t1", "x", "y"], "I": ["i0", "i1", "n"], "F": ["f0"], "L": ["l0", "lst"],
              "D": ["d0", "dct"], "S": ["s0"], "P": ["tp"]}
RETURNABLE = ["t0", "t1", "x", "y", "i0", "i1", "f0", "l0", "lst", "d0", "dct", "s0", "tp", "k0", "obj", "n"]
EXCS = ["ValueError", "KeyError", "IndexError", "ZeroDivisionError", "RuntimeError", "TypeError"]


@dataclasses.dataclass
class Program:
    source: str
    tags: frozenset
    fn_name: str = "f"

    def __repr__(self):  # hypothesis prints the falsifying example with repr
        return "Program(tags=%s)\n%s" % (sorted(self.tags), self.source)


class Gen:
    """One draw of a program. `draw` is hypothesis's; `tags` collects production names."""

    def __init__(self, draw):
        self.draw = draw
        self.tags = set()
        self.loop_var = 0
        self.closures = False  # g() and bump() are defined in this program
        self.extra = {}        # type -> extra leaves (a closure's parameter)
        self.restricted = False  # generating K's methods (see RESTRICTED)
        self.in_g = False        # generating the body of the closure g

    # Inside K's methods only the method's own names exist (self.t, self.k, a): these are
    # the productions that use nothing else.
    RESTRICTED = {"T": {0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 13, 15}, "I": {0, 1, 2, 5, 12}, "I0": {0, 1},
                  "F": {1}, "F0": {1}, "B": {0, 3}}

    def pick(self, name, n):
        """Which of `n` productions of `name` (0 is the simplest)."""
        i = self.draw(st.integers(0, n - 1))
        if self.restricted and i not in self.RESTRICTED.get(name, {0}):
            return 0 if name != "F" else 1
        return i

    def tag(self, t):
        self.tags.add(t)

    def choice(self, options):
        return options[self.draw(st.integers(0, len(options) - 1))]

    def small(self, lo=-2, hi=4):
        return self.draw(st.integers(lo, hi))

    # ------------------------------------------------------------------ expressions
    def expr(self, ty, depth):
        return getattr(self, "e_" + ty)(depth)

    def e_T(self, d):
        leaves = self.extra["T"] if self.restricted else TENSORS + ["obj.t", "k0.t"] + self.extra.get("T", [])
        k = self.pick("T", 16) if d > 0 else 0
        if k == 0:
            self.tag("T.leaf")
            return self.choice(leaves)
        self.tag("T.%d" % k)
        a = lambda: self.e_T(d - 1)  # noqa: E731
        if k == 1:
            return "(%s %s %s)" % (a(), self.choice(["+", "-", "*"]), a())
        if k == 2:
            return "(%s %s %s)" % (a(), self.choice(["*", "+", "-", "/"]), self.choice([self.e_I(d - 1), self.e_F(d - 1)]))
        if k == 3:
            return "%s.%s()" % (a(), self.choice(["relu", "sin", "abs", "neg", "sigmoid", "tanh", "clone", "detach",
                                                  "cos", "exp", "float", "square"]))
        if k == 4:
            return self.choice(["torch.relu(%s)" % a(), "torch.maximum(%s, %s)" % (a(), a()),
                                "torch.where(%s > %s, %s, %s)" % (a(), a(), a(), a()),
                                "torch.clamp(%s, min=-1.0, max=1.0)" % a(), "torch.softmax(%s, 0)" % a()])
        if k == 5:
            self.tag("T.reduce")
            return "%s.%s()" % (a(), self.choice(["sum", "mean", "max", "amax", "norm"]))
        if k == 6:
            return "%s.%s" % (a(), self.choice(["flip(0)", "cumsum(0)", "view(-1)", "reshape(-1)", "t()", "contiguous()",
                                                "pow(2)", "mul(2)", "add(1, alpha=2)"]))
        if k == 7:
            self.tag("class.method")
            return "k0.m(%s)" % a()
        if k == 8:
            if not self.closures:
                return a()
            call = self.choice(["g(%s)" % a(), "g(a=%s)" % a(), "h(%s)" % a()])
            # g calling itself: a closure whose cell holds the function itself
            self.tag("closure.recursive" if self.in_g and call.startswith("g(") else "closure.call")
            return call
        if k == 9:
            self.tag("comprehension.list")
            return "sum([%s * v for v in range(%d)])" % (a(), self.small(1, 3))
        if k == 10:
            return "torch.stack([%s, %s]).sum(0)" % (a(), a())
        if k == 11:
            return "(%s * (%s > 0))" % (a(), a())
        if k == 12:
            return "%s.masked_fill(%s > 0, %s)" % (a(), a(), self.choice(["0.0", "1.5"]))
        if k == 13:
            self.tag("T.factory")
            return self.choice(["torch.ones_like(%s)" % a(), "torch.zeros(%s.shape[0])" % a(),
                                "torch.full_like(%s, %d)" % (a(), self.small())])
        if k == 14:
            return "(%s if %s else %s)" % (a(), self.e_B(d - 1), a())
        if k != 15:
            return a()
        self.tag("T.tuple_item")
        return "(%s, %s)[%d]" % (a(), a(), self.small(0, 1))

    def e_I(self, d):
        k = self.pick("I", 14) if d > 0 else self.pick("I0", 2)
        if d == 0 or k == 0:
            if k == 0:
                self.tag("I.leaf")
                return self.choice(self.extra["I"] if self.restricted else INTS + ["G0", "obj.a", "k0.k"])
            self.tag("I.const")
            return str(self.small())
        self.tag("I.%d" % k)
        a = lambda: self.e_I(d - 1)  # noqa: E731
        if k == 1:
            return "(%s %s %s)" % (a(), self.choice(["+", "-", "*"]), a())
        if k == 2:
            return "(%s %s %d)" % (a(), self.choice(["//", "%"]), self.small(1, 4))
        if k == 3:
            return "len(%s)" % self.choice(LISTS + DICTS + ["s0", "tp", "GL"])
        if k == 4:
            return self.choice(["%s.shape[0]" % self.e_T(0), "%s.dim()" % self.e_T(0), "%s.numel()" % self.e_T(0),
                                "%s.size(0)" % self.e_T(0)])
        if k == 5:
            return self.choice(["max(%s, %s)" % (a(), a()), "min(%s, %s)" % (a(), a()), "abs(%s)" % a()])
        if k == 6:
            self.tag("class.property")
            return "k0.p"
        if k == 7:
            return self.choice(["sum(%s)" % self.e_L(d - 1), "%s[%s]" % (self.e_L(0), self.small(-1, 2))])
        if k == 8:
            return "%s.get(%s, %s)" % (self.choice(DICTS), self.key(), a())
        if k == 9:
            self.tag("break.item")
            return self.choice(["int(%s.argmax())" % self.e_T(0), "int(%s.sum().item())" % self.e_T(d - 1)])
        if k == 10:
            return "(%s if %s else %s)" % (a(), self.e_B(d - 1), a())
        if k == 11:
            return "%s.count(%s)" % (self.e_L(0), a())
        if k == 12:
            return "(%s // %s)" % (a(), a())
        if self.closures:
            self.tag("closure.nonlocal")
            return "bump(%s)" % a()
        return a()

    def e_F(self, d):
        k = self.pick("F", 6) if d > 0 else self.pick("F0", 2)
        if k == 0 and not self.restricted:
            self.tag("F.leaf")
            return "f0"
        if d == 0 or k == 1:
            self.tag("F.const")
            return self.choice(["0.5", "1.5", "-2.0", "3.25"])
        self.tag("F.%d" % k)
        if k == 2:
            return "(%s %s %s)" % (self.e_F(d - 1), self.choice(["+", "-", "*"]), self.e_F(d - 1))
        if k == 3:
            return "float(%s)" % self.e_I(d - 1)
        if k == 4:
            self.tag("break.item")
            return "%s.sum().item()" % self.e_T(d - 1)
        return "(%s / %s)" % (self.e_F(d - 1), self.choice(["2", "4.0", "f0"]))

    def key(self):
        return self.choice(['"a"', '"b"', '"c"'])

    def e_B(self, d):
        k = self.pick("B", 8) if d > 0 else 0
        self.tag("B.%d" % k)
        if k == 0:
            return "(%s %s %s)" % (self.e_I(0), self.choice(["<", "==", ">=", "!="]), self.e_I(0))
        if k == 1:
            return "(%s in %s)" % (self.e_I(d - 1), self.choice(LISTS + ["s0", "tp"]))
        if k == 2:
            return "(%s in %s)" % (self.key(), self.choice(DICTS))
        if k == 3:
            return "(not %s)" % self.e_B(d - 1)
        if k == 4:
            return "(%s %s %s)" % (self.e_B(d - 1), self.choice(["and", "or"]), self.e_B(d - 1))
        if k == 5:
            self.tag("break.data_dependent")
            return "(%s.sum() > %s)" % (self.e_T(d - 1), self.choice(["0", "1.0", "-1"]))
        if k == 6:
            return "isinstance(%s, %s)" % (self.choice(["i0", "t0", "l0", "f0"]), self.choice(["int", "torch.Tensor", "list"]))
        self.tag("break.data_dependent")
        return "bool((%s > 0).any())" % self.e_T(d - 1)

    def e_L(self, d):
        k = self.pick("L", 11) if d > 0 else 0
        self.tag("L.%d" % k)
        if k == 0:
            return self.choice(LISTS + ["GL"])
        a = lambda: self.e_I(d - 1)  # noqa: E731
        if k == 1:
            return "[%s, %s]" % (a(), a())
        if k == 2:
            return "(%s + [%s])" % (self.e_L(d - 1), a())
        if k == 3:
            self.tag("comprehension.list")
            return "[v * %s for v in %s]" % (a(), self.e_L(d - 1))
        if k == 4:
            self.tag("comprehension.list")
            return "[v for v in %s if v > %s]" % (self.e_L(d - 1), a())
        if k == 5:
            return "sorted(%s)" % self.choice([self.e_L(d - 1), "s0", "d0", "tp"])
        if k == 6:
            return "%s[%s:]" % (self.e_L(d - 1), self.small(0, 2))
        if k == 7:
            return "list(%s)" % self.choice(["tp", "reversed(%s)" % self.e_L(d - 1), "d0.values()", "range(%d)" % self.small(0, 3)])
        if k == 8:
            return "len(%s) * [%s]" % (self.choice(DICTS), a())
        if k == 9:
            self.tag("comprehension.generator")
            return "list(v + 1 for v in %s)" % self.e_L(d - 1)
        return "%s.copy()" % self.e_L(d - 1)

    def e_D(self, d):
        k = self.pick("D", 5) if d > 0 else 0
        self.tag("D.%d" % k)
        if k == 0:
            return self.choice(DICTS)
        a = lambda: self.e_I(d - 1)  # noqa: E731
        if k == 1:
            return "{%s: %s, %s: %s}" % (self.key(), a(), self.key(), a())
        if k == 2:
            self.tag("comprehension.dict")
            return "{str(v): v for v in %s}" % self.e_L(d - 1)
        if k == 3:
            return "{**%s, %s: %s}" % (self.e_D(d - 1), self.key(), a())
        return "dict(%s, z=%s)" % (self.e_D(d - 1), a())

    def e_S(self, d):
        k = self.pick("S", 5) if d > 0 else 0
        self.tag("S.%d" % k)
        if k == 0:
            return "s0"
        a = lambda: self.e_I(d - 1)  # noqa: E731
        if k == 1:
            return "{%s, %s}" % (a(), a())
        if k == 2:
            return "set(%s)" % self.e_L(d - 1)
        if k == 3:
            return "(%s %s {%s})" % (self.e_S(d - 1), self.choice(["|", "-", "&"]), a())
        self.tag("comprehension.set")
        return "{v %% 3 for v in %s}" % self.e_L(d - 1)

    def e_P(self, d):
        k = self.pick("P", 5) if d > 0 else 0
        self.tag("P.%d" % k)
        if k == 0:
            return "tp"
        a = lambda: self.e_I(d - 1)  # noqa: E731
        if k == 1:
            return "(%s, %s)" % (a(), a())
        if k == 2:
            return "tuple(%s)" % self.e_L(d - 1)
        if k == 3:
            return "(%s + (%s,))" % (self.e_P(d - 1), a())
        return "%s[::-1]" % self.e_P(d - 1)

    def any_expr(self, d):
        return self.expr(self.choice(["T", "I", "L", "D", "F", "S", "P"]), d)

    # ------------------------------------------------------------------ statements
    def block(self, depth, in_loop, ind, lo=1, hi=4):
        n = self.draw(st.integers(lo, hi))
        lines = []
        for _ in range(n):
            lines.extend(self.stmt(depth, in_loop, ind))
        return lines or [ind + "pass"]

    def stmt(self, depth, in_loop, ind):
        nk = 20 if depth > 0 else 12  # compound statements only above depth 0
        k = self.pick("stmt", nk + 6)
        ed = self.draw(st.integers(0, 2))
        if k == nk + 5:  # idioms of everyday Python code
            return self.idiom(ed, ind)
        if k >= nk:  # the stateful families: iterators, generators, deques, set algebra, views
            return self.stateful(k - nk, ed, ind)
        if k <= 1:
            ty = self.choice(["T", "I", "L", "D", "F", "S", "P"])
            self.tag("stmt.assign.%s" % ty)
            return [ind + "%s = %s" % (self.choice(ASSIGNABLE[ty]), self.expr(ty, ed))]
        if k == 2:
            self.tag("stmt.augassign")
            ty = self.choice(["T", "I", "L", "F"])
            op = {"T": ["+=", "*=", "-="], "I": ["+=", "-=", "*="], "L": ["+="], "F": ["+=", "*="]}[ty]
            rhs = self.expr(ty, ed) if ty != "T" else self.choice([self.e_T(ed), self.e_I(0)])
            return [ind + "%s %s %s" % (self.choice(ASSIGNABLE[ty]), self.choice(op), rhs)]
        if k == 3:
            self.tag("stmt.print")
            return [ind + "print(%s)" % ", ".join(self.any_expr(ed) for _ in range(self.draw(st.integers(1, 2))))]
        if k == 4:
            self.tag("stmt.global")
            return [ind + self.choice(["G0 = %s" % self.e_I(ed), "GL.append(%s)" % self.e_I(ed),
                                       "G0 += %s" % self.e_I(ed)])]
        if k == 5:
            self.tag("stmt.setattr")
            return [ind + self.choice(["obj.a = %s" % self.e_I(ed), "obj.t = %s" % self.e_T(ed),
                                       "k0.k = %s" % self.e_I(ed), "k0.setk(%s)" % self.e_I(ed),
                                       "obj.extra = %s" % self.any_expr(ed)])]
        if k == 6:
            return [ind + self.mutation(ed)]
        if k == 7:
            self.tag("stmt.inplace_tensor")
            return [ind + "%s.%s(%s)" % (self.choice(ASSIGNABLE["T"] + ["obj.t"]), self.choice(["add_", "mul_", "sub_"]),
                                         self.choice([self.e_T(ed), self.e_I(0), "0.5"]))]
        if k == 8:
            self.tag("stmt.raise")
            return [ind + "if %s:" % self.e_B(ed),
                    ind + "    raise %s(%s)" % (self.choice(EXCS), self.choice(['"boom"', 'f"v{i0}"', "i1"]))]
        if k == 9:
            self.tag("stmt.unpack")
            return [ind + self.choice(["i0, i1 = i1, i0", "t0, t1 = t1, t0", "i0, i1 = %s" % self.e_P(0),
                                       "i0, *rest = %s + [0]" % self.e_L(0), "t0, i0 = (%s, %s)" % (self.e_T(ed), self.e_I(ed))])]
        if k == 10:
            if in_loop:
                self.tag("stmt.%s" % ("break" if in_loop else "loopctl"))
                return [ind + "if %s:" % self.e_B(ed), ind + "    " + self.choice(["break", "continue"])]
            self.tag("stmt.return_early")
            return [ind + "if %s:" % self.e_B(ed), ind + "    return %s" % self.any_expr(ed)]
        if k == 11:
            self.tag("stmt.assert")
            return [ind + "assert %s, %s" % (self.e_B(ed), self.choice(['"assert"', "i0"]))]
        # compound
        inner = ind + "    "
        if k == 12:
            self.tag("stmt.if")
            lines = [ind + "if %s:" % self.e_B(ed)] + self.block(depth - 1, in_loop, inner)
            if self.draw(st.booleans()):
                self.tag("stmt.else")
                lines += [ind + "else:"] + self.block(depth - 1, in_loop, inner)
            return lines
        if k == 13:
            self.tag("stmt.for_range")
            v = self.fresh()
            return [ind + "for %s in range(%s):" % (v, self.choice([str(self.small(0, 3)), "n % 3", "len(tp)"]))] + \
                self.block(depth - 1, True, inner)
        if k == 14:
            self.tag("stmt.for_list")
            v = self.fresh()
            it = self.choice(["list(l0)", "list(lst)", "sorted(s0)", "list(d0.items())", "list(enumerate(tp))",
                              "list(zip(l0, tp))", "[t0, t1]"])
            return [ind + "for %s in %s:" % (v, it), inner + "print(%s)" % v if self.draw(st.booleans()) else inner + "pass"] + \
                self.block(depth - 1, True, inner)
        if k == 15:
            self.tag("stmt.while")
            v = self.fresh()
            return [ind + "%s = 0" % v, ind + "while %s < %d:" % (v, self.small(1, 3)), inner + "%s += 1" % v] + \
                self.block(depth - 1, True, inner)
        if k == 16:
            self.tag("stmt.try")
            lines = [ind + "try:"] + self.block(depth - 1, in_loop, inner)
            form = self.pick("try", 3)
            if form in (0, 2):
                self.tag("stmt.except")
                exc = self.choice(["Exception", "(KeyError, IndexError)", "ValueError", "ZeroDivisionError", "ArithmeticError"])
                lines += [ind + "except %s as e:" % exc, inner + self.choice(["print(type(e).__name__, e)", "i0 += 1",
                                                                              "l0.append(len(str(e)))", "pass"])]
                lines += self.block(depth - 1, in_loop, inner, 0, 2) if self.draw(st.booleans()) else []
            if form in (1, 2):
                self.tag("stmt.finally")
                lines += [ind + "finally:"] + self.block(depth - 1, False, inner, 1, 2)
            return lines
        if k == 17:
            self.tag("stmt.with_no_grad")
            return [ind + "with torch.%s:" % self.choice(["no_grad()", "enable_grad()", "set_grad_enabled(False)"])] + \
                self.block(depth - 1, in_loop, inner)
        if k == 18:
            self.tag("stmt.if_data_dependent")
            lines = [ind + "if %s.%s > %s:" % (self.e_T(ed), self.choice(["sum()", "mean()", "max()"]), self.choice(["0", "0.5"]))]
            lines += self.block(depth - 1, in_loop, inner)
            lines += [ind + "else:"] + self.block(depth - 1, in_loop, inner)
            return lines
        self.tag("stmt.call_helper")
        return [ind + self.choice(["t1 = helper(%s, %s)" % (self.e_T(ed), self.e_I(ed)),
                                   "i1 = helper_int(%s, %s)" % (self.e_L(0), self.e_I(ed))])]

    # ------------------------------------------------------------------ stateful objects
    # Objects whose state a later step reads: an iterator over a container the program
    # changes between next() calls, a generator driven by next()/send() between other
    # statements, a deque, set algebra after removals, a dict view held across changes.
    # Each family may put a graph break (a print, a data-dependent branch) while the object
    # is alive, and prints what it reads (stdout is compared).
    ITER_SOURCES = ["l0", "lst", "d0", "dct", "s0", "d0.keys()", "d0.values()", "d0.items()", "reversed(l0)",
                    "reversed(d0)", "reversed(d0.items())", "enumerate(l0)", "zip(l0, tp)", "map(abs, l0)",
                    "filter(None, l0)", "iter(tp)"]

    def change_of(self, src, d):
        """A statement that changes the container under `src` (or another one)."""
        base = src.split("(")[-1].split(")")[0].split(",")[0].split(".")[0] if "(" in src else src.split(".")[0]
        if base in ("l0", "lst"):
            return self.choice(["%s.append(%s)" % (base, self.e_I(d)), "%s.insert(0, %s)" % (base, self.e_I(d)),
                                "del %s[0]" % base, "%s.clear()" % base, "%s[0] = %s" % (base, self.e_I(d)),
                                "%s.extend([7, 8])" % base, "%s.pop()" % base, "%s.reverse()" % base])
        if base in ("d0", "dct"):
            return self.choice(['%s["z"] = %s' % (base, self.e_I(d)), '%s.pop("a", 0)' % base,
                                '%s["a"] = %s' % (base, self.e_I(d)), '%s.update(b=9)' % base,
                                '%s.setdefault("c", 3)' % base, '%s.clear()' % base])
        if base == "s0":
            return self.choice(["s0.add(%s)" % self.e_I(d), "s0.discard(1)", "s0.add(9)", "s0.discard(2)",
                                "s0 |= {17, 25}", "s0 -= {1}"])
        return self.mutation(d)

    def maybe_break(self, ind, d):
        k = self.pick("sbreak", 3)
        if k == 0:
            return []
        self.tag("stateful.break")
        if k == 1:
            return [ind + "print(%s)" % self.e_I(0)]
        return [ind + "if %s.sum() > 0:" % self.e_T(d), ind + "    print(\"pos\")"]

    def stateful(self, family, d, ind):
        v = self.fresh()
        if family == 0:
            src = self.choice(self.ITER_SOURCES)
            self.tag("stateful.iter")
            lines = [ind + "%s = iter(%s)" % (v, src), ind + "print(next(%s, None))" % v]
            lines += self.maybe_break(ind, d)
            if self.draw(st.booleans()):
                self.tag("stateful.iter_change")
                lines.append(ind + self.change_of(src, d))
            lines += self.maybe_break(ind, d)
            lines += [ind + "try:", ind + "    print(next(%s, None), list(%s))" % (v, v),
                      ind + "except RuntimeError as e:", ind + "    print(\"RuntimeError\", e)"]
            return lines
        if family == 1:
            self.tag("stateful.generator")
            g = "gen_" + v
            lines = [ind + "def %s(k):" % g, ind + "    a = yield k", ind + "    print(\"got\", a)",
                     ind + "    l0.append(k)", ind + "    b = yield (a or 0) + len(l0)", ind + "    yield b"]
            lines += [ind + "%s = %s(%s)" % (v, g, self.e_I(d)), ind + "print(next(%s))" % v]
            lines += self.maybe_break(ind, d)
            if self.draw(st.booleans()):
                lines.append(ind + self.mutation(d))
            lines += [ind + "print(%s.send(%s))" % (v, self.e_I(d))]
            lines += self.maybe_break(ind, d)
            lines += [ind + "print(next(%s, None), next(%s, None))" % (v, v)]
            return lines
        if family == 2:
            self.tag("stateful.deque")
            maxlen = self.choice(["", ", maxlen=3"])
            lines = [ind + "%s = collections.deque(l0%s)" % (v, maxlen)]
            ops = ["append(%s)" % self.e_I(d), "appendleft(5)", "pop()", "popleft()", "rotate(1)", "reverse()",
                   "extend([6, 7])", "clear()"]
            it = v + "_it"
            lines += [ind + "%s = iter(%s)" % (it, v), ind + "print(next(%s, None))" % it]
            for _ in range(self.draw(st.integers(0, 2))):
                op = self.choice(ops + ["[0] = 9"])
                stmt = "%s%s" % (v, op) if op.startswith("[") else "%s.%s" % (v, op)
                if op in ("pop()", "popleft()") or op.startswith("["):
                    stmt = "if %s: %s" % (v, stmt)  # not on an empty deque
                lines.append(ind + stmt)
                lines += self.maybe_break(ind, d)
            lines += [ind + "try:", ind + "    print(list(%s))" % it, ind + "except RuntimeError as e:",
                      ind + "    print(\"RuntimeError\", e)", ind + "print(list(%s))" % v]
            return lines
        if family == 3:
            self.tag("stateful.set_algebra")
            lines = [ind + self.choice(["s0.discard(1)", "s0.discard(2)", "s0.pop()", "s0.remove(2) if 2 in s0 else None"]),
                     ind + self.choice(["s0.add(9)", "s0.add(17)", "s0.update({25, 33})", "s0.add(%s)" % self.e_I(d)])]
            lines += self.maybe_break(ind, d)
            other = self.choice(["{3, 9}", "{1, 17, 40}", "set(l0)", "{%s}" % self.e_I(d)])
            expr = self.choice(["s0 | %s" % other, "s0 - %s" % other, "s0 & %s" % other, "s0 ^ %s" % other,
                                "s0.union(%s)" % other, "s0.difference(%s)" % other, "s0.intersection(%s)" % other,
                                "s0.symmetric_difference(%s)" % other, "%s | s0" % other])
            lines += [ind + "%s = %s" % (v, expr), ind + "print(list(%s), list(s0))" % v]
            return lines
        self.tag("stateful.dict_view")
        view = self.choice(["keys", "values", "items"])
        lines = [ind + "%s = %s.%s()" % (v, self.choice(DICTS), view)]
        lines += self.maybe_break(ind, d)
        lines.append(ind + self.change_of("d0", d))
        lines += [ind + "print(list(%s), len(%s))" % (v, v)]
        return lines

    # ------------------------------------------------------------------ idioms
    # What code nobody here wrote does all the time: calls with *args/**kwargs and defaults
    # (and their TypeErrors), sort keys, string formatting, any/all over generators, a user
    # context manager that may swallow an exception, a subclass calling super(), partials,
    # enumerate/zip, getattr/hasattr with defaults, the walrus.
    def idiom(self, d, ind):
        k = self.pick("idiom", 15)
        I = lambda: self.e_I(d)  # noqa: E731,E741
        T = lambda: self.e_T(d)  # noqa: E731
        if k == 0:
            self.tag("idiom.star_call")
            return [ind + self.choice(["i1 = helper_int(*(%s, %s))" % (self.e_L(0), I()),
                                       't1 = helper(*[%s], **{"b": %s})' % (T(), I()),
                                       "i1 = kwh(*%s)" % self.choice(["l0", "tp", "lst"]),
                                       "i1 = kwh(**{%s: %s})" % (self.choice(['"a"', '"c"', '"z"']), I())])]
        if k == 1:
            self.tag("idiom.kw_default")
            return [ind + "i1 = %s" % self.choice(["kwh(%s)" % I(), "kwh(%s, 3, 4, 5)" % I(), "kwh(%s, c=%s)" % (I(), I()),
                                                    "kwh(%s, z=1, c=2)" % I(), "kwh(c=%s)" % I(), "kwh(%s, a=1)" % I()])]
        if k == 2:
            self.tag("idiom.sort_key")
            return [ind + self.choice(["l0 = sorted(l0, key=lambda v: (v % 3, -v))",
                                       "i1 = max(l0, key=abs, default=%s)" % I(),
                                       "i1 = min(d0.values(), default=%s)" % I(),
                                       "lst.sort(key=lambda v: -v, reverse=%s)" % self.choice(["True", "False"]),
                                       "tp = tuple(sorted(tp, key=lambda v: v * %s))" % I()])]
        if k == 3:
            self.tag("idiom.str")
            return [ind + self.choice(['print(f"{i0:>3}|{f0:.2f}|{tuple(t0.shape)}|{l0!r}")',
                                       'print("-".join(str(v) for v in l0))',
                                       'print(str(i0).zfill(4), repr(tp), "%d-%s" % (i1, l0))',
                                       'i1 = len(str(l0)) + "abc".find(%s)' % self.choice(['"c"', '"z"']),
                                       'print("{}:{:.1f}".format(i1, f0), str(d0).upper())'])]
        if k == 4:
            self.tag("idiom.any_all")
            return [ind + "i1 = int(any(v > %s for v in l0)) + int(all(%s))" % (I(), self.choice(["l0", "tp", "d0", "s0"]))]
        if k == 5:
            self.tag("idiom.context_manager")
            lines = [ind + "with Ctx(%s) as %s:" % (I(), self.fresh())]
            return lines + self.block(0, False, ind + "    ", 1, 3)
        if k == 6:
            self.tag("idiom.super")
            return [ind + self.choice(["t1 = K2(%s, %s).m(%s)" % (T(), I(), T()), "i1 = K2(t0, %s).p" % I(),
                                       "k0 = K2(t1, %s)" % I()])]
        if k == 7:
            self.tag("idiom.partial")
            return [ind + "t1 = functools.partial(helper, b=%s)(%s)" % (I(), T())]
        if k == 8:
            self.tag("idiom.enumerate_zip")
            return [ind + self.choice(["l0 = [i * v for i, v in enumerate(l0)]", 'd0 = dict(zip(["a", "b", "c"], l0))',
                                       "tp = tuple(a + b for a, b in zip(l0, tp))",
                                       "i1 = sum(i for i, _ in enumerate(lst, start=%s))" % I()])]
        if k == 9:
            self.tag("idiom.getattr")
            return [ind + self.choice(['i1 = getattr(obj, "a", 0) + int(hasattr(obj, "extra")) + int(hasattr(k0, "p"))',
                                       "print(type(obj).__name__, isinstance(k0, K), callable(k0.m), type(k0) is K2)",
                                       'i1 = getattr(k0, %s, %s)' % (self.choice(['"k"', '"missing"']), I())])]
        if k == 10:
            self.tag("idiom.dict_items")
            return [ind + 'i1 += sum(vv for kk, vv in sorted(%s.items()) if kk != "a")' % self.choice(DICTS)]
        if k == 11:
            # + and * across sequence types: the same type concatenates (a deque keeps its
            # maxlen), two types raise TypeError.
            self.tag("idiom.sequence_ops")
            a = self.choice(["l0", "tp", "collections.deque(l0, maxlen=3)", "collections.deque(tp)", "tuple(l0)",
                             "list(tp)", "[%s]" % T()])
            b = self.choice(["l0", "tp", "collections.deque(lst)", "(%s,)" % I(), "[%s]" % I(), "(%s,)" % T()])
            expr = self.choice(["%s + %s" % (a, b), "%s * %d" % (a, self.small(-1, 3)), "%d * %s" % (self.small(0, 2), b)])
            return [ind + "try:", ind + "    print(%s)" % expr, ind + "except TypeError as e:",
                    ind + "    print(\"TypeError\", e)"]
        if k == 12:
            # torch.Size: printed, its type, slices and + of it (symbolic from call D on).
            self.tag("idiom.size")
            return [ind + self.choice(['print(x.shape, type(t0.size()).__name__, isinstance(y.shape, torch.Size))',
                                       "tp = tuple(x.shape + (%s,))" % I(),
                                       "i1 = x.shape.numel() + len(t1.size()[1:]) + %s.shape[0]" % T(),
                                       "print(torch.Size([x.shape[0], %s]), x.size() * 2, (1,) + y.shape)" % I(),
                                       "print(list(%s.shape), x.shape == y.shape, x.shape[-1:])" % T()])]
        if k == 13:
            # A breaking instruction that raises, caught in a loop: the rest of the frame runs
            # natively in the break code and comes back to the breaking instruction.
            self.tag("idiom.raising_break")
            w = self.fresh()
            body = self.choice(["l0.append(int(bool(%s)))" % w, "l0.append(int(%s.item()))" % w,
                                "l0.append((%s, 1) == (2,))" % w, "l0.append(1 if %s else 0)" % w])
            if self.draw(st.booleans()):
                return [ind + "for %s in [%s, %s[:1]]:" % (w, T(), T()), ind + "    try:", ind + "        " + body,
                        ind + "    except RuntimeError as e:", ind + "        l0.append(-1)"]
            return [ind + "for %s in [%s, %s[:1]]:" % (w, T(), T()), ind + "    with Ctx(%d):" % self.choice([1, 3]),
                    ind + "        " + body]
        self.tag("idiom.walrus")
        w = self.fresh()
        return [ind + "if (%s := %s) > 0 and 0 <= i0 < 5:" % (w, I()), ind + "    i1 += %s" % w]

    def fresh(self):
        self.loop_var += 1
        return "w%d" % self.loop_var

    def mutation(self, d):
        k = self.pick("mut", 14)
        self.tag("mut.%d" % k)
        a = self.e_I(d)
        lst, dct = self.choice(LISTS + ["GL"]), self.choice(DICTS)
        return [
            "%s.append(%s)" % (lst, a), "%s[%s] = %s" % (dct, self.key(), a), "%s.pop()" % lst,
            "%s.pop(%s, 0)" % (dct, self.key()), "s0.add(%s)" % a, "%s.sort()" % lst, "%s.reverse()" % lst,
            "%s.extend(%s)" % (lst, self.e_L(0)), "%s.insert(0, %s)" % (lst, a), "del %s[0]" % lst,
            "%s.update({%s: %s})" % (dct, self.key(), a), "%s.setdefault(%s, %s)" % (dct, self.key(), a),
            "%s.remove(%s)" % (lst, a), "s0.discard(%s)" % a,
        ][k]

    # ------------------------------------------------------------------ the module
    def program(self):
        lines = ["import collections", "import functools", "import torch", "", "G0 = 1", "GL = [0]", ""]
        # The class: a method over a tensor, a property over an int, a method that stores.
        self.restricted = True
        self.extra = {"T": ["self.t", "a"], "I": ["self.k"]}
        m_body = self.e_T(self.draw(st.integers(0, 2)))
        self.extra = {"T": ["self.t"], "I": ["self.k"]}
        p_body = self.e_I(self.draw(st.integers(0, 1)))
        self.extra = {}
        self.restricted = False
        lines += ["class K:", "    def __init__(self, t, k):", "        self.t = t", "        self.k = k", "",
                  "    def m(self, a):", "        return %s" % m_body, "",
                  "    @property", "    def p(self):", "        return %s" % p_body, "",
                  "    def setk(self, v):", "        self.k = v", ""]
        # Helpers at module level: called (inlined) from f.
        lines += ["def helper(a, b):", "    if b > 2:", "        return a * b", "    return a - b", "",
                  "def helper_int(l, b):", "    return len(l) + b", "",
                  "def kwh(a, b=2, *rest, c=3, **kw):", "    return a * b + c + len(rest) + len(kw)", ""]
        # A subclass calling super(), and a context manager that swallows exceptions for odd k.
        lines += ["class K2(K):", "    kind = 3", "", "    def m(self, a):", "        return super().m(a) * 2", "",
                  "    @property", "    def p(self):", "        return super().p + K2.kind", "",
                  "class Ctx:", "    def __init__(self, k):", "        self.k = k", "",
                  "    def __enter__(self):", "        GL.append(self.k)", "        return self", "",
                  "    def __exit__(self, et, ev, tb):", "        GL.append(-1 if et is None else 99)",
                  "        return self.k % 2 == 1", ""]
        body = ["    global G0", "    t0 = x + 1", "    t1 = y * 2", "    i0 = n + 1", "    i1 = 2", "    f0 = 1.5",
                "    l0 = [1, 2, 3]", '    d0 = {"a": 1, "b": 2}', "    s0 = {1, 2}", "    tp = (1, 2)",
                "    k0 = K(t0, i0)"]
        if self.draw(st.booleans()):
            self.tag("closure.def")
            self.closures = True
            self.extra = {"T": ["a"]}
            self.in_g = True
            g_body = self.e_T(self.draw(st.integers(0, 2)))
            self.in_g = False
            self.extra = {}
            body += ["    def g(a):", "        return %s" % g_body, "",
                     "    h = lambda a, b=2: a * b + t1", "",
                     "    def bump(k):", "        nonlocal i1", "        i1 = i1 + k", "        return i1"]
        body += self.block(2, False, "    ", 1, 6)
        rets = self.draw(st.lists(st.sampled_from(RETURNABLE), min_size=1, max_size=4))
        body.append("    return (%s,)" % ", ".join(rets))
        lines += ["def f(x, y, n, lst, dct, obj):"] + body + [""]
        return Program("\n".join(lines), frozenset(self.tags))


@st.composite
def programs(draw):
    return Gen(draw).program()
