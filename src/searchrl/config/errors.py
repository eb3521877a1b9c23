"""The config error type, apart so that `checks` and `loading` can both raise it."""

from __future__ import annotations

from searchrl.utils.errors import SearchRLError


class ConfigError(SearchRLError, ValueError):
    """A config file or override names an unknown key, a value of the wrong type, or a value
    outside the field's range or choices; the message names the key."""
