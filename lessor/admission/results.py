"""What a check reports: a verdict, the causes behind it, and warnings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    """One reason for a denial or an internal error.

    ``field`` is the path of the offending field as users write it
    (``spec.selector``), so clients can point at it; empty when the cause is
    not about one field.
    """

    message: str
    field: str = ""


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check.

    The invariants below keep every rejection explainable: a denial or an
    internal error always carries at least one cause, and an admitted result
    carries none (a remark on an admitted object is a warning).
    """

    allowed: bool = True
    internal_error: bool = False
    causes: tuple[Cause, ...] = ()
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.allowed and (self.internal_error or self.causes):
            raise ValueError("an allowed result has neither causes nor an internal error")
        if not self.allowed and not self.causes:
            raise ValueError("a denial or internal error needs at least one cause")

    @classmethod
    def ok(cls, *warnings: str) -> CheckResult:
        return cls(warnings=warnings)

    @classmethod
    def deny(cls, *causes: Cause, warnings: tuple[str, ...] = ()) -> CheckResult:
        return cls(allowed=False, causes=causes, warnings=warnings)

    @classmethod
    def error(cls, *causes: Cause) -> CheckResult:
        """The check could not decide, e.g. a lookup failed."""
        return cls(allowed=False, internal_error=True, causes=causes)


@dataclass(frozen=True)
class Report:
    """A result and who produced it: a check, or a checker whose set-up failed."""

    name: str
    result: CheckResult
