"""What actors can ask the topology, and how it draws itself."""

from typing import Any

import pytest

from lessor.model.selectors import parse_selector
from lessor.model.views.leasing import ExporterView
from lessor.topology import ADDED, DELETED, MODIFIED, Edge, ObjectKey, Topology
from lessor.topology.fields import CLIENT_REF, FREE_HANDLE_PROVIDER

API = "lessor.dev/v1alpha1"
OPS = "lessor-system"


def obj(kind: str, name: str, ns: str = "lab", labels: dict | None = None, **parts: Any) -> dict:
    return {
        "apiVersion": API,
        "kind": kind,
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
    } | parts


def key(kind: str, name: str, ns: str = "lab") -> ObjectKey:
    return ObjectKey(kind, ns, name)


def sel(**pairs: str):
    return parse_selector({"matchLabels": pairs})


@pytest.fixture
def lab() -> Topology:
    topology = Topology(OPS)
    items = [
        obj("Exporter", "rpi4-1", labels={"board": "rpi4", "site": "a"}),
        obj("Exporter", "rpi4-2", labels={"board": "rpi4", "site": "b"}),
        obj("Exporter", "imx8-1", labels={"board": "imx8", "site": "a", "broken": "yes"}),
        obj("Exporter", "rpi4-other", "lab2", labels={"board": "rpi4", "site": "a"}),
        obj("Client", "alice", labels={"team": "kernel"}),
        obj("Client", "bob", labels={"team": "qa"}),
        obj(
            "ExporterAccessPolicy",
            "rpi-for-kernel",
            spec={
                "exporterSelector": {"matchLabels": {"board": "rpi4"}},
                "policies": [{"priority": 10, "from": [{"clientSelector": {"matchLabels": {"team": "kernel"}}}]}],
            },
        ),
        obj(
            "ExporterAccessPolicy",
            "site-a-for-all",
            spec={
                "exporterSelector": {"matchLabels": {"site": "a"}},
                "policies": [{"from": [{"clientSelector": {}}]}],
            },
        ),
        obj(
            "Lease",
            "l1",
            spec={"clientRef": {"name": "alice"}, "selector": {"matchLabels": {"board": "rpi4"}}},
            status={"exporterRef": {"name": "rpi4-2"}},
        ),
    ]
    for item in items:
        topology.apply(ADDED, item)
    return topology


def test_exporters_matching_a_selector_stay_in_their_namespace(lab: Topology) -> None:
    assert lab.exporters("lab", sel(board="rpi4")) == {key("Exporter", "rpi4-1"), key("Exporter", "rpi4-2")}
    assert lab.exporters("lab2", sel(board="rpi4")) == {key("Exporter", "rpi4-other", "lab2")}
    assert lab.exporters("nowhere", sel(board="rpi4")) == set()


def test_negative_expressions_subtract_from_the_namespace(lab: Topology) -> None:
    healthy = parse_selector({"matchExpressions": [{"key": "broken", "operator": "DoesNotExist"}]})
    assert lab.exporters("lab", healthy) == {key("Exporter", "rpi4-1"), key("Exporter", "rpi4-2")}
    not_b = parse_selector({"matchExpressions": [{"key": "site", "operator": "NotIn", "values": ["b"]}]})
    assert lab.exporters("lab", not_b) == {key("Exporter", "rpi4-1"), key("Exporter", "imx8-1")}


def test_query_results_are_the_callers_to_keep(lab: Topology) -> None:
    found = lab.exporters("lab", sel(board="rpi4"))
    found.clear()
    assert len(lab.exporters("lab", sel(board="rpi4"))) == 2


def test_label_queries_exist_only_for_selected_kinds(lab: Topology) -> None:
    with pytest.raises(ValueError, match="Lease"):
        lab.select("Lease", "lab", sel())


def test_each_exporter_a_selector_matches_with_the_policies_covering_it(lab: Topology) -> None:
    found = [
        (exporter.name, sorted(p.name for p in lab.policies_for_exporter("lab", lab.get(exporter)["metadata"]["labels"])))
        for exporter in sorted(lab.exporters("lab", sel(board="rpi4")))
    ]
    assert found == [("rpi4-1", ["rpi-for-kernel", "site-a-for-all"]), ("rpi4-2", ["rpi-for-kernel"])]


def policies_selecting(topology: Topology, client: ObjectKey) -> set[ObjectKey]:
    return {edge.source for edge in topology.edges_to(client) if edge.source.kind == "ExporterAccessPolicy"}


def test_the_policies_whose_client_selector_matches_a_client(lab: Topology) -> None:
    assert policies_selecting(lab, key("Client", "alice")) == {
        key("ExporterAccessPolicy", "rpi-for-kernel"),
        key("ExporterAccessPolicy", "site-a-for-all"),
    }
    assert policies_selecting(lab, key("Client", "bob")) == {key("ExporterAccessPolicy", "site-a-for-all")}
    lab.apply(ADDED, obj("Client", "carol", "lab2", labels={"team": "qa"}))
    assert policies_selecting(lab, key("Client", "carol", "lab2")) == set()


def test_leases_selecting_and_naming(lab: Topology) -> None:
    assert lab.leases_selecting("lab", {"board": "rpi4"}) == {key("Lease", "l1")}
    assert lab.leases_selecting("lab", {"board": "imx8"}) == set()
    assert lab.referrers(key("Client", "alice"), CLIENT_REF) == {key("Lease", "l1")}


def test_edges_of_a_lease_and_into_an_exporter(lab: Topology) -> None:
    lease = key("Lease", "l1")
    assert set(lab.edges_from(lease)) == {
        Edge(lease, "spec.clientRef", key("Client", "alice")),
        Edge(lease, "status.exporterRef", key("Exporter", "rpi4-2")),
        Edge(lease, "spec.selector", key("Exporter", "rpi4-1")),
        Edge(lease, "spec.selector", key("Exporter", "rpi4-2")),
    }
    exporter = key("Exporter", "rpi4-2")
    assert set(lab.edges_to(exporter)) == {
        Edge(lease, "status.exporterRef", exporter),
        Edge(lease, "spec.selector", exporter),
        Edge(key("ExporterAccessPolicy", "rpi-for-kernel"), "spec.exporterSelector", exporter),
    }


def test_an_ended_lease_keeps_its_object_but_loses_its_edges(lab: Topology) -> None:
    ended = obj(
        "Lease",
        "l1",
        labels={"lessor.dev/lease-ended": "true"},
        spec={"clientRef": {"name": "alice"}, "selector": {"matchLabels": {"board": "rpi4"}}},
        status={"ended": True},
    )
    lab.apply(MODIFIED, ended)
    assert lab.get(key("Lease", "l1")) is ended
    assert lab.edges_from(key("Lease", "l1")) == []
    assert lab.leases_selecting("lab", {"board": "rpi4"}) == set()
    assert lab.referrers(key("Client", "alice"), CLIENT_REF) == set()


def test_the_ended_label_alone_ends_nothing(lab: Topology) -> None:
    """A live lease a user labelled ended still hears of its exporters and client, as its actor, which
    goes by `status.ended` too, still holds them (one definition of ended: `LeaseView.ended`)."""
    labelled = obj("Lease", "l1", labels={"lessor.dev/lease-ended": "true"},
                   spec={"clientRef": {"name": "alice"}, "selector": {"matchLabels": {"board": "rpi4"}}})
    lab.apply(MODIFIED, labelled)
    assert lab.leases_selecting("lab", {"board": "rpi4"}) == {key("Lease", "l1")}
    assert lab.referrers(key("Client", "alice"), CLIENT_REF) == {key("Lease", "l1")}


def test_pool_handles_claims_and_created_resources() -> None:
    topology = Topology(OPS)
    reference = {"apiVersion": "v1", "kind": "Secret", "name": "s1", "namespace": "env"}
    items = [
        obj("ResourceProvider", "base", OPS),
        obj("ResourcePool", "p1", OPS, spec={"resources": [{"provider": {"name": "base"}}]}),
        obj(
            "ResourceHandle",
            "guid-a",
            OPS,
            spec={
                "resourcePool": {"name": "p1", "namespace": OPS},
                "resourceClaim": {"name": "c1", "namespace": "user"},
                "resources": [{"provider": {"name": "base"}, "reference": reference}],
            },
        ),
        obj("ResourceHandle", "guid-b", OPS, spec={"resourcePool": {"name": "p1", "namespace": OPS}}),
        obj("ResourceClaim", "c1", "user", status={"resourceHandle": {"name": "guid-a", "namespace": OPS}}),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cm1", "namespace": "env", "labels": {"lessor.dev/resource-handle-name": "guid-a"}},
        },
    ]
    for item in items:
        topology.apply(ADDED, item)
    pool, handle = key("ResourcePool", "p1", OPS), key("ResourceHandle", "guid-a", OPS)
    assert topology.handles_of_pool(pool) == {handle, key("ResourceHandle", "guid-b", OPS)}
    assert topology.resources_of_handle(handle) == {
        ObjectKey("v1/ConfigMap", "env", "cm1"),
        ObjectKey("v1/Secret", "env", "s1"),
    }
    assert topology.referrers(key("ResourceProvider", "base", OPS), "spec.resources[].provider") == {pool, handle}
    assert topology.referrers(handle, "status.resourceHandle") == {key("ResourceClaim", "c1", "user")}
    assert topology.referrers(key("ResourceClaim", "c1", "user"), "spec.resourceClaim") == {handle}


def test_free_standing_handles_are_found_by_provider_until_bound() -> None:
    topology = Topology(OPS)
    base = key("ResourceProvider", "base", OPS)
    free = obj("ResourceHandle", "guid-f", OPS, spec={"resources": [{"provider": {"name": "base"}}]})
    pooled = obj("ResourceHandle", "guid-p", OPS, spec={"resourcePool": {"name": "p1", "namespace": OPS},
                                                        "resources": [{"provider": {"name": "base"}}]})
    for item in (obj("ResourceProvider", "base", OPS), free, pooled):
        topology.apply(ADDED, item)
    assert topology.referrers(base, FREE_HANDLE_PROVIDER) == {key("ResourceHandle", "guid-f", OPS)}

    bound = {**free, "metadata": {**free["metadata"], "resourceVersion": "2"},
             "spec": {**free["spec"], "resourceClaim": {"name": "c1", "namespace": "user"}}}
    topology.apply(MODIFIED, bound)
    assert topology.referrers(base, FREE_HANDLE_PROVIDER) == set()
    assert topology.referrers(base, "spec.resources[].provider") == {key("ResourceHandle", "guid-f", OPS),
                                                                      key("ResourceHandle", "guid-p", OPS)}


def test_dot_draws_objects_edges_and_missing_targets(lab: Topology) -> None:
    lab.apply(ADDED, obj("Lease", "l2", spec={"clientRef": {"name": "ghost"}}))
    text = lab.to_dot()
    assert text.startswith("digraph topology {") and text.rstrip().endswith("}")
    assert '"Lease/lab/l1" -> "Exporter/lab/rpi4-2" [label="status.exporterRef"];' in text
    assert '"Lease/lab/l1" -> "Exporter/lab/rpi4-1" [label="spec.selector"];' in text
    assert (
        '"ExporterAccessPolicy/lab/rpi-for-kernel" -> "Client/lab/alice" '
        '[label="spec.policies[0].from[0].clientSelector"];' in text
    )
    assert '"Client/lab/ghost" [label="Client/ghost", style=dashed];' in text
    assert 'label="lab2";' in text


def test_what_changed_while_down_is_told_to_the_actors_that_must_act(lab: Topology) -> None:
    from lessor.topology.recovery import Missed, missed_while_down

    assert missed_while_down(lab) == []  # everything named exists: nothing was missed
    ended = obj("Lease", "old", status={"ended": True, "exporterRef": {"name": "rpi4-1"}})
    lab.apply(ADDED, ended)
    lab.apply(MODIFIED, obj("Exporter", "rpi4-1", labels={"board": "rpi4", "site": "a"},
                            status={"leaseRef": {"name": "old"}}))
    lab.apply(MODIFIED, obj("Exporter", "rpi4-2", labels={"board": "rpi4", "site": "b"},
                            status={"leaseRef": {"name": "gone"}}))
    lab.apply(ADDED, obj("Lease", "l3", spec={"clientRef": {"name": "bob"}}, status={"exporterRef": {"name": "x"}}))
    history = obj("Lease", "l4", status={"ended": True, "exporterRef": {"name": "y"}},
                  labels={"lessor.dev/lease-ended": "true"})
    lab.apply(ADDED, history)  # history, labelled: left alone
    unlabelled = obj("Lease", "l5", status={"ended": True})
    lab.apply(ADDED, unlabelled)  # ended, but its label was taken off: its actor puts it back
    lab.apply(ADDED, obj("ResourceHandle", "guid-a", OPS, spec={"resourcePool": {"name": "p-gone"}}))
    lab.apply(ADDED, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "cm", "namespace": OPS, "labels": {"lessor.dev/resource-handle-name": "guid-gone"}}})
    lab.apply(ADDED, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "cm2", "namespace": OPS, "labels": {"lessor.dev/resource-handle-name": "guid-a"}}})
    assert missed_while_down(lab) == [
        Missed("exporter/lab/rpi4-1", key("Lease", "old"), ended),
        Missed("exporter/lab/rpi4-2", key("Lease", "gone"), None),
        Missed("lease/lab/l3", key("Exporter", "x"), None),
        Missed("pool/lessor-system/p-gone", key("ResourcePool", "p-gone", OPS), None),
        Missed("handle/lessor-system/guid-gone", key("ResourceHandle", "guid-gone", OPS), None),
        Missed("lease/lab/l5", key("Lease", "l5"), unlabelled),
        Missed("lease/lab/old", key("Lease", "old"), ended),
    ]
    pool, handle = key("ResourcePool", "p-gone", OPS), key("ResourceHandle", "guid-a", OPS)
    assert lab.dangling("spec.resourcePool") == {pool: {handle}}


def test_a_view_is_built_once_per_version_and_shared(lab: Topology) -> None:
    exporter = key("Exporter", "rpi4-1")
    first = lab.view(exporter, ExporterView)
    assert first is not None and first.meta.labels == {"board": "rpi4", "site": "a"}
    assert lab.view(exporter, ExporterView) is first  # every lease asking about it gets this one
    lab.apply(MODIFIED, obj("Exporter", "rpi4-1", labels={"board": "rpi4"}, status={"leaseRef": {"name": "l9"}}))
    fresh = lab.view(exporter, ExporterView)
    assert fresh is not None and fresh is not first and fresh.held_by == "l9"
    assert lab.view(key("Exporter", "nowhere"), ExporterView) is None



def test_a_handle_newly_bound_to_a_claim_the_topology_does_not_hold_is_told_it_is_gone() -> None:
    from lessor.topology.recovery import Missed, bound_to_a_gone_claim

    topology = Topology(OPS)
    topology.apply(ADDED, obj("ResourceClaim", "c1", "user"))
    unbound = obj("ResourceHandle", "guid-a", OPS, spec={"resourcePool": {"name": "p1", "namespace": OPS}})
    created = topology.apply(ADDED, unbound)
    assert created is not None and bound_to_a_gone_claim(topology, created) is None

    def bound(to: str, version: str, **metadata: Any) -> dict:
        return {**unbound, "metadata": {**unbound["metadata"], "resourceVersion": version, **metadata},
                "spec": {**unbound["spec"], "resourceClaim": {"name": to, "namespace": "user"}}}

    change = topology.apply(MODIFIED, bound("c1", "2"))
    assert change is not None and bound_to_a_gone_claim(topology, change) is None  # its claim is there
    topology.apply(DELETED, obj("ResourceClaim", "c1", "user"))
    change = topology.apply(MODIFIED, bound("c1", "3"))
    assert change is not None and bound_to_a_gone_claim(topology, change) is None  # bound before: the deletion was routed to it

    other = obj("ResourceHandle", "guid-b", OPS, spec={"resourcePool": {"name": "p1", "namespace": OPS}})
    topology.apply(ADDED, other)
    change = topology.apply(MODIFIED, {**other, "metadata": {**other["metadata"], "resourceVersion": "4"},
                                       "spec": {**other["spec"], "resourceClaim": {"name": "c2", "namespace": "user"}}})
    assert change is not None
    assert bound_to_a_gone_claim(topology, change) == Missed("handle/lessor-system/guid-b",
                                                             key("ResourceClaim", "c2", "user"), None)


def test_every_key_in_a_stable_order_kind_by_kind_and_namespace_by_namespace(lab: Topology) -> None:
    lab.apply(ADDED, obj("Exporter", "a-late"))  # after the others: last of its kind and namespace
    lab.apply(MODIFIED, obj("Exporter", "rpi4-1", labels={"board": "rpi4"}))  # keeps its place
    keys = lab.in_order()
    assert sorted(keys) == sorted(lab.keys()) and len(keys) == len(set(keys))
    assert [(k.kind, k.namespace) for k in keys] == sorted((k.kind, k.namespace) for k in keys)
    assert [k.name for k in keys if (k.kind, k.namespace) == ("Exporter", "lab")] == [
        "rpi4-1", "rpi4-2", "imx8-1", "a-late"]
