"""The table that keeps one copy of each equal string value of the cached objects (lessor/gateway/strings.py)."""

from __future__ import annotations

from typing import Any

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
