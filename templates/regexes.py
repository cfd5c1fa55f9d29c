"""Regular expressions written by users, run by RE2: linear in the text, whatever the pattern.

Python's `re` backtracks: `^(a+)+$` against thirty `a`s and a `!` takes
minutes and holds the interpreter (and so the event loop) all that time.
RE2 matches in time linear in the text and never backtracks; it is also the
dialect of the Kubernetes API server's own CRD `pattern`s, so a pattern
means the same in a CRD and in a provider. What RE2 leaves out:
look-ahead and look-behind, back-references, possessive quantifiers and
atomic groups; `\\Z` is written `\\z`. A pattern that uses them does not
compile, and the error names it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

#: RE2's compiled-program memory cap per pattern (its default is 8 MiB).
MAX_PROGRAM_BYTES = 8 << 20


class RegexError(ValueError):
    """A pattern RE2 cannot compile; the message quotes the pattern and says why."""


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # the error is ours to report, not RE2's to print on stderr
    options.max_mem = MAX_PROGRAM_BYTES
    return options


_OPTIONS = _options()

Regex = Any  # re2's compiled pattern: `search`, `match` and `fullmatch` as in `re`


@lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> Regex:
    """Compile `pattern` with RE2 (cached); RegexError when it is not in RE2's dialect."""
    if not isinstance(pattern, str):
        raise RegexError(f"a regular expression must be a string, not {type(pattern).__name__}")
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as error:
        reason = error.args[0] if error.args else "cannot compile"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise RegexError(f"invalid regular expression {pattern!r} (RE2 syntax): {reason}") from None


def regex_errors(field: str, pattern: Any) -> list[str]:
    """`[]` when `pattern` compiles, else one `field: message` (for a condition or a denial)."""
    try:
        compile_regex(pattern)
    except RegexError as error:
        return [f"{field}: {error}"]
    return []
