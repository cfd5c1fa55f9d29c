"""Kubernetes LabelSelector semantics on plain JSON dicts.

A selector is validated and compiled once (`parse_selector`), then matched
many times (`Selector.matches`). Validation follows the API server, so a
selector the operator accepts is one the cluster would accept, and every
error names the field that holds it (`spec.selector.matchExpressions[1].values`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Operator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


_NEEDS_VALUES = frozenset({Operator.IN, Operator.NOT_IN})

MAX_REQUIREMENTS = 32
"""Requirements in one selector at most, matchLabels and matchExpressions together: Kubernetes sets none,
and a selector of 10,000 labels (118 KB) was stored and matched against every exporter."""
MAX_VALUES = 256
"""Values of one `In`/`NotIn` expression at most."""
_IN, _NOT_IN, _EXISTS = Operator.IN, Operator.NOT_IN, Operator.EXISTS

_NAME = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")


@dataclass(frozen=True, slots=True)
class Cause:
    """One validation failure: the field path and what is wrong with it."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class SelectorError(ValueError):
    """A selector the API server would reject; `causes` lists every failure, as a webhook denial does."""

    def __init__(self, causes: Sequence[Cause]) -> None:
        self.causes = tuple(causes)
        super().__init__("; ".join(str(cause) for cause in self.causes))

    @property
    def field(self) -> str:
        return self.causes[0].field


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def __str__(self) -> str:
        values = ",".join(sorted(self.values))
        match self.operator:
            case Operator.IN if len(self.values) == 1:
                return f"{self.key}={values}"
            case Operator.IN:
                return f"{self.key} in ({values})"
            case Operator.NOT_IN:
                return f"{self.key} notin ({values})"
            case Operator.EXISTS:
                return self.key
            case _:
                return f"!{self.key}"


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled selector: all requirements must hold (matchLabels become single-valued `In`).

    `nothing` is the nil selector, which matches no object; the empty selector
    (no requirements) matches every object.
    """

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        """True when the selector matches everything, which callers may want to refuse."""
        return not self.requirements and not self.nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        labels = labels or {}
        # Inlined rather than one call per requirement: this runs for every candidate
        # of every routed change.
        for requirement in self.requirements:
            value = labels.get(requirement.key)
            operator = requirement.operator
            if operator is _IN:
                if value not in requirement.values:
                    return False
            elif operator is _NOT_IN:
                if value in requirement.values:
                    return False
            elif operator is _EXISTS:
                if value is None:
                    return False
            elif value is not None:  # DoesNotExist
                return False
        return True

    def __str__(self) -> str:
        if self.nothing:
            return "<none>"
        return ",".join(str(requirement) for requirement in self.requirements)


EVERYTHING = Selector()
NOTHING = Selector(nothing=True)


def parse_selector(raw: Any, field: str = "selector") -> Selector:
    """Validate and compile a LabelSelector dict; None (a nil selector) compiles to NOTHING."""
    if raw is None:
        return NOTHING
    if not isinstance(raw, Mapping):
        raise SelectorError([Cause(field, "must be an object with matchLabels and/or matchExpressions")])
    causes: list[Cause] = []
    for unknown in sorted(set(raw) - {"matchLabels", "matchExpressions"}):
        causes.append(Cause(f"{field}.{unknown}", "unknown field"))
    count = sum(len(part) for part in (raw.get("matchLabels"), raw.get("matchExpressions"))
                if isinstance(part, Mapping | list))
    if count > MAX_REQUIREMENTS:  # judged before each one is, so that a huge selector costs little
        raise SelectorError([Cause(field, f"{count} requirements (matchLabels and matchExpressions together), "
                                          f"more than lessor's limit of {MAX_REQUIREMENTS}")])
    requirements = _match_labels(raw.get("matchLabels"), f"{field}.matchLabels", causes)
    requirements += _match_expressions(raw.get("matchExpressions"), f"{field}.matchExpressions", causes)
    if causes:
        raise SelectorError(causes)
    return Selector(tuple(requirements))


def _match_labels(raw: Any, field: str, causes: list[Cause]) -> list[Requirement]:
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        causes.append(Cause(field, "must be a map of label keys to values"))
        return []
    requirements = []
    for key, value in raw.items():
        key_problem = _key_problem(key)
        if key_problem:
            causes.append(Cause(field, f"invalid label key {key!r}: {key_problem}"))
            continue
        value_problem = _value_problem(value)
        if value_problem:
            causes.append(Cause(f"{field}.{key}", f"invalid label value {value!r}: {value_problem}"))
            continue
        requirements.append(Requirement(key, Operator.IN, frozenset((value,))))
    return requirements


def _match_expressions(raw: Any, field: str, causes: list[Cause]) -> list[Requirement]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        causes.append(Cause(field, "must be a list of expressions"))
        return []
    requirements = []
    for index, expression in enumerate(raw):
        requirement = _expression(expression, f"{field}[{index}]", causes)
        if requirement is not None:
            requirements.append(requirement)
    return requirements


def _expression(raw: Any, field: str, causes: list[Cause]) -> Requirement | None:
    if not isinstance(raw, Mapping):
        causes.append(Cause(field, "must be an object with key, operator and values"))
        return None
    before = len(causes)
    for unknown in sorted(set(raw) - {"key", "operator", "values"}):
        causes.append(Cause(f"{field}.{unknown}", "unknown field"))
    key: Any = raw.get("key")
    if key is None or key == "":
        causes.append(Cause(f"{field}.key", "required"))
    else:
        problem = _key_problem(key)
        if problem:
            causes.append(Cause(f"{field}.key", f"invalid label key {key!r}: {problem}"))
    operator = _operator(raw.get("operator"), f"{field}.operator", causes)
    values = _values(raw.get("values"), operator, f"{field}.values", causes)
    if len(causes) > before or operator is None:
        return None
    return Requirement(key, operator, values)


def _operator(raw: Any, field: str, causes: list[Cause]) -> Operator | None:
    if raw is None or raw == "":
        causes.append(Cause(field, "required"))
        return None
    try:
        return Operator(raw)
    except ValueError:
        supported = ", ".join(f'"{operator.value}"' for operator in Operator)
        causes.append(Cause(field, f"unsupported operator {raw!r}: supported values: {supported}"))
        return None


def _values(raw: Any, operator: Operator | None, field: str, causes: list[Cause]) -> frozenset[str]:
    if raw is not None and not isinstance(raw, list):
        causes.append(Cause(field, "must be a list of strings"))
        return frozenset()
    values = raw or []
    if len(values) > MAX_VALUES:
        causes.append(Cause(field, f"{len(values)} values, more than lessor's limit of {MAX_VALUES}"))
        return frozenset()
    if operator in _NEEDS_VALUES and not values:
        causes.append(Cause(field, f"must be non-empty when operator is {operator.value!r}"))
    elif operator is not None and operator not in _NEEDS_VALUES and values:
        causes.append(Cause(field, f"must be empty when operator is {operator.value!r}"))
    for index, value in enumerate(values):
        problem = _value_problem(value)
        if problem:
            causes.append(Cause(f"{field}[{index}]", f"invalid label value {value!r}: {problem}"))
    return frozenset(values)


def _key_problem(key: Any) -> str | None:
    """Why `key` is not a qualified name (optional DNS-subdomain prefix, '/', name), or None."""
    if not isinstance(key, str):
        return "must be a string"
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
            return "prefix part must be a lowercase DNS subdomain of at most 253 characters"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63 or not _NAME.fullmatch(name):
        return (
            "name part must be at most 63 characters, alphanumeric, '-', '_' or '.', "
            "starting and ending with an alphanumeric character"
        )
    return None


def _value_problem(value: Any) -> str | None:
    """Why `value` is not a valid label value, or None."""
    if not isinstance(value, str):
        return "must be a string"
    if value and (len(value) > 63 or not _NAME.fullmatch(value)):
        return (
            "must be at most 63 characters, alphanumeric, '-', '_' or '.', "
            "starting and ending with an alphanumeric character"
        )
    return None


def format_selector(raw: Any) -> str:
    """A LabelSelector as `kubectl` prints one (`metav1.FormatLabelSelector`): `board=rpi4,env in (lab)`.

    matchLabels are `key=value`, expressions `key in (a,b)`, `key notin (a)`, `key` (Exists) and
    `!key` (DoesNotExist); sorted by key, values sorted, as the API machinery sorts them. Where kubectl
    prints `<none>` for both, an empty selector (it matches everything) is `<all>` and a missing one
    (it matches nothing) `<none>`; one that does not parse is `<invalid>`.
    """
    if raw is None:
        return "<none>"
    try:
        parse_selector(raw)
    except SelectorError:
        return "<invalid>"
    terms: list[tuple[str, str]] = [(key, f"{key}={value}") for key, value in (raw.get("matchLabels") or {}).items()]
    for expression in raw.get("matchExpressions") or ():
        key, values = expression["key"], ",".join(sorted(expression.get("values") or ()))
        match expression["operator"]:
            case Operator.IN:
                terms.append((key, f"{key} in ({values})"))
            case Operator.NOT_IN:
                terms.append((key, f"{key} notin ({values})"))
            case Operator.EXISTS:
                terms.append((key, key))
            case _:
                terms.append((key, f"!{key}"))
    return ",".join(term for _, term in sorted(terms, key=lambda pair: pair[0])) or "<all>"
