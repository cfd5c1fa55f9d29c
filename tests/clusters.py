"""A control plane of a test module's own, for tests that count or judge every request the operator makes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from lessor.gateway import Gateway
from lessor.app.install import install
from lessor.tools.controlplane import ControlPlane, ensure_binaries

OPS = "lessor-system"


@contextlib.asynccontextmanager
async def own_cluster(folder: Path) -> AsyncIterator[tuple[ControlPlane, Gateway]]:
    """A control plane with the CRDs installed: the requests of the operator under test are then the module's
    objects' alone (no controller manager, so no namespace controller either)."""
    async with ControlPlane(folder, ensure_binaries(), controller_manager=False) as cp:
        async with await Gateway.connect(str(cp.kubeconfig)) as gateway:
            await install(gateway, OPS, progress=lambda _: None)
            yield cp, gateway
