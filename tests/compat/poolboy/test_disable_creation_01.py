"""Poolboy's test/roles/poolboy_test_simple/tasks/test-disable-creation-01.yaml, in lessor's terms.

A provider with `disableCreation`: its claim waits unbound (lessor says why: `Bound=False`,
`WaitingForPool`) until an admin makes a free-standing handle (no pool, no claim) that matches; the claim
then binds that handle itself and gets its resource.
"""

from __future__ import annotations

from .lab import Scenario, claim_binds_a_free_standing_handle_made_later


async def test_a_claim_of_a_provider_without_creation_binds_the_free_standing_handle_made_later(scenario: Scenario) -> None:
    await claim_binds_a_free_standing_handle_made_later(scenario, "test-disable-creation-01", provider={"disableCreation": True})
