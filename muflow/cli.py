"""``python -m muflow``: argument parsing -> library calls -> exit codes.

Each subcommand lives in ``muflow.commands.<name>`` with two functions,
``add_parser(subparsers)`` and ``run(args) -> int``. Exit codes: 0 success, 2 bad input or
usage (one line naming the problem, no traceback), 1 any other failure, 128 + the signal's
number when SIGINT (130) or SIGTERM (143) stopped it (one line: :mod:`muflow.signals`).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from muflow.exceptions import MuflowInputError

#: Subcommands in the order ``--help`` lists them.
COMMANDS = ("run", "fit", "predict", "gram", "sweep")

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse with muflow's exit code for usage errors and a one-line message."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def set_hint(exc: BaseException, hint: str) -> BaseException:
    """Attach what to do next to an error: :func:`main` prints it on the error's one line."""
    try:
        exc.muflow_hint = hint
    except AttributeError:  # an exception type with __slots__
        pass
    return exc


def one_line(exc: BaseException) -> str:
    """An error's text on one line, with its hint (:func:`set_hint`)."""
    text = " ".join(str(exc).split())
    hint = getattr(exc, "muflow_hint", None)
    return f"{text}; {hint}" if hint else text


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m muflow",
        description=(
            "Train kernel support vector machines with multiplicative, coordinate and "
            "subset solvers, on this machine or a Dask cluster. Each command has its own "
            "--help."
        ),
    )
    from muflow import __version__

    parser.add_argument("--version", action="version", version=f"muflow {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"muflow.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"muflow.commands.{name}":
                continue  # a command that is not part of this build
            raise
        sub = module.add_parser(subparsers)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # the command line as given: a failure's hint repeats it (rerun_command)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return EXIT_USAGE
    import warnings

    from muflow import signals

    shown = warnings.showwarning
    warnings.showwarning = _warning_line(args.command)
    try:
        with signals.stop_on_signals():  # SIGTERM as SIGINT: the way out runs every cleanup
            return int(args._run(args) or EXIT_OK)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as Unix tools do
        import contextlib
        import os

        with contextlib.suppress(OSError, ValueError, AttributeError):  # no fd: nothing to flush
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # exit's flush fails too
        return EXIT_BROKEN_PIPE
    except MuflowInputError as exc:
        print(f"muflow {args.command}: error: {_as_option(one_line(exc), args)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        hint = getattr(exc, "muflow_hint", None)
        print(f"muflow {args.command}: stopped by {signals.signal_name(exc)}"
              f"{'; ' + hint if hint else ''}", file=sys.stderr)
        return signals.exit_code(exc)
    except MemoryError as exc:  # names its knob where muflow allocated it (the row cache)
        text = one_line(exc) or "out of memory"
        hint = "" if "cache_size" in text else (
            "; lower --cache-size (the kernel row cache) or --n-jobs (each process holds its own)")
        print(f"muflow {args.command}: failed: MemoryError: {text}{hint}", file=sys.stderr)
        return EXIT_FAILURE
    except OSError as exc:
        import errno

        hint = ("; free space there, or write elsewhere (--out, --cache-dir): nothing half-written "
                "was kept") if exc.errno == errno.ENOSPC else ""
        print(f"muflow {args.command}: failed: {type(exc).__name__}: {one_line(exc)}{hint}",
              file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # any other failure: one line, exit 1
        print(f"muflow {args.command}: failed: {type(exc).__name__}: {one_line(exc)}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        warnings.showwarning = shown


def _as_option(text: str, args) -> str:
    """An error that opens with a Python parameter's name ("cache_size must be ...") named
    by the command's option instead ("--cache-size must be ..."), where the command has one."""
    name = text.split(" ", 1)[0]
    if name.isidentifier() and not name.startswith("_") and hasattr(args, name) \
            and text.startswith(f"{name} must"):
        return "--" + name.replace("_", "-") + text[len(name):]
    return text


#: The exit status of a command whose output's reader went away (128 + SIGPIPE).
EXIT_BROKEN_PIPE = 141


def _warning_line(command: str):
    """A warning as one line on stderr, ``muflow <command>: warning: ...`` (Python's own
    format adds the source file and line of code, which say nothing to a user). Written,
    not printed: inside a flow that logs its prints (``run``), ``print`` becomes a Prefect
    log record, which the run sends to stdout among its progress lines."""
    def show(message, category, filename, lineno, file=None, line=None):
        text = " ".join(str(message).split())
        stream = file if file is not None else sys.stderr
        stream.write(f"muflow {command}: warning: {text} ({category.__name__})\n")

    return show
