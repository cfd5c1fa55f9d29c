"""What is wrong with a claim's (or pool's) resources, at the field a user edits: one shape for every rule."""

from __future__ import annotations

from dataclasses import dataclass

#: Valid condition reasons, most fundamental first: the condition reports the first that occurs.
REASONS = ("NoResources", "ProviderNotFound", "ProviderAmbiguous", "ProviderInvalid", "ProviderThrottled",
           "Forbidden", "ProviderTemplateError", "InvalidTemplate", "SchemaViolation", "CheckFailed", "InvalidLifespan",
           "UpdateRefused")


@dataclass(frozen=True)
class ResourceError:
    """One problem, at the field to fix; `reason` is one of REASONS."""

    field: str
    message: str
    reason: str
    index: int | None = None

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"
