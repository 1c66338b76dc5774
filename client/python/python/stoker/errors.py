"""Stoker's exceptions: one hierarchy under ``StokerError``. The extension
raises ``ConfigError`` for a setting it refuses before any work (a
transform, field, view, dtype or address, say) and for a configuration the
workers or the dataset refuse; other failures are ``StokerError``."""

from ._stoker import StokerError

__all__ = ["ConfigError", "StokerError"]


class ConfigError(StokerError, ValueError):
    """A setting that cannot work (an argument, a transform, a field, a
    worker address), refused before any work, naming what is wrong. It is
    a ``ValueError`` too, for code that catches those."""
