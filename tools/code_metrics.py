"""Size and convention counts of csrc/ (figures to compare before and after a restructuring).

    .venv/bin/python tools/code_metrics.py [--top N]

* functions: bodies that open on a line at namespace level (column 0, the project's layout:
  namespaces are not indented) or one level into a class/struct (two spaces), and close at
  the matching brace; length in lines, the signature line included.
* files: line counts of csrc/**/*.{cpp,h,def}.
* kind tests: tests of one value kind outside an exhaustive dispatch, outside
  csrc/trace/values/ (which defines them): `is(Kind::X)`, `kind == Kind::X`, and the typed
  tests `get<X>()` (a pointer that is null for any other kind).
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=5)
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


if __name__ == "__main__":
    main()
