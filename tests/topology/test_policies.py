"""Each namespace's compiled policies (lessor/app/topology_questions.py, the `LeaseWorld` answer) and the
exporter-selector index of `PolicySet.applying_to` (actors/access_policy.py)."""

from __future__ import annotations

import ast
import inspect
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lessor.actors.leasing.access_policy import PolicySet, compile_policy
from lessor.model.views.leasing import PolicyView
from lessor.actors.leasing.world import LeaseWorld
from lessor.topology import ADDED, DELETED, MODIFIED, Topology
from lessor.topology import actor as topology_actor
from lessor.topology.actor import Event, TopologyActor
from lessor.app.topology_questions import topology_state

NS = "lab"
_versions = iter(range(1, 1_000_000))


def policy(name: str, group: str, priority: int = 10, namespace: str = NS) -> dict[str, Any]:
    return {"apiVersion": "lessor.dev/v1alpha1", "kind": "ExporterAccessPolicy",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "resourceVersion": str(next(_versions))},
            "spec": {"exporterSelector": {"matchLabels": {"group": group}},
                     "policies": [{"priority": priority, "from": [{"clientSelector": {}}]}]}}


def world() -> TopologyActor:
    """The topology actor's handler, without a running system: not synced, so events are recorded, not routed."""
    return TopologyActor(topology_state(Topology()))


async def event(actor: TopologyActor, kind: str, obj: dict[str, Any]) -> None:
    await actor.receive(Event(kind, obj))


async def ask(actor: TopologyActor, namespace: str = NS) -> PolicySet:
    view = await actor.receive(LeaseWorld(namespace, {"matchLabels": {"group": "g1"}}, None, "alice"))
    return view.policies


async def test_every_lease_of_a_namespace_gets_the_same_compiled_set_until_a_policy_of_it_changes() -> None:
    actor = world()
    for i in range(3):
        await event(actor, ADDED, policy(f"p{i}", f"g{i}"))
    await event(actor, ADDED, policy("other", "g1", namespace="elsewhere"))
    first = await ask(actor)
    assert [p.name for p in first.policies] == ["p0", "p1", "p2"]
    assert await ask(actor) is first

    await event(actor, MODIFIED, policy("other", "g1", priority=99, namespace="elsewhere"))
    assert await ask(actor) is first  # another namespace's change rebuilds nothing here

    valid = policy("p1", "g1")
    valid["status"] = {"conditions": [{"type": "Valid", "status": "True"}]}
    await event(actor, MODIFIED, valid)
    assert await ask(actor) is first  # its own Valid condition: nothing a lease resolves against

    await event(actor, MODIFIED, policy("p1", "g1", priority=50))
    changed = await ask(actor)
    assert changed is not first
    assert changed.policies[1].rules[0].priority == 50
    assert changed.policies[0] is first.policies[0]  # the unchanged ones are not compiled again

    await event(actor, DELETED, policy("p0", "g0"))
    assert [p.name for p in (await ask(actor)).policies] == ["p1", "p2"]


async def test_a_namespace_without_policies_is_open_access() -> None:
    actor = world()
    assert (await ask(actor)).open
    await event(actor, ADDED, policy("p0", "g0"))
    assert not (await ask(actor)).open


# --- the exporter-selector index: the same answer as matching every policy ----------------------

keys = st.sampled_from(("board", "site", "rack"))
values = st.sampled_from(("a", "b", "c"))


@st.composite
def selectors(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from((None, {}, {"matchLabels": {"bad key!": "x"}})))  # nil, everything, broken
    expressions = []
    for _ in range(draw(st.integers(0, 3))):
        operator = draw(st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist")))
        expression: dict[str, Any] = {"key": draw(keys), "operator": operator}
        if operator in ("In", "NotIn"):
            expression["values"] = draw(st.lists(values, min_size=1, max_size=3, unique=True))
        expressions.append(expression)
    return {"matchLabels": draw(st.dictionaries(keys, values, max_size=2)), "matchExpressions": expressions}


@settings(max_examples=200, deadline=None)
@given(st.lists(selectors(), max_size=12), st.lists(st.dictionaries(keys, values, max_size=3), max_size=8))
def test_the_policies_applying_to_a_label_set_are_those_whose_exporter_selector_matches(
    raw: list[Any], label_sets: list[dict[str, str]]
) -> None:
    compiled = [compile_policy(PolicyView.of({"metadata": {"name": f"p{i:02d}"},
                                             "spec": {"exporterSelector": selector, "policies": []}}))
                for i, selector in enumerate(raw)]
    policies = PolicySet.of(compiled)
    for labels in label_sets:
        expected = tuple(i for i, p in enumerate(policies.policies)
                         if p.problem is None and p.exporters.matches(labels))
        assert policies.applying_to(labels) == expected


def test_the_topology_actor_never_asks_anyone() -> None:
    """Its askers wait for it without a deadline (`ASK_TIMEOUT`): an ask from it could close a cycle of waits."""
    tree = ast.parse(inspect.getsource(topology_actor))
    asks = [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "ask"]
    assert asks == []
