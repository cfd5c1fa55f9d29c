"""After any sequence of watch events, the indexes answer what a scan of the objects answers,
and each change is routed as the rules, computed by brute force, say."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lessor.model.selectors import NOTHING, Selector, SelectorError, parse_selector
from lessor.topology import ADDED, DELETED, MODIFIED, Change, Created, Deleted, Edge, ObjectKey, Topology, Updated

NAMESPACES = ("n1", "n2")
NAMES = ("a", "b")
KINDS = ("Exporter", "Client", "Lease", "ExporterAccessPolicy")
ACTORS = {"Exporter": "exporter", "Lease": "lease", "Client": "client", "ExporterAccessPolicy": "policy"}
ENDED = "lessor.dev/lease-ended"

label_keys = st.sampled_from(("k1", "k2", "k3"))
label_values = st.sampled_from(("v1", "v2", "v3", ""))
label_sets = st.dictionaries(label_keys, label_values, max_size=3)


@st.composite
def expressions(draw: st.DrawFn, operators: tuple[str, ...] = ("In", "NotIn", "Exists", "DoesNotExist")) -> dict:
    operator = draw(st.sampled_from(operators))
    found: dict = {"key": draw(label_keys), "operator": operator}
    if operator in ("In", "NotIn"):
        found["values"] = draw(st.lists(label_values, min_size=1, max_size=3, unique=True))
    return found


valid_selectors = st.builds(
    lambda labels, exprs: {"matchLabels": labels, "matchExpressions": exprs},
    st.dictionaries(label_keys, label_values, max_size=2),
    st.lists(expressions(), max_size=2),
)
# Expressions alone: multi-valued `In` anchors, and (negative only) the residue path.
expression_selectors = st.builds(
    lambda exprs: {"matchExpressions": exprs}, st.lists(expressions(), min_size=1, max_size=3)
)
negative_selectors = st.builds(
    lambda exprs: {"matchExpressions": exprs},
    st.lists(expressions(("NotIn", "DoesNotExist")), min_size=1, max_size=2),
)
any_valid_selectors = st.one_of(valid_selectors, expression_selectors, negative_selectors)
# Leases and policies may also hold no selector, or one the API would refuse.
raw_selectors = st.one_of(
    any_valid_selectors,
    st.none(),
    st.just({"matchExpressions": [{"key": "k1", "operator": "In", "values": []}]}),
)
names = st.sampled_from(NAMES)


def metadata(ns: str, name: str, labels: dict) -> dict:
    return {"name": name, "namespace": ns, "labels": labels}


@st.composite
def objects(draw: st.DrawFn, kind: str | None = None, ns: str | None = None, name: str | None = None) -> dict:
    kind = kind or draw(st.sampled_from(KINDS))
    ns, name = ns or draw(st.sampled_from(NAMESPACES)), name or draw(names)
    labels = draw(label_sets)
    found: dict[str, Any] = {"apiVersion": "lessor.dev/v1alpha1", "kind": kind}
    if kind == "Lease":
        if draw(st.booleans()):
            labels[ENDED] = draw(st.sampled_from(("true", "false")))
        spec: dict = {"selector": draw(raw_selectors)}
        status: dict = {"ended": draw(st.sampled_from((False, False, True)))}
        if client := draw(st.none() | names):
            spec["clientRef"] = {"name": client}
        if pinned := draw(st.none() | names):
            spec["exporterRef"] = {"name": pinned}
        if held := draw(st.none() | names):
            status["exporterRef"] = {"name": held}
        found |= {"spec": spec, "status": status}
    elif kind == "ExporterAccessPolicy":
        froms = st.lists(st.builds(lambda s: {"clientSelector": s}, raw_selectors), max_size=2)
        policies = draw(st.lists(st.builds(lambda f: {"from": f}, froms), max_size=2))
        found["spec"] = {"exporterSelector": draw(raw_selectors), "policies": policies}
    found["metadata"] = metadata(ns, name, labels)
    return found


# A step writes an object, or deletes the n-th known one (else an unknown one).
steps = st.lists(
    st.one_of(
        st.tuples(st.sampled_from((ADDED, MODIFIED)), objects()), st.tuples(st.just(DELETED), st.integers(0, 15))
    ),
    max_size=30,
)
Steps = list[tuple[str, Any]]

# -- brute force over the stored objects -----------------------------------

Model = dict[ObjectKey, dict]


def k(obj: dict) -> ObjectKey:
    return ObjectKey(obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])


def labels(obj: dict | None) -> dict:
    return {} if obj is None else obj["metadata"]["labels"]


def compiled(raw: Any) -> Selector:
    try:
        return parse_selector(raw)
    except SelectorError:
        return NOTHING


def ended(lease: dict) -> bool:
    """`status.ended`: the ended label alone (drawn too, with either value) ends nothing."""
    return lease["status"]["ended"] is True


def ref(obj: dict, part: str, field: str) -> str | None:
    return (obj.get(part, {}).get(field) or {}).get("name")


def live_leases(model: Model, ns: str) -> Model:
    return {key: o for key, o in model.items() if key.kind == "Lease" and key.namespace == ns and not ended(o)}


def of_kind(model: Model, kind: str, ns: str) -> Model:
    return {key: o for key, o in model.items() if key.kind == kind and key.namespace == ns}


def client_selectors(policy: dict) -> list[tuple[str, Selector]]:
    return [
        (f"spec.policies[{i}].from[{j}].clientSelector", compiled(source["clientSelector"]))
        for i, rule in enumerate(policy["spec"]["policies"])
        for j, source in enumerate(rule["from"])
    ]


def brute_edges(model: Model) -> set[Edge]:
    edges = set()
    for key, o in model.items():
        ns = key.namespace
        if key.kind == "Lease" and not ended(o):
            for part, field, kind in (
                ("spec", "exporterRef", "Exporter"),
                ("status", "exporterRef", "Exporter"),
                ("spec", "clientRef", "Client"),
            ):
                if name := ref(o, part, field):
                    edges.add(Edge(key, f"{part}.{field}", ObjectKey(kind, ns, name)))
            selector = compiled(o["spec"]["selector"])
            edges |= {
                Edge(key, "spec.selector", e)
                for e, eo in of_kind(model, "Exporter", ns).items()
                if selector.matches(labels(eo))
            }
        if key.kind == "ExporterAccessPolicy":
            selector = compiled(o["spec"]["exporterSelector"])
            edges |= {
                Edge(key, "spec.exporterSelector", e)
                for e, eo in of_kind(model, "Exporter", ns).items()
                if selector.matches(labels(eo))
            }
            for field, selector in client_selectors(o):
                edges |= {
                    Edge(key, field, c)
                    for c, co in of_kind(model, "Client", ns).items()
                    if selector.matches(labels(co))
                }
    return edges


def brute_route(model: Model, change: Change) -> set[str]:
    key, ns = change.key, change.key.namespace
    versions = [o for o in (change.old, change.new) if o is not None]
    concerned: set[ObjectKey] = set()
    if key.kind == "Exporter":
        for lease, lo in live_leases(model, ns).items():
            selector = compiled(lo["spec"]["selector"])
            names = {ref(lo, "spec", "exporterRef"), ref(lo, "status", "exporterRef")}
            status_only = len(versions) == 2 and labels(versions[0]) == labels(versions[1]) \
                and versions[0].get("spec") == versions[1].get("spec")
            if key.name in names or (not status_only and any(selector.matches(labels(v)) for v in versions)):
                concerned.add(lease)
    elif key.kind == "Lease":
        for v in versions:
            for part in ("spec", "status"):
                if name := ref(v, part, "exporterRef"):
                    concerned.add(ObjectKey("Exporter", ns, name))
    elif key.kind == "Client":
        concerned = {lease for lease, lo in live_leases(model, ns).items() if ref(lo, "spec", "clientRef") == key.name}
    elif key.kind == "ExporterAccessPolicy":
        selectors = [selector for v in versions for _, selector in client_selectors(v)]
        for lease, lo in live_leases(model, ns).items():
            client = model.get(ObjectKey("Client", ns, ref(lo, "spec", "clientRef") or ""))
            if client is not None and any(selector.matches(labels(client)) for selector in selectors):
                concerned.add(lease)
    concerned = {c for c in concerned if c in model}
    if key.kind in ACTORS:
        concerned.add(key)
    return {f"{ACTORS[c.kind]}/{c.namespace}/{c.name}" for c in concerned}


# -- the properties ---------------------------------------------------------


def replay(topology: Topology, model: Model, event: str, obj: dict) -> None:
    """Apply one event to both, checking the change and its route."""
    key = k(obj)
    before = model.get(key)
    change = topology.apply(event, obj)
    if event == DELETED:
        if before is None:
            assert change is None
            return
        del model[key]
        assert change == Deleted(key.kind, key, before, None)
    else:
        model[key] = obj
        expected = Created if before is None else Updated
        assert change == expected(key.kind, key, before, obj)
    assert set(topology.route(change)) == brute_route(model, change)


def check_queries(topology: Topology, model: Model, selectors: list[dict], label_probes: list[dict]) -> None:
    all_keys = {ObjectKey(kind, ns, name) for kind in KINDS for ns in NAMESPACES for name in NAMES}
    edges = brute_edges(model)
    for key in all_keys:
        assert set(topology.edges_from(key)) == {e for e in edges if e.source == key}, key
        # Into a client: the policies whose clientSelector matches it (the client-selector index).
        assert set(topology.edges_to(key)) == {e for e in edges if e.target == key}, key
    assert topology.keys() == set(model)
    probes = label_probes + [labels(o) for o in model.values()]
    for ns in NAMESPACES:
        for raw in selectors:
            selector = parse_selector(raw)
            for kind in ("Exporter", "Client"):
                expected = {c for c, co in of_kind(model, kind, ns).items() if selector.matches(labels(co))}
                assert topology.select(kind, ns, selector) == expected
        policies = of_kind(model, "ExporterAccessPolicy", ns)
        for probe in probes:
            assert topology.leases_selecting(ns, probe) == {
                lease for lease, lo in live_leases(model, ns).items() if compiled(lo["spec"]["selector"]).matches(probe)
            }
            assert topology.policies_for_exporter(ns, probe) == {
                p for p, po in policies.items() if compiled(po["spec"]["exporterSelector"]).matches(probe)
            }


def replay_step(topology: Topology, model: Model, event: str, item: Any) -> None:
    if event != DELETED:
        replay(topology, model, event, item)
    elif model:
        replay(topology, model, DELETED, list(model.values())[item % len(model)])
    else:
        unknown = {"apiVersion": "lessor.dev/v1alpha1", "kind": "Exporter", "metadata": metadata("n1", "a", {})}
        replay(topology, model, DELETED, unknown)


@settings(max_examples=200, deadline=None)
@given(
    steps,
    st.lists(any_valid_selectors, max_size=4),
    st.lists(label_sets, max_size=3),
)
def test_indexes_and_routes_agree_with_a_scan(sequence: Steps, selectors: list[dict], probes: list[dict]) -> None:
    topology: Topology = Topology()
    model: Model = {}
    for event, item in sequence:
        replay_step(topology, model, event, item)
    check_queries(topology, model, selectors, probes)


@settings(max_examples=100, deadline=None)
@given(steps)
def test_indexes_agree_with_a_scan_after_every_event(sequence: Steps) -> None:
    topology: Topology = Topology()
    model: Model = {}
    for event, item in sequence:
        replay_step(topology, model, event, item)
        check_queries(topology, model, [{}], [])


@settings(max_examples=300, deadline=None)
@given(st.lists(objects(ns="n1"), max_size=12), st.sampled_from(KINDS), st.data())
def test_successive_versions_of_one_object_are_routed_by_the_rules(
    world: list[dict], kind: str, data: st.DataObject
) -> None:
    """Many versions of one object (None: deleted) in a crowded namespace: every old/new pair."""
    topology: Topology = Topology()
    model: Model = {}
    for obj in world:
        replay(topology, model, ADDED, obj)
    versions = data.draw(st.lists(st.none() | objects(kind, "n1", "a"), min_size=1, max_size=6))
    for version in versions:
        if version is not None:
            replay(topology, model, MODIFIED, version)
        else:
            key = ObjectKey(kind, "n1", "a")
            stub = {"apiVersion": "lessor.dev/v1alpha1", "kind": kind, "metadata": metadata("n1", "a", {})}
            replay(topology, model, DELETED, model.get(key, stub))
    check_queries(topology, model, [], [])


@settings(max_examples=300, deadline=None)
@given(st.lists(label_sets, max_size=40), st.lists(any_valid_selectors, min_size=1, max_size=5))
def test_selector_queries_over_many_exporters_agree_with_a_scan(population: list[dict], selectors: list[dict]) -> None:
    topology = Topology()
    exporters = {}
    for index, exporter_labels in enumerate(population):
        exporter = {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "Exporter",
            "metadata": metadata("n1", f"e{index}", exporter_labels),
        }
        topology.apply(ADDED, exporter)
        exporters[k(exporter)] = exporter_labels
    for raw in selectors:
        selector = parse_selector(raw)
        assert topology.exporters("n1", selector) == {
            key for key, found in exporters.items() if selector.matches(found)
        }
        assert topology.exporters("n2", selector) == set()


@settings(max_examples=100, deadline=None)
@given(steps)
def test_deleting_everything_leaves_nothing_to_find(sequence: Steps) -> None:
    topology: Topology = Topology()
    model: Model = {}
    for event, item in sequence:
        replay_step(topology, model, event, item)
    for obj in list(model.values()):
        replay(topology, model, DELETED, obj)
    assert len(topology) == 0
    check_queries(topology, model, [{}], [{}, {"k1": "v1"}])
    assert topology.to_dot().count("->") == 0
