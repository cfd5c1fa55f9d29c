"""Which checkers apply to which kind of object."""

from __future__ import annotations

import re

from lessor.admission.checker import Checker

# Names appear in the skip annotation, which is comma-separated and matched
# case-insensitively, and "all" means every check there.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_RESERVED = "all"


class Registry:
    """Checkers per (API group, kind), in registration order, which is report order."""

    def __init__(self) -> None:
        self._checkers: dict[tuple[str, str], list[Checker]] = {}

    def register(self, group: str, kind: str, checker: Checker) -> None:
        """Add ``checker`` for objects of ``group``/``kind`` (``""`` is the core group).

        Raises ValueError for a badly formed or duplicate name, since either
        would make the skip annotation or the report ambiguous.
        """
        names = [checker.name, *checker.check_names]
        for name in names:
            if not _NAME.fullmatch(name) or name == _RESERVED:
                raise ValueError(f"{name!r} is not a valid checker or check name")
        if len(set(names)) != len(names):
            raise ValueError(f"checker {checker.name} repeats a name: {names}")
        registered = self._checkers.setdefault((group, kind), [])
        taken = {n for other in registered for n in (other.name, *other.check_names)}
        if clash := taken.intersection(names):
            raise ValueError(f"{group}/{kind} already has checks named {sorted(clash)}")
        registered.append(checker)

    def checkers(self, group: str, kind: str) -> tuple[Checker, ...]:
        return tuple(self._checkers.get((group, kind), ()))
