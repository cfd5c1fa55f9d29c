"""The ``preflight.lessor.dev/skip`` annotation: the user's escape hatch.

It lets someone whose object is blocked by a broken or overcautious check
proceed, while leaving a visible trace: every skipped check, and every name
that matched nothing (most likely a typo), comes back as a warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lessor.admission.checker import Checker
from lessor.model.labels import SKIP_PREFLIGHT
from lessor.model.views import Meta

SKIP_ANNOTATION = SKIP_PREFLIGHT
SKIP_ALL = "all"


@dataclass(frozen=True)
class Selected:
    """A checker and the checks of it that are to run, in declared order."""

    checker: Checker
    check_names: tuple[str, ...]


@dataclass(frozen=True)
class Selection:
    selected: tuple[Selected, ...]
    warnings: tuple[str, ...]


def requested_skips(obj: Mapping[str, Any] | None) -> list[str]:
    """The names listed in the annotation: lowercased, whitespace dropped, empty entries ignored."""
    value = Meta.of(obj).annotations.get(SKIP_ANNOTATION) or ""
    names = ("".join(part.split()).lower() for part in value.split(","))
    return list(dict.fromkeys(name for name in names if name))


def select(checkers: Sequence[Checker], skips: Sequence[str]) -> Selection:
    """Drop the skipped checks; a checker left with none is not set up at all."""
    warnings: list[str] = []
    skip_all = list(skips) == [SKIP_ALL]
    wanted = set() if skip_all else set(skips) - {SKIP_ALL}
    if SKIP_ALL in skips and not skip_all:
        warnings.append(f"{SKIP_ANNOTATION}: '{SKIP_ALL}' only counts on its own; ignored")
    known = {name for checker in checkers for name in checker.check_names}
    selected: list[Selected] = []
    for checker in checkers:
        kept: list[str] = []
        for name in checker.check_names:
            if skip_all or name in wanted:
                warnings.append(f"check {name} skipped by annotation {SKIP_ANNOTATION}")
            else:
                kept.append(name)
        if kept:
            selected.append(Selected(checker, tuple(kept)))
    warnings.extend(
        f"{SKIP_ANNOTATION}: no check named '{name}'" for name in skips if name in wanted - known
    )
    return Selection(tuple(selected), tuple(warnings))
