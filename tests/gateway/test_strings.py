"""The table that keeps one copy of each equal string value of the cached objects (lessor/gateway/strings.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
import pytest

from lessor.gateway.strings import Strings


def fresh(text: str) -> str:
    """A string equal to `text` but not the same object, as JSON decoding makes one."""
    return "".join(list(text))


def exporter(name: str, group: str, seen: str) -> dict[str, Any]:
    return {"kind": fresh("Exporter"),
            "metadata": {"name": fresh(name), "uid": fresh("u-" + name), "namespace": fresh("lab"),
                         "labels": {"group": fresh(group)},
                         "ownerReferences": [{"kind": fresh("Pool"), "name": fresh("pool-1")}]},
            "status": {"lastSeen": fresh(seen), "conditions": [{"type": fresh("Online"), "status": fresh("True")}]}}


def test_equal_values_become_one_object_and_values_stay_equal() -> None:
    strings = Strings()
    a = strings.share(exporter("a", "g1", "t1"))
    b = strings.share(exporter("b", "g1", "t1"))
    assert a == exporter("a", "g1", "t1") and b == exporter("b", "g1", "t1")
    for read in (lambda o: o["kind"], lambda o: o["metadata"]["namespace"], lambda o: o["metadata"]["labels"]["group"],
                 lambda o: o["metadata"]["ownerReferences"][0]["name"], lambda o: o["status"]["lastSeen"],
                 lambda o: o["status"]["conditions"][0]["type"]):
        assert read(a) is read(b)


def test_names_and_uids_are_not_kept_in_the_table() -> None:
    strings = Strings()
    strings.share(exporter("a", "g1", "t1"))
    assert len(strings) == 8  # Exporter lab g1 Pool pool-1 t1 Online True: no "a", no "u-a"


def test_values_no_object_holds_any_more_leave_the_table() -> None:
    strings = Strings(min_size=4)
    kept = [strings.share(exporter(f"e{i}", f"g{i}", f"t{i}")) for i in range(50)]
    del kept[1:]
    strings.prune()
    assert len(strings) == 8  # the values of the one object left
    again = strings.share(exporter("x", "g0", "t0"))
    assert again["status"]["lastSeen"] is kept[0]["status"]["lastSeen"]


def test_the_table_prunes_itself_as_it_grows() -> None:
    strings = Strings(min_size=64)
    for i in range(10_000):
        strings.share(exporter(f"e{i}", f"g{i}", f"t{i}"))  # each object dropped at once
    assert len(strings) < 200


def test_equal_nested_values_become_one_read_only_object() -> None:
    strings = Strings()
    a = strings.share(exporter("a", "g1", "t1"))
    b = strings.share(exporter("b", "g1", "t1"))
    assert a["metadata"]["labels"] is b["metadata"]["labels"]
    assert a["status"] is b["status"] and a["status"]["conditions"][0] is b["status"]["conditions"][0]
    assert a["metadata"] is not b["metadata"] and a is not b  # an object's top and metadata are its own
    c = strings.share(exporter("c", "g2", "t1"))
    assert c["metadata"]["labels"] is not a["metadata"]["labels"] and c["status"] is a["status"]
    for write in (lambda: a["metadata"]["labels"].__setitem__("group", "g9"),
                  lambda: a["metadata"]["labels"].update(group="g9"), lambda: a["status"].pop("lastSeen"),
                  lambda: a["status"]["conditions"].append({}), lambda: a["status"]["conditions"][0].clear()):
        with pytest.raises(TypeError):
            write()
    assert b == exporter("b", "g1", "t1")


def test_a_copy_of_a_shared_value_is_writable_and_encodes_alike() -> None:
    strings = Strings()
    a = strings.share(exporter("a", "g1", "t1"))
    for copied in (copy.deepcopy(a), {**a, "status": copy.deepcopy(a["status"])}):
        copied["status"]["conditions"][0]["status"] = "False"
        copied["status"]["conditions"].append({"type": "Ready"})
    labels = dict(a["metadata"]["labels"])
    labels["group"] = "g2"
    assert a == exporter("a", "g1", "t1")
    assert orjson.loads(orjson.dumps(a)) == exporter("a", "g1", "t1") == json.loads(json.dumps(a))


def test_values_equal_but_for_their_json_types_are_not_merged() -> None:
    strings = Strings()
    shared = [strings.share({"kind": "X", "spec": {"n": value, "list": [value]}}) for value in (True, 1, 1.0)]
    assert [type(o["spec"]["n"]) for o in shared] == [bool, int, float]
    assert [type(o["spec"]["list"][0]) for o in shared] == [bool, int, float]


def test_nested_values_no_object_holds_any_more_leave_the_table() -> None:
    strings = Strings(min_size=4)
    kept = [strings.share(exporter(f"e{i}", f"g{i}", f"t{i}")) for i in range(50)]
    del kept[1:]
    strings.prune()
    assert strings.values == 6  # labels, owner, ownerReferences, condition, conditions, status of the one left
    assert strings.share(exporter("x", "g0", "t0"))["status"] is kept[0]["status"]
