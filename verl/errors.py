"""Errors every layer may raise, kept in a leaf module so that raising one imports nothing.

`ConfigError` is a bad configuration value or input file: the CLI prints its one line (it
names the key, file, line or sample at fault) and exits with code 2.
"""


class ConfigError(ValueError):
    """A bad configuration value; the message names the key and what is allowed."""
