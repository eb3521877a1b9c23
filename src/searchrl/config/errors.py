"""The config error types, apart so that `checks` and `loading` can both raise them."""

from __future__ import annotations

from searchrl.utils.errors import SearchRLError


class ConfigError(SearchRLError, ValueError):
    """A config file or override names an unknown key, a value of the wrong type, or a value
    outside the field's range or choices; the message names the key."""


class OverrideError(ConfigError):
    """A setting typed on the command line (a `key=value` override or an option such as
    `--seed`) is malformed, unknown or out of range: a usage error, so the command exits with
    2 like any other bad option, where a bad config *file* exits with 1."""

    exit_code = 2


class MissingInput(SearchRLError):
    """A setting names a file or folder that is not there. The surroundings are wrong, not
    the command line, so it exits with 1 wherever the setting was given (as a missing
    `data.train_files` does), and it is not a ConfigError that an override could be blamed for."""
