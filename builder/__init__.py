"""Builder for verified GPU kernel archives."""

__version__ = "0.1.0"
