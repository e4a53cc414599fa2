"""Errors that end a gbfix run with exit code 2 and a one-line message."""


class GbfixError(Exception):
    """A usage, input or entry problem: reported as one line, exit code 2."""


class EntryError(GbfixError):
    """The user's entry could not be run to completion (crash, timeout, non-zero exit)."""
