"""Typed configuration: frozen dataclasses (one module per stage, a docstring per field),
loaded from YAML presets with `key.sub=value` overrides from the command line.

Every default lives in this package; code elsewhere receives a config object and never invents
its own defaults.
"""

from searchrl.config.loading import ConfigError, from_dict, load_config, to_dict

__all__ = ["ConfigError", "from_dict", "load_config", "to_dict"]
