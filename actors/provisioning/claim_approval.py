"""Approval of claims: a provider may require that someone approves each claim before it gets a handle.

Poolboy's `approval` (`spec.approval.required`, `pendingMessage`), for claims in
lessor's form: a claim that uses such a provider gets `status.approval`
`{state: pending, message}` and waits (Bound False, `ApprovalPending`) until
someone allowed to patch `resourceclaims/status` sets `state` to `approved`
(then it binds as any claim) or `rejected` (it stays unbound,
`ApprovalRejected`). Approval gates binding only: a claim that already has a
handle keeps it whatever the state says later, as in Poolboy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lessor.model.fields import mapping_at

from .provider import Provider

PENDING = "pending"
APPROVED = "approved"
REJECTED = "rejected"
DEFAULT_PENDING_MESSAGE = "Approval pending."
APPROVAL_PENDING = "ApprovalPending"
APPROVAL_REJECTED = "ApprovalRejected"


@dataclass(frozen=True, slots=True)
class ApprovalWait:
    """Why a claim may not bind yet; `initial`: the `status.approval` to write when the claim has none."""

    reason: str
    message: str
    initial: dict[str, str] | None = None


def approval_wait(claim: Mapping[str, Any], providers: Iterable[Provider | None]) -> ApprovalWait | None:
    """None when no provider of the claim requires approval, or it was approved."""
    requiring = [p for p in providers if p is not None and _approval(p).get("required") is True]
    if not requiring:
        return None
    current = mapping_at(mapping_at(claim, "status"), "approval")
    state = current.get("state")
    if state == APPROVED:
        return None
    names = ", ".join(sorted({p.name for p in requiring}))
    if state == REJECTED:
        why = current.get("message") or "no reason given"
        return ApprovalWait(APPROVAL_REJECTED, f"status.approval.state is rejected ({why}); "
                            f"ResourceProvider {names} requires approval, so the claim gets no handle")
    pending = str(_approval(requiring[0]).get("pendingMessage") or DEFAULT_PENDING_MESSAGE)
    name = str(mapping_at(claim, "metadata").get("name") or "NAME")
    return ApprovalWait(
        APPROVAL_PENDING,
        f"{current.get('message') or pending} ResourceProvider {names} requires approval; someone allowed to "
        f"patch resourceclaims/status approves with: kubectl patch rclaim {name} --subresource=status "
        "--type=merge -p '{\"status\":{\"approval\":{\"state\":\"approved\"}}}'",
        initial=None if state == PENDING else {"state": PENDING, "message": pending})


def approval_state(claim: Mapping[str, Any] | None) -> Any:
    """What `status.approval.state` says (a change of it is news to the claim)."""
    return mapping_at(mapping_at(claim, "status"), "approval").get("state")


def _approval(provider: Provider) -> Mapping[str, Any]:
    return mapping_at(mapping_at(provider.definition, "spec"), "approval")
