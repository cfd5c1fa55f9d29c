"""Least privilege, measured: deploy/rbac.yaml grants what the operator used during the pod run, no more.

The API server's audit log (on for the pod run only) records every request of
the operator's ServiceAccount. A grant that no request used must be listed in
tests/deploy/rbac_allowlist.yaml with its reason, or removed from rbac.yaml.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.shipped import manifests
pytestmark = pytest.mark.apiserver
ALLOWLIST = Path(__file__).with_name("rbac_allowlist.yaml")
SERVICE_ACCOUNT = ("lessor-system", "lessor")

Grant = tuple[str, str, str]
"""(apiGroup, resource[/subresource], verb)"""


def rbac() -> list[dict[str, Any]]:
    text = resources.files("lessor.deploy").joinpath("rbac.yaml").read_text()
    return list(manifests.load_documents([text]))


def granted(docs: Iterable[Mapping[str, Any]], namespace: str, name: str) -> dict[Grant, str]:
    """Every (group, resource, verb) that the bindings in `docs` give the ServiceAccount,
    with the role that grants it."""
    docs = list(docs)
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
             for d in docs if d["kind"] in ("Role", "ClusterRole")}
    grants: dict[Grant, str] = {}
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(s["kind"] == "ServiceAccount" and (s.get("namespace"), s["name"]) == (namespace, name)
                   for s in binding.get("subjects", [])):
            continue
        ref = binding["roleRef"]
        role_ns = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles[(ref["kind"], role_ns, ref["name"])]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        grants[(group, resource, verb)] = f"{role['kind']} {ref['name']}"
    return grants


def used(audit: Iterable[Mapping[str, Any]]) -> set[Grant]:
    """What the requests needed. A server-side apply answered 201 created its object: the API
    server authorized it as a create too, though the audit event's verb is patch."""
    needed: set[Grant] = set()
    for event in audit:
        ref = event.get("objectRef") or {}
        if "resource" not in ref:
            continue  # discovery and other non-resource URLs
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        needed.add((ref.get("apiGroup", ""), resource, event["verb"]))
        if event["verb"] == "patch" and (event.get("responseStatus") or {}).get("code") == 201:
            needed.add((ref.get("apiGroup", ""), resource, "create"))
    return needed


def allowlist(*, timing: bool = True) -> dict[Grant, str]:
    """Allowlisted grants and their reasons; `timing=False` leaves out those a run may or may not use."""
    entries = yaml.safe_load(ALLOWLIST.read_text())
    return {(e["apiGroup"], e["resource"], verb): e["reason"]
            for e in entries for verb in e["verbs"] if timing or not e.get("timing")}


def test_no_wildcards_and_every_rule_names_its_resources() -> None:
    for doc in rbac():
        for rule in doc.get("rules", []):
            # A rule names resources of API groups, or (lessor-metrics-reader: get /metrics) non-resource URLs.
            fields = ("nonResourceURLs", "verbs") if "nonResourceURLs" in rule else ("apiGroups", "resources", "verbs")
            for field in fields:
                assert rule[field] and "*" not in rule[field], \
                    f"{doc['kind']} {doc['metadata']['name']}: {field} is empty or has '*'"


def test_every_grant_was_used_or_is_allowlisted_with_a_reason(operator_pod: Any) -> None:
    grants = granted(rbac(), *SERVICE_ACCOUNT)
    needed = used(operator_pod.audit())
    allowed = allowlist()
    assert all(reason.strip() for reason in allowed.values()), "an allowlist entry has no reason"
    unused = sorted(f"{role}: {verb} {group or 'core'}/{resource}"
                    for (group, resource, verb), role in grants.items()
                    if (group, resource, verb) not in needed and (group, resource, verb) not in allowed)
    assert not unused, ("deploy/rbac.yaml grants what the operator never used in the pod run; remove it, "
                        "or list it in tests/deploy/rbac_allowlist.yaml with the reason:\n" + "\n".join(unused))


def test_the_allowlist_holds_nothing_stale(operator_pod: Any) -> None:
    grants = granted(rbac(), *SERVICE_ACCOUNT)
    needed = used(operator_pod.audit())
    stale = [f"{verb} {group or 'core'}/{resource}: no longer granted"
             for group, resource, verb in allowlist() if (group, resource, verb) not in grants]
    stale += [f"{verb} {group or 'core'}/{resource}: used by the run now"
              for group, resource, verb in allowlist(timing=False) if (group, resource, verb) in needed]
    assert not stale, "remove these entries from tests/deploy/rbac_allowlist.yaml:\n" + "\n".join(stale)


def test_everything_used_was_granted(operator_pod: Any) -> None:
    """The other side of the measure (zero 403s says it too): nothing the run did rests on a grant
    from outside deploy/rbac.yaml (such as a default role)."""
    grants = granted(rbac(), *SERVICE_ACCOUNT)
    outside = sorted(f"{verb} {group or 'core'}/{resource}" for group, resource, verb in used(operator_pod.audit())
                     if (group, resource, verb) not in grants)
    assert not outside, outside


def test_the_measure_sees_an_unused_grant() -> None:
    """The comparison itself: an extra verb in a role shows up as granted and not used."""
    docs = rbac()
    extra = [{**d, "rules": [*d["rules"], {"apiGroups": ["apps"], "resources": ["deployments"],
                                            "verbs": ["delete"]}]} if d["kind"] == "ClusterRole" else d
             for d in docs]
    assert ("apps", "deployments", "delete") in granted(extra, *SERVICE_ACCOUNT)
    assert ("apps", "deployments", "delete") not in granted(docs, *SERVICE_ACCOUNT)
    apply = {"verb": "patch", "objectRef": {"resource": "configmaps"}, "responseStatus": {"code": 201}}
    assert used([apply]) == {("", "configmaps", "patch"), ("", "configmaps", "create")}
