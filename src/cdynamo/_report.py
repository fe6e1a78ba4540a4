"""cdynamo.report("out.html"): the user's own source files, line by line, marked with what
cdynamo did there. One static HTML file: no server, no network, no external resource.

Per line (from the translation records of cdynamo._events):

* **graph**: the line lies in a frame (or resume function) that was captured into graph
  ``[frame_id/compile_id]`` (the ids tlparse and the run summary use);
* **break**: a graph break happened here, with its reason (and, when the break was inside
  a function the frame inlined, the chain of calls);
* **guards**: on a frame's first line, the guards its entry installed; on each line, the
  guards that line's use of a value installed ("guarded here"); on a recompile, the guard
  that failed, on the frame's first line and on the line that installed it;
* **native**: the frame ran natively, with the reason, on its first line and on the line
  where the trace stopped.

What the core does not expose yet: the source line of each graph node (so lines are
attributed by frame range: from the frame's start, or the line a resume function resumes
at, to the break).
"""
import html
import json
import os
import re
import sysconfig

from . import _events

_RESUME = re.compile(r"^cdynamo_resume_in_.*_at_(\d+)$")
_GUARD_FROM = re.compile(r"\(guard from (.+?):(\d+) in ")


def _excluded_prefixes():
    import torch

    out = [os.path.dirname(os.path.abspath(__file__)) + os.sep, os.path.dirname(torch.__file__) + os.sep]
    for key in ("stdlib", "platstdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            out += [p + os.sep, os.path.realpath(p) + os.sep]
    return out


def _is_user_file(path, include_libraries):
    if not path or path.startswith("<") or not os.path.isfile(path):
        return False
    if any(path.startswith(p) for p in _excluded_prefixes()):
        return False
    if not include_libraries:
        for key in ("purelib", "platlib"):
            p = sysconfig.get_paths().get(key)
            if p and (path.startswith(p + os.sep) or path.startswith(os.path.realpath(p) + os.sep)):
                return False
    return True


def _code_lines(code):  # a code object, or the snapshot a stored record keeps (_events.CodeInfo)
    return sorted({line for _, _, line in code.co_lines() if line is not None})


def _first_stack_line(user_stack, filename):
    """The line of `filename` that the first entry of a user stack names (the root's)."""
    for entry in (user_stack or "").splitlines():
        m = re.search(r"(.+):(\d+) in ", entry.strip())
        if m and m.group(1) == filename:
            return int(m.group(2))
    return None


class _Marks:
    def __init__(self):
        self.lines = {}  # (file, line) -> {"graph": set, "break": [], "guards": [], "native": [], "recompile": []}

    def at(self, path, line):
        return self.lines.setdefault((path, line), {"graph": [], "break": [], "guards": [], "guard_line": [],
                                                    "native": [], "recompile": [], "eager": []})


def _collect(records, include_libraries):
    marks = _Marks()
    files = set()
    for r in records:
        path = r.filename
        if not _is_user_file(path, include_libraries):
            continue
        files.add(path)
        code = r.code
        lines = _code_lines(code)
        if not lines:
            continue
        first = code.co_firstlineno
        m = _RESUME.match(code.co_name)
        start = int(m.group(1)) if m else first
        cid = r.compile_id
        where = f"{r.function}" + (f" (resume function from line {start})" if m else "")
        if r.recompile_reason:
            marks.at(path, start)["recompile"].append({"id": cid, "reason": r.recompile_reason.strip(), "where": where})
            # The line that installed each guard that failed (the reason names it innermost first).
            for reason in r.recompile_reason.split("\n    - "):
                m_from = _GUARD_FROM.search(reason)
                if not m_from:
                    continue
                f, line = m_from.group(1), int(m_from.group(2))
                if _is_user_file(f, include_libraries) and (f, line) != (path, start):
                    files.add(f)
                    marks.at(f, line)["recompile"].append({"id": cid, "reason": reason.strip(), "where": where})
        if r.kind == "captured":
            stop = None
            if r.graph_break:
                b = r.graph_break
                stop = _first_stack_line(b["user_stack"], path)
                if stop is None and b["filename"] == path:
                    stop = b["line"]
                at = stop if stop is not None else start
                marks.at(path, at)["break"].append({"id": cid, "reason": b["reason"], "where": where,
                                                    "location": f"{b['filename']}:{b['line']}",
                                                    "stack": b["user_stack"]})
                if b["filename"] == path and b["line"] != at:  # inside a function the frame inlined
                    marks.at(path, b["line"])["break"].append({"id": cid, "reason": b["reason"], "where": where,
                                                               "location": f"{b['filename']}:{b['line']}",
                                                               "stack": b["user_stack"]})
            if r.has_graph:
                for line in lines:
                    if line != first and line >= start and (stop is None or line <= stop):
                        marks.at(path, line)["graph"].append(cid)
            marks.at(path, start)["guards"].append({"id": cid, "count": r.num_guards, "text": r.guards.strip(),
                                                    "where": where, "graph": r.has_graph})
            # Each guard also on the line whose use installed it (the innermost frame of
            # its origin that is in a user file).
            here = {}
            for text, frames in r.guard_sites or ():
                site = next(((f, line) for f, line, _ in frames if _is_user_file(f, include_libraries)), None)
                if site is not None:
                    here.setdefault(site, []).append(text)
            for (f, line), texts in here.items():
                files.add(f)
                marks.at(f, line)["guard_line"].append({"id": cid, "texts": texts, "where": where})
        elif r.kind == "native":
            n = r.native
            marks.at(path, start)["native"].append({"id": cid, "reason": n["reason"], "where": where,
                                                    "location": f"{n['filename']}:{n['line']}" if n["filename"]
                                                    else "", "stack": n["user_stack"]})
            if n["filename"] == path and n["line"] and n["line"] != start:
                marks.at(path, n["line"])["native"].append({"id": cid, "reason": n["reason"], "where": where,
                                                            "location": f"{n['filename']}:{n['line']}",
                                                            "stack": n["user_stack"]})
        elif r.kind == "eager_on_recompile":
            marks.at(path, start)["eager"].append({"id": cid, "where": where})
    return marks, sorted(files)


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1b1b1b;background:#fafafa}
header{padding:12px 20px;background:#243447;color:#fff}
header h1{margin:0 0 6px;font-size:20px}
.counts span{display:inline-block;margin-right:18px}
.legend{padding:8px 20px;background:#eef1f4;border-bottom:1px solid #d5dbe1}
.legend .tag{margin-right:6px}
section{margin:16px 20px;background:#fff;border:1px solid #d5dbe1;border-radius:4px}
section h2{font-size:15px;margin:0;padding:8px 12px;background:#f0f3f6;border-bottom:1px solid #d5dbe1;
 font-family:ui-monospace,monospace}
table.src{border-collapse:collapse;width:100%}
table.src td{vertical-align:top;padding:0 8px;font-family:ui-monospace,Menlo,monospace;font-size:13px}
td.no{color:#888;text-align:right;width:1%;user-select:none;border-right:1px solid #e3e6ea}
td.code{white-space:pre;width:55%}
td.marks{font-family:system-ui,sans-serif;font-size:12px}
tr.graph td.code{background:#e6f4ea}
tr.break td.code{background:#fde8e6}
tr.native td.code{background:#fff4d6}
tr.break td.no{border-left:4px solid #d93025}
tr.native td.no{border-left:4px solid #e8a400}
tr.graph td.no{border-left:4px solid #34a853}
.tag{display:inline-block;border-radius:3px;padding:0 5px;margin:1px 3px 1px 0;color:#fff;font-size:11px}
.t-graph{background:#34a853}.t-break{background:#d93025}.t-native{background:#c98a00}
.t-guards{background:#5f6b7a}.t-recompile{background:#8e44ad}.t-eager{background:#777}
details{display:inline-block;vertical-align:top;margin-right:4px}
details[open]{display:block}
summary{cursor:pointer;list-style:none}
details pre{white-space:pre-wrap;background:#f6f8fa;border:1px solid #e1e4e8;padding:6px;margin:2px 0 6px;
 font-size:12px;max-width:900px}
"""

_JS = """
(function(){
  var errors = [];
  window.addEventListener('error', function(e){ errors.push(String(e.message)); document.body.dataset.errors = errors.join('|'); });
  var data = JSON.parse(document.getElementById('cdynamo-data').textContent);
  var counts = {graph:0, break:0, native:0, guards:0, recompile:0};
  document.querySelectorAll('tr[data-marks]').forEach(function(tr){
    tr.dataset.marks.split(' ').forEach(function(k){ if (k in counts) counts[k]++; });
  });
  var el = document.getElementById('line-counts');
  el.textContent = 'marked lines: ' + counts.graph + ' in graphs, ' + counts.break + ' with breaks, ' +
    counts.native + ' native, ' + counts.guards + ' with guards, ' + counts.recompile + ' with recompiles';
  document.body.dataset.files = String(data.files.length);
  document.body.dataset.ready = '1';
})();
"""


def _esc(s):
    return html.escape(str(s), quote=True)


def _details(tag_class, label, body):
    return (f'<details><summary><span class="tag {tag_class}">{_esc(label)}</span></summary>'
            f'<pre>{_esc(body)}</pre></details>')


def _render_marks(m):
    parts = []
    if m["graph"]:
        ids = sorted(set(m["graph"]), key=lambda s: [int(x) for x in s.split("/")])
        parts.append(f'<span class="tag t-graph" title="captured into graph">graph {" ".join(_esc(i) for i in ids)}</span>')
    for b in m["break"]:
        body = f"[{b['id']}] {b['where']}\n{b['reason']}\nat {b['location']}"
        if b["stack"]:
            body += "\n" + b["stack"]
        parts.append(_details("t-break", f"break [{b['id']}]: {b['reason'][:60]}", body))
    for n in m["native"]:
        body = f"[{n['id']}] {n['where']} runs natively:\n{n['reason']}"
        if n["location"]:
            body += f"\nat {n['location']}"
        if n["stack"]:
            body += "\n" + n["stack"]
        parts.append(_details("t-native", f"native [{n['id']}]: {n['reason'][:60]}", body))
    for g in m["guards"]:
        parts.append(_details("t-guards", f"guards [{g['id']}]: {g['count']}",
                              f"[{g['id']}] {g['where']}: {g['count']} guards\n{g['text']}"))
    for g in m["guard_line"]:
        parts.append(_details("t-guards", f"guarded here [{g['id']}]: {len(g['texts'])}",
                              f"[{g['id']}] {g['where']}: guards installed by this line\n" + "\n".join(g["texts"])))
    for r in m["recompile"]:
        parts.append(_details("t-recompile", f"recompile [{r['id']}]",
                              f"[{r['id']}] {r['where']} recompiled; the guard that failed:\n{r['reason']}"))
    for e in m["eager"]:
        parts.append(f'<span class="tag t-eager">[{_esc(e["id"])}] ran eagerly (stance)</span>')
    return "".join(parts)


def render(records=None, title="cdynamo capture report", include_libraries=False):
    """The report as one HTML string."""
    records = list(_events.records if records is None else records)
    marks, files = _collect(records, include_libraries)
    captured = sum(1 for r in records if r.kind == "captured")
    graphs = sum(1 for r in records if r.kind == "captured" and r.has_graph)
    breaks = sum(1 for r in records if r.graph_break)
    native = sum(1 for r in records if r.kind == "native")
    recompiles = sum(1 for r in records if r.recompile_reason)
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'>", f"<title>{_esc(title)}</title>",
           f"<style>{_CSS}</style></head><body>",
           f"<header><h1>{_esc(title)}</h1><div class='counts'>",
           f"<span id='n-frames'>frames captured: {captured}</span><span id='n-graphs'>graphs: {graphs}</span>",
           f"<span id='n-breaks'>graph breaks: {breaks}</span><span id='n-native'>frames run natively: {native}</span>",
           f"<span id='n-recompiles'>recompiles: {recompiles}</span></div>",
           "<div class='counts'><span id='line-counts'></span></div></header>",
           "<div class='legend'><span class='tag t-graph'>graph [f/c]</span>captured into that graph "
           "<span class='tag t-break'>break</span>graph break here "
           "<span class='tag t-native'>native</span>ran natively "
           "<span class='tag t-guards'>guards</span>guards installed by the frame starting here "
           "<span class='tag t-recompile'>recompile</span>a guard failed: recompiled "
           "(click a tag for details)</div>"]
    if not files:
        out.append("<section><h2>no user source</h2><p style='padding:8px 12px'>cdynamo translated no frame of "
                   "the user's own files.</p></section>")
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                src = f.read().splitlines()
        except OSError:
            continue
        out.append(f"<section data-file='{_esc(path)}'><h2>{_esc(path)}</h2><table class='src'>")
        for i, text in enumerate(src, 1):
            m = marks.lines.get((path, i))
            kinds = []
            if m:
                kinds = [k for k in ("graph", "break", "native", "guards", "recompile") if m[k]]
            cls = next((k for k in ("break", "native", "graph") if k in kinds), "")
            attrs = f" class='{cls}'" if cls else ""
            if kinds:
                attrs += f" data-marks='{' '.join(kinds)}'"
            out.append(f"<tr id='L{i}'{attrs} data-line='{i}'><td class='no'>{i}</td><td class='code'>{_esc(text)}</td>"
                       f"<td class='marks'>{_render_marks(m) if m else ''}</td></tr>")
        out.append("</table></section>")
    data = {"files": files, "records": [{"id": r.compile_id, "kind": r.kind, "function": r.function,
                                         "file": r.filename} for r in records]}
    blob = json.dumps(data).replace("</", "<\\/")
    out.append(f"<script type='application/json' id='cdynamo-data'>{blob}</script>")
    out.append(f"<script>{_JS}</script></body></html>")
    return "".join(out)


def report(path="cdynamo_report.html", include_libraries=False):
    """Write the capture report of this process so far to ``path`` (one static HTML file).
    Library files (site-packages) are left out unless ``include_libraries``."""
    text = render(include_libraries=include_libraries)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return os.path.abspath(path)
