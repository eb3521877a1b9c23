"""The one error boundary of the `searchrl` command.

Every subcommand runs inside `SearchRLGroup.main`, which turns whatever ends it into one line on
stderr and an exit code:

    0    success
    1    bad input or environment: a SearchRLError (bad value in a config file, missing or
         malformed file, unreachable server, existing output without --force) or an OSError
         (permission denied, disk full, ...)
    2    usage: an unknown option, a missing required option, a value of the wrong form, and
         any bad `key=value` override (a SearchRLError whose `exit_code` is 2)
    70   crash: any other exception, i.e. a bug; the line says how to see the traceback
    130  interrupted (Ctrl-C)

Tracebacks are printed only with `--debug` (anywhere on the command line) or SEARCHRL_DEBUG=1.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from searchrl.utils.errors import SearchRLError

EXIT_INPUT = 1
EXIT_USAGE = 2
EXIT_CRASH = 70
EXIT_INTERRUPTED = 130
DEBUG_FLAG = "--debug"
DEBUG_ENV = "SEARCHRL_DEBUG"


def one_line(text: str) -> str:
    """Collapse a message onto one line (messages of libraries may span several)."""
    return " ".join(str(text).split())


def _os_message(err: OSError) -> str:
    reason = err.strerror or type(err).__name__
    if err.errno == errno.ENOSPC:
        reason = "no space left on device"
    where = f": {err.filename}" if err.filename else ""
    return f"{reason}{where}"


def _emit(message: str) -> None:
    typer.echo(f"error: {one_line(message)}", err=True)


def _usage(err: Any) -> int:
    """A click usage error as one line plus where to look for help."""
    if type(err).__name__ == "NoArgsIsHelpError":
        err.show()
        return int(err.exit_code)
    ctx = getattr(err, "ctx", None)
    hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
    _emit(f"{err.format_message()}{hint}")
    return int(err.exit_code)


def run_guarded(command: Callable[[], Any], debug: bool) -> int:
    """Run `command` and map how it ended to an exit code (see the module docstring)."""
    try:
        result = command()
    except typer.Exit as err:
        return int(err.exit_code)
    except typer.Abort:
        _emit("aborted")
        return EXIT_INPUT
    except KeyboardInterrupt:
        _emit("interrupted")
        return EXIT_INTERRUPTED
    except typer.TyperException as err:  # click's usage and parameter errors
        if debug:
            traceback.print_exc()
        return _usage(err)
    except SearchRLError as err:
        if debug:
            traceback.print_exc()
        _emit(str(err) or type(err).__name__)
        return int(getattr(err, "exit_code", EXIT_INPUT))
    except OSError as err:
        if debug:
            traceback.print_exc()
        _emit(_os_message(err))
        return EXIT_INPUT
    except MemoryError:
        _emit("out of memory; try smaller batches or a smaller model")
        return EXIT_INPUT
    except Exception as err:
        if debug:
            traceback.print_exc()
        hint = "" if debug else f"; rerun with {DEBUG_FLAG} or {DEBUG_ENV}=1 for the traceback"
        _emit(f"internal error (a bug): {type(err).__name__}: {err}{hint}")
        return EXIT_CRASH
    return result if isinstance(result, int) else 0


def split_debug(args: Sequence[str]) -> tuple[list[str], bool]:
    """Remove `--debug` (anywhere before a `--`) and say whether debugging is on."""
    args = list(args)
    end = args.index("--") if "--" in args else len(args)
    flagged = DEBUG_FLAG in args[:end]
    kept = [a for a in args[:end] if a != DEBUG_FLAG] + args[end:]
    env = os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")
    return kept, flagged or env


class SearchRLGroup(TyperGroup):
    """The top-level command group; its `main` is the error boundary."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Parse and run a command under `run_guarded`; exits unless `standalone_mode` is
        False, in which case the exit code is returned."""
        kept, debug = split_debug(sys.argv[1:] if args is None else args)
        code = run_guarded(
            lambda: super(SearchRLGroup, self).main(
                args=kept,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            ),
            debug,
        )
        sys.stdout.flush()
        if standalone_mode:
            sys.exit(code)
        return code
