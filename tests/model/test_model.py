"""lessor.model: one identity per kind, one address format, readers that never raise on a user's object."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lessor.gateway.resources import LESSOR_RESOURCES
from lessor.model import kinds
from lessor.model.fields import newer, timestamp
from lessor.model.keys import ObjectKey, actor_address, address, key_of, reference_key, split_address
from lessor.topology import keys as topology_keys


def _obj(version: object) -> dict:
    return {"metadata": {"resourceVersion": version}}


def test_every_lessor_kind_has_one_identity_in_the_api_the_gateway_and_the_topology() -> None:
    assert [(r.api_version, r.kind, r.plural) for r in LESSOR_RESOURCES] == \
        [(k.api_version, k.kind, k.plural) for k in kinds.LESSOR_KINDS]
    assert topology_keys.LESSOR_KINDS == {k.kind for k in kinds.LESSOR_KINDS}


def test_a_kind_is_equal_by_api_version_and_kind_alone() -> None:
    assert kinds.Kind("lessor.dev/v1alpha1", "Lease") == kinds.LEASE
    assert kinds.kind_of({"apiVersion": "lessor.dev/v1alpha1", "kind": "Lease"}).plural == "leases"
    assert kinds.kind_of({"apiVersion": "v1", "kind": "ConfigMap"}) == kinds.Kind("v1", "ConfigMap")


@pytest.mark.parametrize("kind", [k for k in kinds.LESSOR_KINDS if k.prefix], ids=lambda k: k.kind)
def test_an_address_splits_back_into_namespace_and_name(kind: kinds.Kind) -> None:
    built = actor_address(kind, "lab", "a/b")  # a name never has a slash, but the split is safe if it had
    assert built.startswith(f"{kind.prefix}/")
    assert split_address(built) == ("lab", "a/b")
    assert address(ObjectKey(kind.kind, "lab", "a/b")) == built


def test_kinds_without_actors_have_no_address() -> None:
    assert address(key_of({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}})) \
        is None
    with pytest.raises(ValueError):
        actor_address(kinds.Kind("v1", "ConfigMap"), "n", "c")
    assert address(ObjectKey(kinds.SCALING.kind, "n", "s")) is None  # served by its pool's actor


def test_a_reference_and_an_object_of_another_group_have_the_same_key() -> None:
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "n", "name": "c"}
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "n", "name": "c"}}
    assert reference_key(ref) == key_of(obj) == ("v1/ConfigMap", "n", "c")
    lease = {"apiVersion": "lessor.dev/v1alpha1", "kind": "Lease", "metadata": {"namespace": "n", "name": "l"}}
    assert key_of(lease) == ("Lease", "n", "l")


@pytest.mark.parametrize(("incoming", "held", "taken"), [
    ("12", "11", True), ("11", "11", True), ("10", "11", False),
    (None, "11", False),  # no resourceVersion counts as 0
    ("x", "11", True), ("11", "x", True), (["1"], "3", True),  # not comparable: the incoming snapshot wins
])
def test_newer_keeps_the_higher_version_and_never_sticks_on_an_uncomparable_one(
        incoming: object, held: object, taken: bool) -> None:
    assert newer(_obj(incoming), _obj(held)) is taken
    assert newer(_obj(incoming), None) is True


def test_readers_answer_none_for_what_a_user_may_write() -> None:
    assert timestamp("2026-01-02T03:04:05Z") == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert timestamp("yesterday") is None and timestamp(5) is None
