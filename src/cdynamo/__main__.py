"""python -m cdynamo run [--report out.html] [--trace DIR] [--quiet] script.py [args...]
python -m cdynamo run [options] -m package.module [args...]

Installs cdynamo (every torch.compile in the program goes through it), runs the script as
``python script.py args`` would (sys.argv, ``__main__``, sys.path[0], exit code), and at
exit prints a summary to stderr: frames captured and run natively with reasons, graphs,
graph breaks, recompiles with reasons, time in the frontend and in the backends. With
``--report`` it also writes the HTML capture report; with ``--trace`` structured trace
records for tlparse (as TORCH_TRACE / CDYNAMO_TRACE do).
"""
import argparse
import os
import runpy
import sys
import traceback

USAGE = "python -m cdynamo run [--report FILE] [--trace DIR] [--quiet] (script.py | -m module) [args...]"


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m cdynamo", usage=USAGE)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", usage=USAGE, help="run a script with torch.compile going through cdynamo")
    run.add_argument("--report", metavar="FILE", help="write the HTML capture report here at exit")
    run.add_argument("--trace", metavar="DIR", help="write structured trace records (tlparse) into DIR")
    run.add_argument("--quiet", action="store_true", help="no summary at exit")
    run.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m does")
    run.add_argument("target", nargs=argparse.REMAINDER, help="script.py [args...]")
    args = p.parse_args(argv)
    if args.module is None and not args.target:
        p.error("run: a script (or -m module) is required")
    return args


def _exit_code(e):
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _print_exception(e):
    # As the interpreter does, without this runner's own frames.
    tb = e.__traceback__
    here = os.path.abspath(__file__)
    while tb is not None and (os.path.abspath(tb.tb_frame.f_code.co_filename) in (here, runpy.__file__)):
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb)


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.trace:
        os.environ.setdefault("CDYNAMO_TRACE", args.trace)
    import cdynamo
    from cdynamo import _trace

    if args.trace:
        _trace.enable(args.trace)
    cdynamo.install()
    code = 0
    try:
        if args.module:
            sys.argv = [args.module] + args.target
            runpy.run_module(args.module, run_name="__main__", alter_sys=True)
        else:
            script = args.target[0]
            sys.argv = list(args.target)
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = _exit_code(e)
    except KeyboardInterrupt:
        code = 130
        print("KeyboardInterrupt", file=sys.stderr)
    except BaseException as e:  # noqa: BLE001 - the script's own error, reported as python would
        _print_exception(e)
        code = 1
    finally:
        sys.stdout.flush()
        if not args.quiet:
            print(cdynamo.summary(f"cdynamo summary: {' '.join(sys.argv) or args.module}"), file=sys.stderr)
        if args.report:
            path = cdynamo.report(args.report)
            print(f"cdynamo: capture report written to {path}", file=sys.stderr)
        if _trace.enabled():
            _trace.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
