"""JSON pointers (RFC 6901), the one path form used for every error in this package."""

from collections.abc import Iterator, Mapping
from typing import Any


def escape_pointer_token(token: str) -> str:
    """`~` becomes `~0`, `/` becomes `~1` (in that order, so `~1` in a key survives)."""
    return token.replace("~", "~0").replace("/", "~1")


def strings_in(value: Any, pointer: str = "") -> Iterator[tuple[str, str]]:
    """Every string inside a JSON value, with its JSON pointer: where templates hide."""
    if isinstance(value, str):
        yield pointer, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from strings_in(item, f"{pointer}/{escape_pointer_token(str(key))}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from strings_in(item, f"{pointer}/{index}")
