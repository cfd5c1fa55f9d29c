"""`lessor convert`: Poolboy and Jumpstarter manifests to lessor's, with a report of what does not carry over;
and the converted sample sets work against the real API server."""

from __future__ import annotations

import datetime as dt
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.gateway import Gateway, Resource
from lessor.gateway.resources import CLAIM, CLIENT, CONFIGMAP, EXPORTER, HANDLE, LEASE, POLICY, POOL, PROVIDER
from lessor.tools.porting import convert
from lessor.tools.porting.commands import run_convert
from lessor.templates import render_object, template_variables
from tests.polling import gone, until

DATA = Path(__file__).parent / "data"
OPS = "lessor-system"
POOLBOY = "poolboy.gpte.redhat.com/v1"
KINDS = {r.kind: r for r in (CLAIM, CLIENT, EXPORTER, HANDLE, LEASE, POLICY, POOL, PROVIDER)}


def samples(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DATA / name).read_text()) if doc]


def provider(**spec: Any) -> dict[str, Any]:
    spec.setdefault("override", {"apiVersion": "v1", "kind": "ConfigMap"})
    return {"apiVersion": POOLBOY, "kind": "ResourceProvider", "metadata": {"name": "p", "namespace": "poolboy"},
            "spec": spec}


def notes_of(result: Any) -> dict[str, str]:
    return {note.field: note.message for note in result.notes}


# --------------------------------------------------------------------------- conversion rules


def test_poolboy_samples_become_lessor_objects_in_the_operator_namespace() -> None:
    result = convert(samples("poolboy/samples.yaml"))
    kinds = [(o["kind"], o["metadata"]["namespace"]) for o in result.objects]
    assert kinds == [("ResourceProvider", OPS), ("ResourcePool", OPS), ("ResourceClaim", "poolboy-test"),
                     ("ResourceProvider", OPS), ("ResourceClaim", "poolboy-test"),
                     ("ResourceProvider", OPS), ("ResourceClaim", "poolboy-test")]  # the last two in provider mode
    assert {o["apiVersion"] for o in result.objects} == {"lessor.dev/v1alpha1"}
    pool = result.objects[1]
    assert pool["spec"]["resources"][0]["provider"] == {"name": "test-pool"}  # Poolboy's namespace is gone
    moved = [n for n in result.notes if n.field == "metadata.namespace"]
    assert len(moved) == 4 and all(not n.dropped for n in moved)
    assert not [n for n in result.notes if n.dropped]  # everything else carries over


def test_approval_and_the_status_summary_carry_over() -> None:
    summary = {"url": "{{ resources[0].state.data.url }}"}
    result = convert([provider(approval={"required": True, "pendingMessage": "Waiting for the lab lead"},
                               statusSummaryTemplate=summary, healthCheck="status.phase != 'Failed'")])
    [obj] = result.objects
    assert obj["spec"]["approval"] == {"required": True, "pendingMessage": "Waiting for the lab lead"}
    assert obj["spec"]["statusSummaryTemplate"] == summary
    assert obj["spec"]["healthCheck"] == "status.phase != 'Failed'"
    assert not {"spec.approval", "spec.statusSummaryTemplate", "spec.healthCheck"} & set(notes_of(result))


def test_what_lessor_lacks_is_left_out_and_named_with_the_reason() -> None:
    result = convert([provider(futureField=1)])
    notes = notes_of(result)
    [obj] = result.objects
    assert set(obj["spec"]) == {"override"}
    assert notes["spec.futureField"] == "lessor does not implement it"
    assert all(str(n).startswith("ResourceProvider poolboy/p: ") for n in result.notes)


def test_provider_mode_carries_over_for_claims_typed_as_poolboy_renders_it() -> None:
    parameters = [{"name": "size", "required": True, "default": {"template": "{{ 1 + 1 }}"}}]
    source = provider(parameters=parameters, resourceClaimLabels={"team": "qa"},
                      linkedResourceProviders=[{"name": "base", "parameterValues": {"size": "{{ size }}"}}],
                      template={"definition": {"data": {"size": "{{ size }}", "n": "{{ size | int }}"}}})
    claim = {"apiVersion": POOLBOY, "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "u"},
             "spec": {"provider": {"apiVersion": POOLBOY, "kind": "ResourceProvider", "name": "p",
                                   "namespace": "poolboy", "parameterValues": {"size": 2}}}}
    result = convert([source, claim])
    converted, claimed = result.objects
    assert converted["spec"]["template"] == {"enable": False, "definition": {
        "data": {"size": "{{ (size) | string }}", "n": "{{ size | int }}"}}}
    assert converted["spec"]["parameters"][0]["default"] == {"template": "{{ (1 + 1) | string }}"}
    assert converted["spec"]["resourceClaimLabels"] == {"team": "qa"}
    assert converted["spec"]["linkedResourceProviders"] == [
        {"name": "base", "parameterValues": {"size": "{{ (size) | string }}"}}]
    assert claimed["spec"] == {"provider": {"name": "p", "parameterValues": {"size": 2}}}
    # Each string typed, the provider's move and the claim's trimmed reference are changes, and only changes.
    assert [(n.field, n.verb) for n in result.notes] == [
        ("metadata.namespace", "changed"), ("spec.template.definition.data.size", "changed"),
        ("spec.linkedResourceProviders[0].parameterValues.size", "changed"),
        ("spec.parameters[0].default.template", "changed"), ("spec.provider", "changed")]
    assert notes_of(result)["spec.provider"] == "without apiVersion, kind, namespace: lessor reads only name and " \
                                                "parameterValues"


def test_pools_in_provider_mode_and_pool_scalings_are_converted() -> None:
    pool = {"apiVersion": POOLBOY, "kind": "ResourcePool", "metadata": {"name": "c", "namespace": "poolboy"},
            "spec": {"provider": {"apiVersion": POOLBOY, "kind": "ResourceProvider", "name": "p",
                                  "namespace": "poolboy", "parameterValues": {"size": 2}}, "minAvailable": 1}}
    scaling = {"apiVersion": POOLBOY, "kind": "ResourcePoolScaling", "metadata": {"name": "s", "namespace": "poolboy"},
               "spec": {"resourcePool": {"name": "x"}, "count": 5, "at": "2026-05-01T08:00:00+00:00"}}
    result = convert([pool, scaling])
    converted, scaled = result.objects
    assert converted["spec"] == {"provider": {"name": "p", "parameterValues": {"size": 2}}, "minAvailable": 1}
    assert scaled == {"apiVersion": "lessor.dev/v1alpha1", "kind": "ResourcePoolScaling",
                      "metadata": {"name": "s", "namespace": "lessor-system"},
                      "spec": {"resourcePool": {"name": "x", "namespace": "lessor-system"}, "count": 5,
                               "at": "2026-05-01T08:00:00+00:00"}}
    assert [(str(n).split(":")[0], n.field) for n in result.notes] == [
        ("ResourcePool poolboy/c", "metadata.namespace"), ("ResourcePool poolboy/c", "spec.provider"),
        ("ResourcePoolScaling poolboy/s", "metadata.namespace"), ("ResourcePoolScaling poolboy/s", "spec.resourcePool")]


def test_poolboys_ignore_label_becomes_lessors() -> None:
    claim = {"apiVersion": POOLBOY, "kind": "ResourceClaim",
             "metadata": {"name": "c", "namespace": "u", "labels": {"poolboy.gpte.redhat.com/ignore": "",
                                                                     "team": "qa"}},
             "spec": {"resources": [{"provider": {"name": "p"}}]}}
    result = convert([claim])
    assert result.objects[0]["metadata"]["labels"] == {"team": "qa", "lessor.dev/ignore": ""}
    assert [str(n) for n in result.notes] == [
        "ResourceClaim u/c: metadata.labels.poolboy.gpte.redhat.com/ignore: changed: -> lessor.dev/ignore"]


def test_a_claim_template_keeps_the_name_of_its_resource_and_loses_its_namespace_with_a_note() -> None:
    """lessor lets a claim name its resource where the provider's schema declares metadata.name (Poolboy's way);
    a claim never places it."""
    claim = {"apiVersion": POOLBOY, "kind": "ResourceClaim", "metadata": {"name": "test-01", "namespace": "u"},
             "spec": {"resources": [{"provider": {"name": "test-01"},
                                     "template": {"metadata": {"name": "test-01-a", "namespace": "x"}}}]}}
    result = convert([claim])
    assert result.objects[0]["spec"]["resources"][0] == {"provider": {"name": "test-01"},
                                                         "template": {"metadata": {"name": "test-01-a"}}}
    notes = notes_of(result)
    assert "spec.resources[0].template.metadata.name" not in notes
    assert "cannot choose the namespace" in notes["spec.resources[0].template.metadata.namespace"]


def test_lone_expressions_render_to_text_as_in_poolboy() -> None:
    override = {"apiVersion": "v1", "kind": "ConfigMap",
                "data": {"index": "{{ resource_index }}", "count": "{{ n | int }}", "mixed": "i-{{ resource_index }}",
                         "plain": "x", "trimmed": "{{- resource_index -}}"}}
    [obj] = convert([provider(template={"enable": True}, override=override)]).objects
    data = obj["spec"]["override"]["data"]
    assert data["count"] == "{{ n | int }}" and data["mixed"] == "i-{{ resource_index }}" and data["plain"] == "x"
    rendered = render_object(data, {**template_variables(resource_index=0), "n": "7"})
    assert rendered == {"index": "0", "count": 7, "mixed": "i-0", "plain": "x", "trimmed": "0"}
    # Without template.enable nothing is a template, and nothing changes.
    [obj] = convert([provider(override=override)]).objects
    assert obj["spec"]["override"] == override


def test_template_names_lessor_lacks_are_reported() -> None:
    override = {"apiVersion": "v1", "kind": "ConfigMap",
                "data": {"who": "{% set c = cycler('a', 'b') %}{{ c.next() }}", "x": "omit me",
                         "when": "{{ now(true) }}", "id": "{{ '[a-z]{5}' | strgen }}"}}
    result = convert([provider(template={"enable": True}, override=override)])
    notes = {n.field: n for n in result.notes}
    assert notes["spec.override.data.who"].verb == "will not work"
    assert "no function 'cycler'" in notes["spec.override.data.who"].message
    assert "loop.cycle" in notes["spec.override.data.who"].message
    assert "spec.override.data.x" not in notes  # not a template
    # Poolboy's own functions are lessor's too (templates/poolboy.py): nothing that will not work.
    assert [notes[f].verb for f in ("spec.override.data.when", "spec.override.data.id")] == ["changed", "changed"]


def test_lifespan_templates_carry_over() -> None:
    lifespan = {"default": "{% if 'x' in resource_claim.annotations %}12h{% else %}30m{% endif %}",
                "maximum": "2d", "unclaimed": "{{ '6h' }}"}
    result = convert([provider(lifespan=dict(lifespan))])
    [obj] = result.objects
    assert obj["spec"]["lifespan"] == {"default": lifespan["default"], "maximum": "2d"}
    assert "is not a duration" in notes_of(result)["spec.lifespan.unclaimed"]  # applies before any claim
    assert set(notes_of(result)) == {"metadata.namespace", "spec.lifespan.unclaimed"}


def test_metadata_keeps_what_users_wrote_and_drops_the_old_operators_bookkeeping() -> None:
    handle = {"apiVersion": POOLBOY, "kind": "ResourceHandle",
              "metadata": {"name": "guid-abcde", "generateName": "guid-", "namespace": "poolboy", "uid": "u1",
                           "resourceVersion": "9", "finalizers": ["poolboy.gpte.redhat.com"],
                           "labels": {"poolboy.gpte.redhat.com/resource-pool-name": "p", "team": "a"}},
              "spec": {"resourcePool": {"apiVersion": POOLBOY, "kind": "ResourcePool", "name": "p",
                                        "namespace": "poolboy"},
                       "resources": [{"provider": {"name": "p", "namespace": "poolboy"}, "template": {}}],
                       "lifespan": {"maximum": "7 days"}},
              "status": {"ready": True}}
    result = convert([handle])
    [obj] = result.objects
    assert obj["metadata"] == {"name": "guid-abcde", "generateName": "guid-", "namespace": OPS,
                               "labels": {"team": "a"}}
    assert obj["spec"]["resourcePool"] == {"name": "p", "namespace": OPS}
    assert "lifespan" in obj["spec"] and "maximum" not in obj["spec"]["lifespan"]
    assert "status" not in obj
    assert set(notes_of(result)) >= {"metadata.labels.poolboy.gpte.redhat.com/resource-pool-name",
                                     "metadata.finalizers", "spec.lifespan.maximum", "status", "spec.resourcePool",
                                     "spec.resources[0].provider"}
    verbs = {n.field: n.verb for n in result.notes}
    assert verbs["status"] == verbs["metadata.labels.poolboy.gpte.redhat.com/resource-pool-name"] == "replaced"
    assert verbs["spec.lifespan.maximum"] == verbs["metadata.finalizers"] == "left out"


def test_a_claim_pinned_to_a_pool_keeps_its_pin_under_lessors_annotation() -> None:
    claim = {"apiVersion": POOLBOY, "kind": "ResourceClaim",
             "metadata": {"name": "c", "namespace": "u", "annotations": {
                 "poolboy.gpte.redhat.com/resource-pool-name": "big", "note": "x",
                 "poolboy.gpte.redhat.com/resource-handle-name": "guid-abcde"}},
             "spec": {"resources": [{"provider": {"name": "p"}, "template": {}}]}}
    result = convert([claim])
    assert result.objects[0]["metadata"]["annotations"] == {"note": "x", "lessor.dev/resource-pool-name": "big"}
    assert not notes_of(result)["metadata.annotations.poolboy.gpte.redhat.com/resource-pool-name"].startswith("the")


def test_a_handle_made_for_a_scaling_keeps_the_scalings_label_under_lessors_domain() -> None:
    """So that its pool counts it as extra, never a surplus to delete."""
    handle = {"apiVersion": POOLBOY, "kind": "ResourceHandle",
              "metadata": {"name": "guid-abcde", "namespace": "poolboy", "labels": {
                  "poolboy.gpte.redhat.com/resource-pool-name": "p",
                  "poolboy.gpte.redhat.com/resource-pool-scaling-name": "event"}},
              "spec": {"resources": [{"provider": {"name": "p"}, "template": {}}]}}
    result = convert([handle])
    assert result.objects[0]["metadata"]["labels"] == {"lessor.dev/resource-pool-scaling": "event"}
    assert notes_of(result)["metadata.labels.poolboy.gpte.redhat.com/resource-pool-scaling-name"] == \
        "-> lessor.dev/resource-pool-scaling"


def test_jumpstarter_samples_carry_over_whole_but_the_agents_status() -> None:
    docs = samples("jumpstarter/samples.yaml")
    result = convert(docs)
    assert [o["kind"] for o in result.objects] == ["Client", "Exporter", "ExporterAccessPolicy", "Lease"]
    for old, new in zip(docs, result.objects):
        assert new["spec"] == old["spec"] and new["metadata"] == old["metadata"]
    assert [(n.field, n.verb) for n in result.notes] == [("status", "replaced")]


def test_their_other_kinds_are_reported_and_left_out() -> None:
    exporter_set = {"apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSet",
                    "metadata": {"name": "s", "namespace": "lab"}, "spec": {}}
    result = convert([exporter_set])
    assert result.objects == []
    assert [str(n) for n in result.notes] == ["ExporterSet lab/s: (object): left out: lessor has no ExporterSet: "
                                              "not converted"]


def test_other_kinds_and_lists_pass_through() -> None:
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    result = convert([{"apiVersion": "v1", "kind": "List", "items": [configmap, provider()]}])
    assert [o["kind"] for o in result.objects] == ["ConfigMap", "ResourceProvider"]
    assert result.objects[0] == configmap
    assert [str(n) for n in result.notes if n.subject.startswith("ConfigMap")] == [
        "ConfigMap /c: (object): copied unchanged: not a Poolboy or Jumpstarter kind"]  # not "changed"


# --------------------------------------------------------------------------- the command


def test_the_command_writes_yaml_and_reports_on_stderr() -> None:
    out, err = io.StringIO(), io.StringIO()
    code = run_convert([], operator_namespace="ops", stdin=io.StringIO(yaml.safe_dump(provider(
        futureField=[]))), stdout=out, stderr=err)
    assert code == 1  # something was left out
    [obj] = list(yaml.safe_load_all(out.getvalue()))
    assert obj["metadata"]["namespace"] == "ops"
    assert "ResourceProvider poolboy/p: spec.futureField: left out: lessor does not implement it" in err.getvalue()
    assert "1 objects written; fields or objects: 1 left out, 0 will not work, 1 changed, 0 replaced, " \
           "0 copied unchanged" in err.getvalue()
    assert err.getvalue().endswith("lessor convert: error: 1 left out (listed above): exit status 1; --allow-loss "
                                   "accepts this\n")


@pytest.mark.parametrize(("stdin", "args", "message"), [
    ("a: [", [], "standard input is not YAML"),
    ("just text", [], "document 1 is not a Kubernetes object (it needs apiVersion and kind)"),
    ("", [], "no objects in the input"),
    ("", ["/nonexistent/x.yaml"], "cannot read /nonexistent/x.yaml: No such file or directory"),
])
def test_bad_input_gets_a_clear_error(stdin: str, args: list[str], message: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert run_convert(args, operator_namespace=OPS, stdin=io.StringIO(stdin), stdout=out, stderr=err) == 2
    assert message in err.getvalue() and out.getvalue() == ""


def test_convert_has_help(tmp_path: Path) -> None:
    exe = str(Path(sys.executable).parent / "lessor")
    done = subprocess.run([exe, "convert", "--help"], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert "every field that does not carry over" in " ".join(done.stdout.split()).lower()


# --------------------------------------------------------------------------- real API server


async def _create_strict(kube: Gateway, res: Resource, namespace: str, body: dict[str, Any]) -> None:
    await kube.request("create", res.kind, "POST", res.path(namespace), body=body,
                       params={"fieldValidation": "Strict"})


def _ready(obj: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or ())


@pytest.mark.usefixtures("operator")
async def test_converted_samples_work_on_the_api_server(kube: Gateway, namespace: str) -> None:
    text = (DATA / "poolboy" / "samples.yaml").read_text() + "\n---\n" + (DATA / "jumpstarter" / "samples.yaml").read_text()
    text = text.replace("poolboy-test", namespace).replace("jumpstarter-lab", namespace)
    text = text.replace("name: test-pool\n", "name: conv-pool\n").replace("name: test-vars\n", "name: conv-vars\n")
    out, err = io.StringIO(), io.StringIO()
    assert run_convert([], operator_namespace=OPS, stdin=io.StringIO(text), stdout=out, stderr=err) == 0
    made: list[tuple[Resource, str]] = []
    try:
        for obj in yaml.safe_load_all(out.getvalue()):
            res = KINDS[obj["kind"]]
            await _create_strict(kube, res, obj["metadata"]["namespace"], obj)
            if obj["metadata"]["namespace"] == OPS:
                made.append((res, obj["metadata"]["name"]))
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await kube.patch_status(EXPORTER, namespace, "rpi4-01", {"lastSeen": now, "exporterStatus": "Available"})

        claim = await until(kube, CLAIM, namespace, "conv-pool", _ready)
        guid = claim["status"]["resourceHandle"]["name"].removeprefix("guid-")
        assert (await kube.get(CONFIGMAP, namespace, f"test-pool-{guid}"))["data"] == {"value": "foo"}
        claim = await until(kube, CLAIM, namespace, "conv-vars", _ready)
        guid = claim["status"]["resourceHandle"]["name"].removeprefix("guid-")
        assert (await kube.get(CONFIGMAP, namespace, f"web-{guid}"))["data"]["greeting"] == "hello from demo"
        lease = await until(kube, LEASE, namespace, "nightly-1234", _ready)
        assert lease["status"]["exporterRef"]["name"] == "rpi4-01"
    finally:
        for res, name in reversed(made):
            await kube.delete(res, OPS, name)
        for res, name in made:
            await gone(kube, res, OPS, name)
