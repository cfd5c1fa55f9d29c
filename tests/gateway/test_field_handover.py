"""Which applies need the create's fields handed over first: only one that leaves out a field the create set."""

from __future__ import annotations

from lessor.api_adapter import _keeps

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
