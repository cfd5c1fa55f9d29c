"""`lessor install`: the CRDs, established, and the operator's namespace."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from lessor import manifests
from lessor.gateway import Gateway
from lessor.gateway.resources import CRD, NAMESPACE

Progress = Callable[[str], None]


async def install(gateway: Gateway, operator_namespace: str, *, progress: Progress, timeout: float = 60.0) -> None:
    crds = manifests.crds()
    for crd in crds:
        await gateway.apply(CRD, None, crd["metadata"]["name"], crd)
        progress(f"applied CustomResourceDefinition {crd['metadata']['name']}")
    await wait_established(gateway, [c["metadata"]["name"] for c in crds], timeout)
    progress(f"{len(crds)} CustomResourceDefinitions established")
    await gateway.apply(NAMESPACE, None, operator_namespace, {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": operator_namespace},
    })
    progress(f"namespace {operator_namespace} ready")


async def wait_established(gateway: Gateway, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        for name in sorted(pending):
            crd = await gateway.get(CRD, None, name)
            conditions = {c["type"]: c for c in (crd.get("status") or {}).get("conditions") or []}  # null at first
            if conditions.get("Established", {}).get("status") == "True":
                pending.discard(name)
            elif (names_ok := conditions.get("NamesAccepted")) and names_ok.get("status") == "False":
                raise RuntimeError(f"CustomResourceDefinition {name}: {names_ok.get('message')}")
        if pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"CustomResourceDefinitions not established after {timeout:.0f}s: {sorted(pending)}")
            await asyncio.sleep(0.1)
