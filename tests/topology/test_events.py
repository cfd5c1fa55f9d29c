"""Watch events become typed changes, and relists do not disturb the topology."""

import pytest

from lessor.model.selectors import parse_selector
from lessor.topology import ADDED, DELETED, MODIFIED, Created, Deleted, ObjectKey, Topology, Updated, key_of


def exporter(name: str, version: str | None = None, **labels: str) -> dict:
    metadata: dict = {"name": name, "namespace": "lab", "labels": labels}
    if version:
        metadata["resourceVersion"] = version
    return {"apiVersion": "lessor.dev/v1alpha1", "kind": "Exporter", "metadata": metadata}


KEY = ObjectKey("Exporter", "lab", "e1")


def test_add_modify_delete_give_created_updated_deleted_with_both_versions() -> None:
    topology = Topology()
    first, second = exporter("e1", "1", board="a"), exporter("e1", "2", board="b")
    assert topology.apply(ADDED, first) == Created("Exporter", KEY, None, first)
    assert topology.apply(MODIFIED, second) == Updated("Exporter", KEY, first, second)
    assert topology.get(KEY) is second
    assert topology.apply(DELETED, exporter("e1", "3", board="b")) == Deleted("Exporter", KEY, second, None)
    assert topology.get(KEY) is None and len(topology) == 0


def test_relist_added_for_a_known_object_is_an_update() -> None:
    topology = Topology()
    first, second = exporter("e1", "1", board="a"), exporter("e1", "2", board="b")
    topology.apply(ADDED, first)
    assert topology.apply(ADDED, second) == Updated("Exporter", KEY, first, second)


def test_relist_repeating_the_known_version_changes_nothing() -> None:
    topology = Topology()
    topology.apply(ADDED, exporter("e1", "7", board="a"))
    assert topology.apply(ADDED, exporter("e1", "7", board="a")) is None


def test_modified_for_an_unknown_object_is_a_creation() -> None:
    topology = Topology()
    assert isinstance(topology.apply(MODIFIED, exporter("e1", "1")), Created)


def test_deleted_for_an_unknown_object_is_ignored() -> None:
    topology = Topology()
    assert topology.apply(DELETED, exporter("e1", "1")) is None


def test_deleted_object_leaves_no_trace_in_queries() -> None:
    topology = Topology()
    topology.apply(ADDED, exporter("e1", board="a"))
    topology.apply(DELETED, exporter("e1", board="a"))
    assert topology.exporters("lab", parse_selector({"matchLabels": {"board": "a"}})) == set()
    assert topology.exporters("lab", parse_selector({})) == set()
    assert topology.keys() == set()


def test_unknown_event_type_is_refused() -> None:
    with pytest.raises(ValueError, match="BOOKMARK"):
        Topology().apply("BOOKMARK", exporter("e1"))


def test_object_without_a_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"metadata\.name"):
        Topology().apply(ADDED, {"kind": "Exporter", "metadata": {}})


def test_lessor_kinds_are_bare_and_other_kinds_carry_their_api_version() -> None:
    assert key_of(exporter("e1")) == KEY
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}}
    assert key_of(configmap) == ObjectKey("v1/ConfigMap", "n", "c")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}
    assert key_of(namespace) == ObjectKey("v1/Namespace", "", "n")
    lookalike = {"apiVersion": "example.com/v1", "kind": "Lease", "metadata": {"name": "x", "namespace": "n"}}
    assert key_of(lookalike).kind == "example.com/v1/Lease"
