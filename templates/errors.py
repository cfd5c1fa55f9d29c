"""The one error type that rendering and checks raise, so callers catch one thing."""

from __future__ import annotations

from jinja2 import TemplateSyntaxError, UndefinedError
from jinja2.exceptions import SecurityError


class TemplateError(Exception):
    """A template string that could not be rendered or evaluated.

    `path` is the JSON pointer (RFC 6901) of the failing string inside the
    object being rendered, so a condition can name the field to fix.
    """

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message, path)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class NotOffered(TemplateSyntaxError):
    """A template uses a function, filter or test lessor's templates lack: found before it runs, so that a
    provider using one is refused rather than failing on each claim (vocabulary.py)."""


def describe(error: Exception) -> str:
    """A one-line message for anything raised inside the sandbox."""
    if isinstance(error, NotOffered):
        return f"line {error.lineno}: {error.message}"
    if isinstance(error, TemplateSyntaxError):
        return f"syntax error on line {error.lineno}: {error.message}"
    if isinstance(error, SecurityError):
        return f"refused by the sandbox: {error}"
    if isinstance(error, UndefinedError):
        return f"undefined: {error}"
    return str(error) or type(error).__name__
