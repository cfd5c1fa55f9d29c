"""JSON pointers (RFC 6901), the one path form used for every error in this package."""


def escape_pointer_token(token: str) -> str:
    """`~` becomes `~0`, `/` becomes `~1` (in that order, so `~1` in a key survives)."""
    return token.replace("~", "~0").replace("/", "~1")
