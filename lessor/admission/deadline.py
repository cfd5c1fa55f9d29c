"""How long the checks of one request may take.

When a webhook overruns its ``timeoutSeconds`` the API server abandons the
call and the user sees only "context deadline exceeded", losing the results
of every check that did finish. So the framework stops its checks earlier,
by a margin that covers the network, TLS and serialising the answer, and
always answers itself.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_WEBHOOK_TIMEOUT = 30.0
"""The largest ``timeoutSeconds`` the API server accepts for a webhook."""


@dataclass(frozen=True)
class Deadline:
    webhook_timeout: float = 10.0
    """The webhook configuration's ``timeoutSeconds`` (Kubernetes' default is 10)."""
    margin: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.webhook_timeout <= MAX_WEBHOOK_TIMEOUT:
            raise ValueError(f"webhook timeout must be in (0, {MAX_WEBHOOK_TIMEOUT:g}] s")
        if not 0 < self.margin < self.webhook_timeout:
            raise ValueError("margin must be positive and shorter than the webhook timeout")

    @property
    def seconds(self) -> float:
        """The time the checks get, counted from when they start."""
        return self.webhook_timeout - self.margin
