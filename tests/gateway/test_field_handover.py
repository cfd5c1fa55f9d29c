"""Which applies need the create's fields handed over first: only one that leaves out a field the create set;
and what becomes of the apply when the hand-over fails."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

from lessor.actors.api import ApiFailure, Kind
from lessor.app.api_adapter import GatewayApi, _keeps
from lessor.gateway import ApiError, Gateway
from lessor.gateway.resources import CONFIGMAP

CONFIG_MAP = Kind("v1", "ConfigMap")

CREATED = {"f:data": {".": {}, "f:size": {}, "f:extra": {}}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}}


def test_an_apply_that_sets_every_created_field_keeps_them() -> None:
    assert _keeps({"data": {"size": "s", "extra": "x", "owner": "o"}, "metadata": {"labels": {"a": "1", "b": "2"}}},
                  CREATED)


def test_an_apply_that_leaves_out_a_created_field_does_not() -> None:
    assert not _keeps({"data": {"size": "s"}, "metadata": {"labels": {"a": "1"}}}, CREATED)
    assert not _keeps({"data": {"size": "s", "extra": "x"}}, CREATED)
    assert not _keeps({"data": "not a map", "metadata": {"labels": {"a": "1"}}}, CREATED)


def test_list_items_are_not_followed_so_the_hand_over_is_done() -> None:
    owned = {"f:spec": {"f:ports": {'k:{"port":80}': {".": {}, "f:port": {}}}}}
    assert not _keeps({"spec": {"ports": [{"port": 80}]}}, owned)
    assert not _keeps({}, "junk")


# --- against the real API server: a hand-over that fails must not let the apply land without the removal -----


class _Interfering:
    """The session's gateway, but for the hand-over's patch: `before_patch` runs first (a competing write, or a
    refusal), as on a busy cluster where another writer changes the resource between lessor's read and patch."""

    def __init__(self, gateway: Gateway, before_patch: Callable[[], Awaitable[None]]) -> None:
        self._gateway, self._before_patch = gateway, before_patch
        self.patches = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._gateway, name)

    async def merge_patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.patches += 1
        await self._before_patch()
        return await self._gateway.merge_patch(*args, **kwargs)


def _configmap(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def test_a_hand_over_that_loses_to_another_write_reads_again_and_the_apply_removes_the_field(
        kube: Gateway, namespace: str) -> None:
    async def competing_write() -> None:
        if gateway.patches == 1:
            await kube.merge_patch(CONFIGMAP, namespace, "cm", {"metadata": {"annotations": {"someone": "else"}}})

    gateway = _Interfering(kube, competing_write)
    api = GatewayApi(cast(Gateway, gateway))
    await api.create(CONFIG_MAP, namespace, _configmap("cm", {"size": "small", "extra": "x"}))
    await api.apply(CONFIG_MAP, namespace, "cm", _configmap("cm", {"size": "small"}))
    assert (await kube.get(CONFIGMAP, namespace, "cm"))["data"] == {"size": "small"}
    assert gateway.patches == 2


async def test_an_apply_whose_hand_over_is_refused_is_not_sent(kube: Gateway, namespace: str) -> None:
    """Sent, it would leave the field and carry the definition's digest: nothing would ever try again."""
    async def refused() -> None:
        raise ApiError(503, {"reason": "ServiceUnavailable", "message": "busy"}, "PATCH")

    api = GatewayApi(cast(Gateway, _Interfering(kube, refused)))
    await api.create(CONFIG_MAP, namespace, _configmap("cm", {"size": "small", "extra": "x"}))
    with pytest.raises(ApiFailure):
        await api.apply(CONFIG_MAP, namespace, "cm", _configmap("cm", {"size": "small", "more": "y"}))
    assert (await kube.get(CONFIGMAP, namespace, "cm"))["data"] == {"size": "small", "extra": "x"}
