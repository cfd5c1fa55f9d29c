"""Each change reaches the actors it concerns, and no others."""

from typing import Any

from lessor.topology import ADDED, DELETED, MODIFIED, Topology

API = "lessor.dev/v1alpha1"
OPS = "lessor-system"


def obj(kind: str, name: str, ns: str = "lab", labels: dict | None = None, api: str = API, **parts: Any) -> dict:
    found: dict = {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": ns}}
    if labels is not None:
        found["metadata"]["labels"] = labels
    found.update(parts)
    return found


def exporter(name: str, ns: str = "lab", **labels: str) -> dict:
    return obj("Exporter", name, ns, labels)


def lease(
    name: str,
    selector: dict | None = None,
    client: str = "alice",
    pinned: str | None = None,
    held: str | None = None,
    ended: bool = False,
    ns: str = "lab",
) -> dict:
    spec: dict = {"clientRef": {"name": client}}
    if selector is not None:
        spec["selector"] = selector
    if pinned:
        spec["exporterRef"] = {"name": pinned}
    status: dict = {"ended": ended}
    if held:
        status["exporterRef"] = {"name": held}
    return obj("Lease", name, ns, {}, spec=spec, status=status)


def policy(name: str, exporters: dict, *clients: dict, ns: str = "lab") -> dict:
    froms = [{"clientSelector": selector} for selector in clients]
    return obj("ExporterAccessPolicy", name, ns, spec={"exporterSelector": exporters, "policies": [{"from": froms}]})


def labels(**pairs: str) -> dict:
    return {"matchLabels": pairs}


def feed(topology: Topology, *objects: dict) -> None:
    for item in objects:
        topology.apply(ADDED, item)


def routed(topology: Topology, event: str, item: dict) -> set[str]:
    change = topology.apply(event, item)
    assert change is not None
    return set(topology.route(change))


def test_exporter_label_change_reaches_exactly_leases_matching_before_or_after() -> None:
    topology = Topology(OPS)
    feed(
        topology,
        exporter("e1", board="rpi4", site="a"),
        lease("before", labels(board="rpi4")),
        lease("after", labels(board="rpi5")),
        lease("both", {"matchExpressions": [{"key": "site", "operator": "Exists"}]}),
        lease("neither", labels(board="imx8")),
        lease("ended-before", labels(board="rpi4"), ended=True),
        lease("negative", {"matchExpressions": [{"key": "board", "operator": "NotIn", "values": ["rpi5"]}]}),
        lease("other-namespace", labels(board="rpi5"), ns="lab2"),
    )
    assert routed(topology, MODIFIED, exporter("e1", board="rpi5", site="a")) == {
        "exporter/lab/e1",
        "lease/lab/before",
        "lease/lab/after",
        "lease/lab/both",
        "lease/lab/negative",
    }


def test_exporter_status_change_reaches_only_the_leases_that_name_it() -> None:
    topology = Topology(OPS)
    feed(
        topology,
        exporter("e1", board="rpi4"),
        exporter("e2", board="rpi4"),
        lease("selects", labels(board="rpi4")),
        lease("pins", labels(board="none"), pinned="e1"),
        lease("holds", labels(board="none"), held="e1"),
        lease("holds-other", labels(board="none"), held="e2"),
        lease("held-and-ended", labels(board="none"), held="e1", ended=True),
    )
    heartbeat = exporter("e1", board="rpi4") | {"status": {"lastSeen": "2024-01-01T00:00:00Z"}}
    assert routed(topology, MODIFIED, heartbeat) == {
        "exporter/lab/e1",
        "lease/lab/pins",
        "lease/lab/holds",
    }
    disabled = exporter("e1", board="rpi4") | {"spec": {"enabled": False}}
    assert "lease/lab/selects" in routed(topology, MODIFIED, disabled), "a spec change reaches selecting leases"


def test_exporter_deletion_reaches_its_actor_and_the_leases_that_wanted_it() -> None:
    topology = Topology(OPS)
    feed(topology, exporter("e1", board="rpi4"), lease("l1", labels(board="rpi4")), lease("l2", labels(board="x")))
    assert routed(topology, DELETED, exporter("e1", board="rpi4")) == {"exporter/lab/e1", "lease/lab/l1"}


def test_lease_change_reaches_its_actor_and_the_exporters_it_names_before_or_after() -> None:
    topology = Topology(OPS)
    feed(topology, exporter("e1"), exporter("e2"), exporter("e3"), exporter("e4"), lease("l1", pinned="e1", held="e2"))
    assert routed(topology, MODIFIED, lease("l1", pinned="e3", held="e2")) == {
        "lease/lab/l1",
        "exporter/lab/e1",
        "exporter/lab/e2",
        "exporter/lab/e3",
    }


def test_lease_that_ends_still_tells_the_exporter_it_held() -> None:
    topology = Topology(OPS)
    feed(topology, exporter("e1"), lease("l1", held="e1"))
    assert routed(topology, MODIFIED, lease("l1", held="e1", ended=True)) == {"lease/lab/l1", "exporter/lab/e1"}
    assert routed(topology, DELETED, lease("l1", held="e1", ended=True)) == {"lease/lab/l1", "exporter/lab/e1"}


def test_lease_selector_alone_does_not_reach_exporters() -> None:
    topology = Topology(OPS)
    feed(topology, exporter("e1", board="rpi4"))
    assert routed(topology, ADDED, lease("l1", labels(board="rpi4"))) == {"lease/lab/l1"}


def test_lease_naming_an_unknown_exporter_reaches_only_itself() -> None:
    topology = Topology(OPS)
    assert routed(topology, ADDED, lease("l1", pinned="ghost")) == {"lease/lab/l1"}


def test_client_change_reaches_its_live_leases_only() -> None:
    topology = Topology(OPS)
    feed(
        topology,
        obj("Client", "alice", labels={"team": "a"}),
        lease("l1", client="alice"),
        lease("l2", client="bob"),
        lease("l3", client="alice", ended=True),
        lease("l4", client="alice", ns="lab2"),
    )
    # ... and its own actor, which writes its Valid condition
    assert routed(topology, MODIFIED, obj("Client", "alice", labels={"team": "b"})) == {"lease/lab/l1",
                                                                                       "client/lab/alice"}
    assert routed(topology, DELETED, obj("Client", "alice")) == {"lease/lab/l1", "client/lab/alice"}


def test_policy_change_reaches_live_leases_whose_client_matched_before_or_after() -> None:
    topology = Topology(OPS)
    feed(
        topology,
        obj("Client", "alice", labels={"team": "a"}),
        obj("Client", "bob", labels={"team": "b"}),
        obj("Client", "carol", labels={"team": "c"}),
        obj("Client", "alice", "lab2", labels={"team": "b"}),
        lease("of-alice", client="alice"),
        lease("of-bob", client="bob"),
        lease("of-carol", client="carol"),
        lease("of-alice-ended", client="alice", ended=True),
        lease("of-alice-elsewhere", client="alice", ns="lab2"),
        policy("p1", labels(board="rpi4"), labels(team="a")),
    )
    updated = policy("p1", labels(board="rpi4"), labels(team="b"))
    assert routed(topology, MODIFIED, updated) == {"lease/lab/of-alice", "lease/lab/of-bob", "policy/lab/p1"}
    assert routed(topology, DELETED, updated) == {"lease/lab/of-bob", "policy/lab/p1"}


def test_policy_change_with_no_matching_client_reaches_only_its_own_actor() -> None:
    topology = Topology(OPS)
    feed(topology, exporter("e1", board="rpi4"), lease("l1", labels(board="rpi4")))
    assert routed(topology, ADDED, policy("p1", labels(board="rpi4"), labels(team="a"))) == {"policy/lab/p1"}


def handle(name: str, pool: str | None = None, claim: tuple[str, str] | None = None, **parts: Any) -> dict:
    spec: dict = parts.pop("spec", {})
    if pool:
        spec["resourcePool"] = {"name": pool, "namespace": OPS}
    if claim:
        spec["resourceClaim"] = {"name": claim[1], "namespace": claim[0]}
    return obj("ResourceHandle", name, OPS, spec=spec, **parts)


def claim(name: str, ns: str = "user", bound: str | None = None) -> dict:
    status = {"resourceHandle": {"name": bound, "namespace": OPS}} if bound else {}
    return obj("ResourceClaim", name, ns, status=status)


def provider_users(provider: str) -> dict:
    return {"resources": [{"name": "r", "provider": {"name": provider}}]}


def test_provider_change_reaches_the_pools_and_handles_that_use_it() -> None:
    topology = Topology(OPS)
    feed(
        topology,
        obj("ResourcePool", "p1", OPS, spec=provider_users("base")),
        obj("ResourcePool", "p2", OPS, spec=provider_users("other")),
        handle("guid-a", spec=provider_users("base")),
        handle("guid-b", spec=provider_users("other")),
    )
    assert routed(topology, ADDED, obj("ResourceProvider", "base", OPS)) == {
        "provider/lessor-system/base",
        "pool/lessor-system/p1",
        "handle/lessor-system/guid-a",
    }


def test_pool_change_reaches_only_its_actor() -> None:
    topology = Topology(OPS)
    feed(topology, handle("guid-a", pool="p1"), obj("ResourceProvider", "base", OPS))
    assert routed(topology, ADDED, obj("ResourcePool", "p1", OPS, spec=provider_users("base"))) == {
        "pool/lessor-system/p1"
    }


def test_handle_change_reaches_its_pool_and_its_claim_before_and_after() -> None:
    topology = Topology(OPS)
    feed(
        topology,
        obj("ResourcePool", "p1", OPS),
        claim("c1"),
        claim("c2"),
        handle("guid-a", pool="p1", claim=("user", "c1")),
    )
    assert routed(topology, MODIFIED, handle("guid-a", pool="p1", claim=("user", "c2"))) == {
        "handle/lessor-system/guid-a",
        "pool/lessor-system/p1",
        "claim/user/c1",
        "claim/user/c2",
    }


def test_claim_change_reaches_its_handle() -> None:
    topology = Topology(OPS)
    feed(topology, handle("guid-a"), handle("guid-b"), claim("c1", bound="guid-a"))
    assert routed(topology, MODIFIED, claim("c1", bound="guid-b")) == {
        "claim/user/c1",
        "handle/lessor-system/guid-a",
        "handle/lessor-system/guid-b",
    }
    assert routed(topology, DELETED, claim("c1", bound="guid-b")) == {"claim/user/c1", "handle/lessor-system/guid-b"}


def created(name: str, handle_name: str | None, ns: str = "user-env", by: str = "labels") -> dict:
    marks = {"lessor.dev/resource-handle-name": handle_name, "lessor.dev/resource-handle-namespace": OPS}
    metadata: dict = {"name": name, "namespace": ns}
    if handle_name:
        metadata[by] = marks
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}


def test_created_resource_change_reaches_its_handle_by_label_or_annotation() -> None:
    topology = Topology(OPS)
    feed(topology, handle("guid-a"), handle("guid-b"))
    assert routed(topology, ADDED, created("cm1", "guid-a")) == {"handle/lessor-system/guid-a"}
    assert routed(topology, ADDED, created("cm2", "guid-b", by="annotations")) == {"handle/lessor-system/guid-b"}
    assert routed(topology, MODIFIED, created("cm1", "guid-b")) == {
        "handle/lessor-system/guid-a",
        "handle/lessor-system/guid-b",
    }


def test_created_resource_reaches_the_handle_that_references_it() -> None:
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm1", "namespace": "user-env"}
    topology = Topology(OPS)
    feed(topology, handle("guid-a"), handle("guid-r", status={"resources": [{"name": "r", "reference": reference}]}))
    assert routed(topology, ADDED, created("cm1", "guid-a")) == {
        "handle/lessor-system/guid-a",
        "handle/lessor-system/guid-r",
    }
    assert routed(topology, DELETED, created("cm1", "guid-a")) == {
        "handle/lessor-system/guid-a",
        "handle/lessor-system/guid-r",
    }


def test_unlabelled_foreign_object_is_not_tracked() -> None:
    topology = Topology(OPS)
    assert topology.apply(ADDED, created("cm1", None)) is None
    assert len(topology) == 0
