"""The one error type of the policy I/O layer."""
from __future__ import annotations


class PolicyIOError(ValueError):
    """A checkpoint or an input that policy I/O cannot use; the message says what to do about it."""
