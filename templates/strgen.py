"""`strgen`: a random string from a pattern, as Poolboy's `'[0-9a-f]{8}' | strgen` writes it.

The pattern language is the one of the StringGenerator library Poolboy uses,
reimplemented here so that it draws from the operating system's randomness
(`secrets`: names and passwords made this way must not be predictable) and
so that the longest string a pattern can make is known before anything is
drawn: a pattern that could exceed the template size limit is refused
whatever it would have drawn this time.

- `[a-z0-9_]`: one character of the class (ranges, and the escapes below
  inside); `\\d`, `\\w`... on their own are classes too; any other character
  stands for itself (`\\[`, `\\{`... escape the special ones).
- `{n}` or `{m:n}` (also `{m,n}`) after a class, a character or a group:
  that many, or between m and n (inclusive).
- `(a|b|c)`: one of the alternatives; `(...)` alone groups.
- `x&y`: x and y drawn, then their characters shuffled together.

Escapes: `\\d` digits, `\\w` letters, digits and `_`, `\\l` letters, `\\u`
upper case, `\\c` lower case, `\\h` hexadecimal digits, `\\o` octal digits,
`\\p` punctuation, `\\s` a space, `\\W` whitespace and punctuation.
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass

from .budget import MAX_SIZE, too_big

_CLASSES = {
    "d": string.digits,
    "w": string.ascii_letters + string.digits + "_",
    "l": string.ascii_letters,
    "u": string.ascii_uppercase,
    "c": string.ascii_lowercase,
    "h": string.hexdigits,
    "o": string.octdigits,
    "p": string.punctuation,
    "s": " ",
    "W": string.whitespace + string.punctuation,
}
_RANDOM = secrets.SystemRandom()
#: Longest pattern read: a pattern is written by hand.
MAX_PATTERN = 4096


class PatternError(ValueError):
    """A pattern strgen cannot read, or one that could make a string beyond the size limit."""


@dataclass(frozen=True)
class _Chars:
    alphabet: str


@dataclass(frozen=True)
class _Sequence:
    items: tuple[_Node, ...]


@dataclass(frozen=True)
class _Choice:
    options: tuple[_Node, ...]


@dataclass(frozen=True)
class _Shuffle:
    parts: tuple[_Node, ...]


@dataclass(frozen=True)
class _Repeat:
    node: _Node
    least: int
    most: int


_Node = _Chars | _Sequence | _Choice | _Shuffle | _Repeat


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.at = 0

    def fail(self, why: str) -> PatternError:
        return PatternError(f"strgen pattern {self.text[:60]!r}: {why} (at character {self.at + 1})")

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        self.at += 1
        return char

    def choice(self) -> _Node:
        options = [self.sequence()]
        while self.peek() == "|":
            self.take()
            options.append(self.sequence())
        return options[0] if len(options) == 1 else _Choice(tuple(options))

    def sequence(self) -> _Node:
        items: list[_Node] = []
        while self.peek() not in ("", "|", ")"):
            if self.peek() == "&":
                self.take()
                if not items or self.peek() in ("", "|", ")", "&"):
                    raise self.fail("'&' needs something on both sides")
                left, right = items.pop(), self.repeated()
                parts = (*left.parts, right) if isinstance(left, _Shuffle) else (left, right)
                items.append(_Shuffle(parts))
                continue
            items.append(self.repeated())
        return items[0] if len(items) == 1 else _Sequence(tuple(items))

    def repeated(self) -> _Node:
        node = self.atom()
        if self.peek() == "{":
            start = self.at
            closing = self.text.find("}", start)
            body = self.text[start + 1:closing] if closing > 0 else ""
            for separator in (":", ","):
                if separator in body:
                    low, _, high = body.partition(separator)
                    break
            else:
                low = high = body
            if not (low.strip().isdigit() and high.strip().isdigit()):
                raise self.fail("a count is {n} or {m:n}")
            least, most = int(low), int(high)
            if least > most:
                raise self.fail(f"the count {{{body}}} goes down")
            if most > MAX_SIZE:
                raise PatternError(too_big(f"strgen's count {most}"))
            self.at = closing + 1
            node = _Repeat(node, least, most)
        return node

    def atom(self) -> _Node:
        char = self.take()
        if char == "(":
            inner = self.choice()
            if self.take() != ")":
                raise self.fail("a '(' is not closed")
            return inner
        if char == "[":
            return self.character_class()
        if char == "\\":
            return self.escape()
        if char in ("{", "}", "]"):
            raise self.fail(f"a {char!r} out of place (write \\{char} for the character)")
        return _Chars(char)

    def escape(self) -> _Chars:
        char = self.take()
        if not char:
            raise self.fail("the pattern ends with '\\'")
        return _Chars(_CLASSES.get(char, char))

    def character_class(self) -> _Chars:
        chars: list[str] = []
        while True:
            char = self.take()
            if not char:
                raise self.fail("a '[' is not closed")
            if char == "]":
                break
            if char == "\\":
                chars.append(self.escape().alphabet)
            elif self.peek() == "-" and self.at + 1 < len(self.text) and self.text[self.at + 1] != "]":
                self.take()
                end = self.take()
                if end == "\\":
                    end = self.take()
                if ord(end) < ord(char):
                    raise self.fail(f"the range {char}-{end} goes down")
                chars.append("".join(map(chr, range(ord(char), ord(end) + 1))))
            else:
                chars.append(char)
        alphabet = "".join(dict.fromkeys("".join(chars)))  # each character once, in order
        if not alphabet:
            raise self.fail("an empty class []")
        return _Chars(alphabet)


def _longest(node: _Node) -> int:
    if isinstance(node, _Chars):
        return 1
    if isinstance(node, _Repeat):
        return node.most * _longest(node.node)
    if isinstance(node, _Choice):
        return max(map(_longest, node.options))
    return sum(map(_longest, node.items if isinstance(node, _Sequence) else node.parts))


def _draw(node: _Node, out: list[str]) -> None:
    if isinstance(node, _Chars):
        out.append(_RANDOM.choice(node.alphabet))
    elif isinstance(node, _Repeat):
        for _ in range(_RANDOM.randint(node.least, node.most)):
            _draw(node.node, out)
    elif isinstance(node, _Choice):
        _draw(_RANDOM.choice(node.options), out)
    elif isinstance(node, _Sequence):
        for item in node.items:
            _draw(item, out)
    else:
        mixed: list[str] = []
        for part in node.parts:
            _draw(part, mixed)
        _RANDOM.shuffle(mixed)
        out.extend(mixed)


def compile_pattern(pattern: str) -> _Node:
    """The pattern read; PatternError when it cannot be, or when its longest string exceeds the size limit."""
    if not isinstance(pattern, str):
        raise PatternError(f"a strgen pattern is a string, not {type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN:
        raise PatternError(f"a strgen pattern is at most {MAX_PATTERN} characters")
    parser = _Parser(pattern)
    node = parser.choice()
    if parser.at < len(pattern):
        raise parser.fail("a ')' without its '('")
    if _longest(node) > MAX_SIZE:
        raise PatternError(too_big("strgen's longest string"))
    return node


def strgen(pattern: str) -> str:
    """A random string matching `pattern`, drawn from the operating system's randomness."""
    out: list[str] = []
    _draw(compile_pattern(pattern), out)
    return "".join(out)
