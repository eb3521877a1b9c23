"""Typed configuration: frozen dataclasses (one module per stage, a docstring per field),
loaded from YAML presets with `key.sub=value` overrides from the command line.

Every default lives in this package; code elsewhere receives a config object and never invents
its own defaults. Every field's valid range or choices are declared in its type and checked
when a config is loaded (`searchrl.config.checks` says how to declare them).
"""

from searchrl.config.checks import check_config
from searchrl.config.errors import ConfigError
from searchrl.config.loading import from_dict, load_config, to_dict

__all__ = ["ConfigError", "check_config", "from_dict", "load_config", "to_dict"]
