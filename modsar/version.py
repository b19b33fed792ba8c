"""The version, in one place: pyproject.toml reads it (statically), the package re-exports it, rows and
prepared datasets record it."""

__version__ = "0.4.0"
