"""cdynamo vs torch._dynamo benchmarks. `make bench` / `make bench-quick`.

    .venv/bin/python benchmarks/run.py [--quick] [--only overhead,guards,tracing,memory] [--out PATH]

Every figure is measured in this one process, cdynamo and torch._dynamo on the same
function with the same backend, interleaved; results go to benchmarks/RESULTS.md.
"""
import argparse
import datetime
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402

SECTIONS = ["overhead", "guards", "tracing", "memory"]


def cpu_busy_s():
    """Machine-wide busy CPU seconds (user+nice+system+irq+softirq+steal) from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def summary_line(targets):
    """The verdict of this run, from its own targets (never from hand-written text)."""
    missed = [n for n, _, ok, _ in targets if ok is False]
    unknown = [n for n, _, ok, _ in targets if ok is None]
    if not missed and not unknown:
        return f"**All {len(targets)} targets met in this run.**"
    parts = []
    if missed:
        parts.append(f"**{len(missed)} of {len(targets)} targets not met in this run:** " + "; ".join(missed) + ".")
    if unknown:
        parts.append(f"{len(unknown)} not measured (n/a): " + "; ".join(unknown) + ".")
    return " ".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and smaller workloads (< 3 min)")
    ap.add_argument("--only", default="", help="comma-separated sections: " + ",".join(SECTIONS))
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="markdown output path")
    args = ap.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()] or SECTIONS
    for s in only:
        if s not in SECTIONS:
            ap.error(f"unknown section {s!r}; choose from {SECTIONS}")

    import importlib

    t_start = time.time()
    cpu0, own0 = cpu_busy_s(), sum(os.times()[:4])
    info = common.machine_info()
    common.log(f"cdynamo benchmarks ({'quick' if args.quick else 'full'}): {info['cpu']}, {info['nproc']} cpus, "
               f"torch {info['torch']}")
    common.configure()
    common.warm_up()
    sections = []
    for name in only:
        common.log(f"== {name}")
        t0 = time.time()
        mod = importlib.import_module(name)
        sec = mod.run(args.quick)
        sec.elapsed = time.time() - t0
        common.log(f"   ({sec.elapsed:.1f} s)")
        sections.append(sec)
        common.reset_all()
    total = time.time() - t_start
    other_load = (cpu_busy_s() - cpu0 - (sum(os.times()[:4]) - own0)) / max(total, 1e-9)

    cmd = "make bench-quick" if args.quick else "make bench"
    argv_str = " ".join(["benchmarks/run.py"] + (argv if argv is not None else sys.argv[1:]))
    md = [
        "# cdynamo vs torch._dynamo: benchmark results",
        "",
        f"- Command: `{cmd}` (i.e. `.venv/bin/python {argv_str}`)"
        + (" — **quick mode**: fewer repetitions and smaller tracing workloads, see each section" if args.quick else ""),
        f"- Date: {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
        f"- Machine: {info['cpu']}, {info['nproc']} CPUs (torch intra-op threads: {info['torch_threads']}), "
        f"{info['platform']}",
        f"- Software: Python {info['python']}, torch {info['torch']}, cdynamo {info['cdynamo']}",
        f"- Sections: {', '.join(only)}; total wall time {total:.0f} s; CPU used by other processes during the "
        f"run: {max(other_load, 0):.2f} CPUs on average (from /proc/stat; the machine is shared, so single figures "
        "are noisy — compare ratios, and rerun before drawing fine conclusions)",
        "- Both frontends run with static shapes (`dynamic=False`, torch._dynamo "
        "`automatic_dynamic_shapes=False`) and the same backend object kind; a workload that cdynamo "
        "did not capture is reported as *not captured (reason)* and left out of the ratios.",
        "",
    ]
    targets = [t for s in sections for t in s.targets]
    if targets:
        md += ["## Targets", "", summary_line(targets), "", common.table(
            ["target", "measured (this run)", "status"],
            [[n, m, "met" if ok else ("not met" if ok is False else "n/a") + (f" ({common.reason_cell(note, 100)})" if note else "")]
             for n, m, ok, note in targets]), ""]
    for s in sections:
        md.append(s.markdown())
    analysis = os.path.join(HERE, "ANALYSIS.md")
    if os.path.exists(analysis):
        with open(analysis) as f:
            md += ["", f.read()]
    with open(args.out, "w") as f:
        f.write("\n".join(md))
    if targets:
        common.log(summary_line(targets).replace("**", ""))
    common.log(f"wrote {args.out} ({total:.0f} s)")


if __name__ == "__main__":
    main()
