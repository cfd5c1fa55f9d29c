"""The Poolboy scenarios' fixtures (their helpers are in lab.py): the kind their providers create, and one
scenario's objects, with the operator running."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lessor.gateway import Gateway, Resource

from .lab import TEST_CRD, TEST_KIND, Scenario, install_crd


@pytest.fixture(scope="session")
async def claim_test_kind(kube: Gateway) -> Resource:
    """The kind the scenarios' providers create (Poolboy's own test CRD), installed once a session."""
    await install_crd(kube, TEST_CRD)
    return TEST_KIND


@pytest.fixture
async def scenario(kube: Gateway, namespace: str, claim_test_kind: Resource, operator: object) -> AsyncIterator[Scenario]:
    """The objects of one scenario, with the operator running (in this process); removed afterwards."""
    made = Scenario(kube, namespace)
    yield made
    await made.clean()
