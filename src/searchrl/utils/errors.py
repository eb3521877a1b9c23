"""The one base class of errors a user can fix.

`searchrl` commands end with one line on stderr and exit code 1 for any `SearchRLError` (a bad
value in a config file, a missing or malformed file, an unreachable server, an output that
already exists; 2 for the subclasses that blame the command line itself); anything else is a
bug and ends with exit code 70 (see `searchrl.cli.boundary`). Each
stage keeps its own subclass (ConfigError, DataError, CorpusError, RetrievalError, ...) so code
can still catch exactly what it expects.
"""

from __future__ import annotations


class SearchRLError(Exception):
    """A failure caused by the input or the environment, with a message that names the
    offending file, key or value and, where there is one, the fix."""

    exit_code = 1
    """The command's exit code; a subclass for mistakes on the command line itself (a usage
    error, such as a malformed `key=value`) says 2."""


class OutputError(SearchRLError):
    """An output path cannot be written: it exists (and `--force` was not given), or its
    parent is missing, not a directory, or not writable."""
