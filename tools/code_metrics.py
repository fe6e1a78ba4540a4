"""Size and convention counts of csrc/ (figures to compare before and after a restructuring).

    .venv/bin/python tools/code_metrics.py [--top N]

* functions: bodies that open on a line at namespace level (column 0, the project's layout:
  namespaces are not indented) or one level into a class/struct (two spaces), and close at
  the matching brace; length in lines, the signature line included.
* files: line counts of csrc/**/*.{cpp,h,def}.
* kind tests: tests of one value kind outside an exhaustive dispatch, outside
  csrc/trace/values/ (which defines them): `is(Kind::X)`, `kind == Kind::X`, and the typed
  tests `get<X>()` (a pointer that is null for any other kind).
* call cycle (with --objects BUILD_DIR, from the trace stage's object files): files of
  csrc/trace/ are nodes, an edge A -> B when A's object file uses a function B's defines
  (nm); the largest strongly connected component is the biggest set of files that all reach
  one another through calls (a change to any of them may need the others read).
* raw refcounts: Py_INCREF/Py_DECREF/Py_XINCREF/Py_XDECREF/Py_CLEAR outside csrc/support/,
  and how many of those carry a `why:` comment on the same line or one of the three before.
"""
import argparse
import os
import re

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "csrc")


def sources():
    for d, _, files in os.walk(ROOT):
        for f in sorted(files):
            if f.endswith((".cpp", ".h", ".def")):
                p = os.path.join(d, f)
                yield os.path.relpath(p, os.path.dirname(ROOT)), open(p).read().splitlines()


CONTROL = ("if ", "if(", "for ", "while ", "switch ", "} else", "else", "do ", "namespace", "struct ", "class ",
           "enum ", "union ", "return ", "case ", "default:", "try", "catch")


def functions(path, lines):
    """(length, where) of every function body whose signature starts at column 0 or 2."""
    out = []
    i = 0
    while i < len(lines):
        code = lines[i].split("//")[0].rstrip()
        if not code.endswith("{"):
            i += 1
            continue
        # The statement this brace ends: back over continuation lines.
        k = i
        while k > 0:
            prev = lines[k - 1].split("//")[0].rstrip()
            if not prev or prev.endswith((";", "{", "}", ":")) or prev.lstrip().startswith(("#", "//")):
                break
            k -= 1
        first = lines[k]
        indent = len(first) - len(first.lstrip())
        stmt = " ".join(l.split("//")[0].strip() for l in lines[k:i + 1])
        if indent > 2 or first.lstrip().startswith(CONTROL) or "(" not in stmt or "=" in stmt.split("(")[0] \
                or not re.search(r"\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->[^{]*)?(:[^{]*)?\{$", stmt):
            i += 1
            continue
        depth = 0
        for j in range(i, len(lines)):
            depth += lines[j].count("{") - lines[j].count("}")
            if depth <= 0:
                name = stmt.split("(")[0].split()[-1]
                out.append((j - k + 1, f"{path}:{k + 1} {name}"))
                i = j
                break
        i += 1
    return out


def call_cycle(build_dir, leave_out=lambda name: False):
    """(size of the largest strongly connected component, its files, number of .o) of csrc/trace;
    files for which leave_out(name) is true are left out with their edges."""
    import subprocess
    objdir = os.path.join(build_dir, "CMakeFiles", "cdynamo_trace.dir", "csrc", "trace")
    import json
    # Only the objects of the current sources (a build folder keeps those of deleted files).
    commands = json.load(open(os.path.join(build_dir, "compile_commands.json")))
    objs = [os.path.join(build_dir, c["output"]) for c in commands
            if "cdynamo_trace.dir" in c.get("output", "") and os.path.exists(os.path.join(build_dir, c["output"]))]
    defined, used = {}, {}
    for o in objs:
        name = os.path.relpath(o, objdir)[:-2]
        out = subprocess.run(["nm", "--defined-only", "-g", o], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TW":
                defined.setdefault(parts[2], set()).add(name)
        und = subprocess.run(["nm", "-u", o], capture_output=True, text=True).stdout
        used[name] = {l.split()[-1] for l in und.splitlines() if l.strip()}
    edges = {n: set() for n in used if not leave_out(n)}
    for n in edges:
        for s in used[n]:
            for m in defined.get(s, ()):
                # weak symbols (inline functions, templates) are defined everywhere they are used
                if m != n and len(defined[s]) == 1 and not leave_out(m):
                    edges[n].add(m)
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]
    import sys
    sys.setrecursionlimit(10000)
    def strong(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            comps.append(comp)
    for v in edges:
        if v not in index: strong(v)
    big = max(comps, key=len) if comps else []
    return len(big), sorted(big), len(edges)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--objects", help="a build folder: also measure the call cycle of csrc/trace from its objects")
    a = ap.parse_args()
    funcs, files, kind_tests, raw, raw_why = [], [], 0, 0, 0
    kind_re = re.compile(r"is\(Kind::\w+\)|kind [!=]= Kind::\w+|->get<\w+>\(\)")
    raw_re = re.compile(r"\bPy_(X?INCREF|X?DECREF|CLEAR)\b")
    for path, lines in sources():
        files.append((len(lines), path))
        funcs += functions(path, lines)
        if not path.startswith("csrc/trace/values/"):
            kind_tests += sum(len(kind_re.findall(l)) for l in lines)
        if not path.startswith("csrc/support/"):
            for k, l in enumerate(lines):
                n = len(raw_re.findall(l))
                raw += n
                if n and any("why:" in w for w in lines[max(0, k - 3):k + 1]):
                    raw_why += n
    funcs.sort(reverse=True)
    files.sort(reverse=True)
    print(f"longest functions (lines): " + "; ".join(f"{n} {w}" for n, w in funcs[: a.top]))
    print(f"functions over 150 lines: {sum(1 for n, _ in funcs if n > 150)}")
    print(f"largest files (lines): " + "; ".join(f"{n} {p}" for n, p in files[: a.top]))
    print(f".cpp files over 800 lines: {sum(1 for n, p in files if n > 800 and p.endswith('.cpp'))}")
    print(f"kind tests outside csrc/trace/values/: {kind_tests}")
    print(f"raw incref/decref outside csrc/support/: {raw} ({raw_why} with a why: comment)")
    if a.objects:
        n, comp, total = call_cycle(a.objects)
        print(f"largest call cycle in csrc/trace: {n} of {total} object files")
        # The engine's services (Tracer::fail, inlining, recording a graph call) are reached by
        # every operation; without them the cycle is the operations' own mutual recursion.
        n, comp, total = call_cycle(a.objects, lambda name: name.startswith("engine/"))
        print(f"  without engine/: {n} of {total}: {' '.join(comp)}")


if __name__ == "__main__":
    main()
