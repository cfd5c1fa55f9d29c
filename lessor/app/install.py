"""`lessor install`: the CRDs, established, the operator's namespace, and the API server's leader fence."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

from lessor.shipped import manifests
from lessor.gateway import ApiError, Gateway
from lessor.gateway.resources import CRD, NAMESPACE
from lessor.leadership.election import FENCE_POLICY
from lessor.model.views.conditions import StatusView
from lessor.model.views.meta import Meta

Progress = Callable[[str], None]

LEADER_FENCE = "leader-fence.yaml"
DEPLOYED_NAMESPACE = "lessor-system"
"""The operator namespace that deploy/ is written for."""


async def install(gateway: Gateway, operator_namespace: str, *, progress: Progress, timeout: float = 60.0,
                  leader_fence: bool = True) -> None:
    """`leader_fence`: apply deploy/leader-fence.yaml for `operator_namespace` (replicas elect a leader), or
    remove it (`lessor run --no-leader-elect`: a Lease left by an elected deployment would fence it)."""
    crds = manifests.crds()
    for crd in crds:
        name = Meta.of(crd).name
        await gateway.apply(CRD, None, name, crd)
        progress(f"applied CustomResourceDefinition {name}")
    await wait_established(gateway, [Meta.of(c).name for c in crds], timeout)
    progress(f"{len(crds)} CustomResourceDefinitions established")
    await gateway.apply(NAMESPACE, None, operator_namespace, {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": operator_namespace},
    })
    progress(f"namespace {operator_namespace} ready")
    if leader_fence:
        await manifests.apply_all(gateway, leader_fence_documents(operator_namespace))
        progress(f"applied the leader fence {FENCE_POLICY} (a ValidatingAdmissionPolicy and its binding): the API "
                 f"server admits writes of lessor's ServiceAccounts in {operator_namespace} only from the holder of "
                 "the Lease lessor-leader")
    else:
        removed = await remove_leader_fence(gateway)
        progress(f"removed the leader fence {FENCE_POLICY}" if removed else
                 f"no leader fence {FENCE_POLICY} (--no-leader-elect)")


def leader_fence_documents(operator_namespace: str) -> list[dict[str, Any]]:
    """deploy/leader-fence.yaml, for the ServiceAccounts and the leader Lease of `operator_namespace`."""
    text = resources.files("lessor.deploy").joinpath(LEADER_FENCE).read_text()
    docs = [copy.deepcopy(d) for d in manifests.load_documents([text])]
    prefix = f"system:serviceaccount:{DEPLOYED_NAMESPACE}:"
    for doc in docs:
        spec = doc["spec"]
        if doc["kind"] == "ValidatingAdmissionPolicy":
            for condition in spec["matchConditions"]:
                condition["expression"] = condition["expression"].replace(
                    prefix, f"system:serviceaccount:{operator_namespace}:")
        elif doc["kind"] == "ValidatingAdmissionPolicyBinding":
            spec["paramRef"]["namespace"] = operator_namespace
    return docs


async def remove_leader_fence(gateway: Gateway) -> bool:
    """Delete the leader fence's binding and policy; whether there was one."""
    removed = False
    for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
        resource = await gateway.resolve("admissionregistration.k8s.io/v1", kind)
        try:
            await gateway.delete(resource, None, FENCE_POLICY)
            removed = True
        except ApiError as err:
            if not err.not_found:
                raise
    return removed


async def wait_established(gateway: Gateway, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        for name in sorted(pending):
            crd = StatusView.of(await gateway.get(CRD, None, name))  # conditions null at first
            names_ok = crd.condition("NamesAccepted")
            if crd.is_true("Established"):
                pending.discard(name)
            elif names_ok is not None and names_ok.status == "False":
                raise RuntimeError(f"CustomResourceDefinition {name}: {names_ok.message}")
        if pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"CustomResourceDefinitions not established after {timeout:.0f}s: {sorted(pending)}")
            await asyncio.sleep(0.1)
