"""`object_actor.commit`: a write under a resourceVersion precondition, retried on conflict while the
object is as the actor believed (an in-memory API: no server needed to see the decisions)."""

from __future__ import annotations

from typing import Any

from lessor.actors.api import EXPORTER, Conflict, NotFound
from lessor.actors.object_actor import COMMIT_ATTEMPTS, GaveUp, Gone, Lost, Written, commit


class Store:
    """One object; a write whose resourceVersion is not the stored one conflicts, as the API server's."""

    def __init__(self, obj: dict[str, Any] | None, *, bumps: int = 0) -> None:
        self.obj = obj
        self.bumps = bumps  # writes by "someone else" that land just before each of ours
        self.writes = 0

    async def get(self, kind: Any, namespace: str, name: str) -> dict[str, Any] | None:
        return self.obj

    async def write(self, seen: dict[str, Any], ref: str) -> dict[str, Any]:
        self.writes += 1
        if self.obj is None:
            raise NotFound("gone")
        if self.bumps:
            self.bumps -= 1
            version = int(self.obj["metadata"]["resourceVersion"]) + 1
            self.obj = {**self.obj, "metadata": {"resourceVersion": str(version)}}
        if seen["metadata"]["resourceVersion"] != self.obj["metadata"]["resourceVersion"]:
            raise Conflict("stale")
        self.obj = {"metadata": {"resourceVersion": str(int(seen["metadata"]["resourceVersion"]) + 1)},
                    "status": {"leaseRef": {"name": ref}}}
        return self.obj


def _exporter(version: int, holder: str | None = None) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": str(version)}, "status": {"leaseRef": {"name": holder} if holder else None}}


def _unheld(obj: Any) -> bool:
    return not (obj.get("status") or {}).get("leaseRef")


async def test_a_conflict_from_a_heartbeat_is_retried_and_the_write_lands() -> None:
    store = Store(_exporter(1), bumps=2)
    outcome = await commit(store, EXPORTER, "n", "e", _exporter(1), lambda o: store.write(o, "l1"), _unheld)
    assert isinstance(outcome, Written) and outcome.result["status"]["leaseRef"] == {"name": "l1"}
    assert store.writes == 3


async def test_a_commit_that_finds_another_holder_loses_and_sees_it() -> None:
    store = Store(_exporter(5, "other"))
    outcome = await commit(store, EXPORTER, "n", "e", _exporter(1), lambda o: store.write(o, "l1"), _unheld)
    assert outcome == Lost(store.obj) and store.writes == 1


async def test_a_deleted_object_is_gone_not_an_error() -> None:
    store = Store(None)
    assert await commit(store, EXPORTER, "n", "e", _exporter(1), lambda o: store.write(o, "l1"), _unheld) == Gone()


async def test_an_object_that_keeps_changing_is_given_up_for_now() -> None:
    store = Store(_exporter(1), bumps=COMMIT_ATTEMPTS)
    outcome = await commit(store, EXPORTER, "n", "e", _exporter(1), lambda o: store.write(o, "l1"), _unheld)
    assert isinstance(outcome, GaveUp) and outcome.fresh == store.obj
    assert store.writes == COMMIT_ATTEMPTS and _unheld(store.obj)
