"""The one exception type eagle-trt raises for anything a user can fix.

Every message says what failed and the offending value; the hint says what was expected and what to do.
The CLI turns it into a clean two-line message and exit code 1 (see cli.py).
"""

from __future__ import annotations


class EagleTrtError(Exception):
    """A problem the user can act on: bad input, a missing tool, a conflicting option."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


def missing_extra(module: str, extra: str) -> EagleTrtError:
    """The error for an optional dependency that is not installed."""
    return EagleTrtError(
        f"the optional dependency '{module}' is not installed",
        f"install it with: pip install 'eagle-trt[{extra}]'",
    )
