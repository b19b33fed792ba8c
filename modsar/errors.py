"""User-facing errors: the CLI prints their message as one line and exits non-zero."""


class ModsarError(Exception):
    """A problem with the user's input (file, name, option) that they can fix; the message says how."""
