"""The CRDs, deploy manifests and samples, checked without an API server.

The CRDs are the API contract of DESIGN.md section 3. These tests read them
as shipped (package data of ``lessor.crds`` and ``lessor.deploy``) and check:

- naming (group, version, kind, plural, short names, the ``lessor`` category),
  the status subresource and the printer columns;
- that every schema is structural, as kube-apiserver requires;
- that every field DESIGN.md names is at its path, with its type (table-driven);
- that every sample validates against its CRD's schema, and that malformed
  objects do not.

To validate with jsonschema, the OpenAPI v3 schema is converted: the
``x-kubernetes-*`` extensions are dropped, and objects with declared properties
get ``additionalProperties: false`` so that an unknown field fails as it does
under kubectl's strict field validation (the API server would prune it).
"""

from __future__ import annotations

import copy
import datetime as dt
import importlib.resources
import re
from collections import Counter

import jsonschema
import pytest
import yaml

GROUP = "lessor.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# kind -> (plural, file)
KINDS = {
    "Exporter": "exporters",
    "Client": "clients",
    "ExporterAccessPolicy": "exporteraccesspolicies",
    "Lease": "leases",
    "ResourceProvider": "resourceproviders",
    "ResourcePool": "resourcepools",
    "ResourceHandle": "resourcehandles",
    "ResourceClaim": "resourceclaims",
    "ResourcePoolScaling": "resourcepoolscalings",
}

SHORT_NAMES = {
    "Exporter": ["exp"],
    "Client": ["lcl"],
    "ExporterAccessPolicy": ["eap"],
    "Lease": ["ll"],
    "ResourceProvider": ["rprov"],
    "ResourcePool": ["rpool"],
    "ResourceHandle": ["rh"],
    "ResourceClaim": ["rclaim"],
    "ResourcePoolScaling": ["rpscale"],
}

# Short names served by a kube-apiserver v1.35 (pkg/registry ShortNames(),
# plus the apiextensions and removed-but-remembered ones).
BUILTIN_SHORT_NAMES = {
    "cj", "cm", "crd", "crds", "cs", "csr", "deploy", "ds", "ep", "ev", "hpa",
    "ing", "ip", "limits", "netpol", "no", "ns", "pc", "pdb", "po", "psp", "pv",
    "pvc", "quota", "rc", "rs", "sa", "sc", "sts", "svc", "vac",
}
# Names of built-in resources a short name must not shadow either.
BUILTIN_RESOURCE_NAMES = {
    "pods", "pod", "services", "service", "nodes", "node", "events", "event",
    "leases", "lease", "endpoints", "configmaps", "secrets", "namespaces",
    "deployments", "replicasets", "statefulsets", "daemonsets", "jobs", "cronjobs",
    "resourceclaims", "resourceclaim", "resourceslices", "deviceclasses",
    "resourceclaimtemplates", "ingresses", "roles", "rolebindings", "clusterroles",
    "clusterrolebindings", "serviceaccounts", "all",
}

DURATION_OK = ["1h30m", "90s", "2h", "0", "1.5h", "300ms", "1h0m0s", "-5m", "2h45m30.5s", "876000h", "5µs"]
DURATION_BAD = ["1d", "abc", "", "h", "1 h", "1hour", "5", "99999999h", "1000000h", "1" * 20 + "ns"]
LIFESPAN_OK = ["1d", "3d", "7d", "1h", "30m", "90s", "1d12h", "1h30m", "0", "36500d", "876000h"]
LIFESPAN_BAD = ["-1d", "1w", "x", "", "d", "3 d", "{{ 3d }}", "99999999d", "100000d"]


# ---------------------------------------------------------------- loading


def _crd_dir():
    return importlib.resources.files("lessor.crds")


def _deploy_dir():
    return importlib.resources.files("lessor.deploy")


def _load_all(traversable):
    return [d for d in yaml.safe_load_all(traversable.read_text(encoding="utf-8")) if d is not None]


@pytest.fixture(scope="module")
def crds():
    """kind -> CRD, each from its own file <plural>.yaml."""
    out = {}
    files = sorted(p for p in _crd_dir().iterdir() if p.name.endswith(".yaml"))
    assert sorted(p.name for p in files) == sorted(f"{plural}.yaml" for plural in KINDS.values())
    for path in files:
        docs = _load_all(path)
        assert len(docs) == 1, f"{path.name}: one CRD per file"
        crd = docs[0]
        kind = crd["spec"]["names"]["kind"]
        assert path.name == f"{KINDS[kind]}.yaml"
        out[kind] = crd
    return out


def _schema(crd):
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _version(crd):
    return crd["spec"]["versions"][0]


@pytest.fixture(scope="module")
def samples():
    """[(file name, object)] in apply order."""
    sdir = _deploy_dir() / "samples"
    files = sorted((p for p in sdir.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name)
    return [(p.name, obj) for p in files for obj in _load_all(p)]


@pytest.fixture(scope="module")
def deploy():
    """file name -> [objects] for deploy/*.yaml."""
    d = _deploy_dir()
    return {p.name: _load_all(p) for p in d.iterdir() if p.name.endswith(".yaml")}


# ------------------------------------------------------- schema helpers


def walk(node, path="$"):
    """Yield (path, schema node) for every node of a structural schema."""
    yield path, node
    for name, sub in (node.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def lookup(schema, path):
    """The schema node at a dotted path; "[]" steps into array items."""
    node = schema
    for part in path.split("."):
        many = part.endswith("[]")
        name = part[:-2] if many else part
        props = node.get("properties") or {}
        assert name in props, f"no field {name!r} at {path!r}"
        node = props[name]
        if many:
            assert node.get("type") == "array", f"{path}: {name} should be an array"
            node = node["items"]
    return node


_MATCHES = re.compile(r"self\.matches\(r'(.*)'\)")


def typed_rules(node):
    """[(regex, message)] of a field's CEL rules `self.matches(r'...')`: how a typed field is checked."""
    if not isinstance(node, dict):
        return []
    rules = node.get("x-kubernetes-validations") or []
    return [(m.group(1), rule["message"]) for rule in rules if (m := _MATCHES.fullmatch(rule["rule"]))]


def typed_regex(node):
    """The one regex a typed field's CEL rule checks (no `pattern`: its refusal prints the regex)."""
    assert "pattern" not in node, "a typed field is checked by a CEL rule with a sentence, not a pattern"
    (regex, message), = typed_rules(node)
    assert message and "^" not in message, message
    return re.compile(regex)


def to_jsonschema(node):
    """OpenAPI v3 (structural, with Kubernetes extensions) -> strict JSON Schema."""
    if isinstance(node, list):
        return [to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {}
    regexes = [regex for regex, _ in typed_rules(node)]
    if regexes:  # a typed field's rule is a regular expression: check it here as a pattern
        out["allOf"] = [{"pattern": regex} for regex in regexes]
    for key, value in node.items():
        if key.startswith("x-kubernetes-"):
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {k: to_jsonschema(v) for k, v in value.items()}
        elif key in ("default", "enum", "example"):
            out[key] = copy.deepcopy(value)
        else:
            out[key] = to_jsonschema(value)
    if node.get("nullable"):
        out.pop("nullable")
        out["type"] = [out["type"], "null"]
    if (
        node.get("type") == "object"
        and "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


_format_checker = jsonschema.FormatChecker()


@_format_checker.checks("date-time", raises=ValueError)
def _rfc3339(value):
    if not isinstance(value, str):
        return True
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", value):
        raise ValueError(f"not RFC 3339: {value!r}")
    dt.datetime.fromisoformat(value.replace("z", "Z"))
    return True


def validator(crd):
    schema = to_jsonschema(_schema(crd))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema, format_checker=_format_checker)


def errors(crd, obj):
    return sorted(validator(crd).iter_errors(obj), key=lambda e: list(e.absolute_path))


_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(duration):
    """A Go (or day-form) duration string, in seconds."""
    if duration in ("0", "+0", "-0"):
        return 0.0
    sign = -1 if duration.startswith("-") else 1
    parts = re.findall(r"([0-9]*\.?[0-9]*)(ns|us|µs|ms|s|m|h|d)", duration.lstrip("+-"))
    return sign * sum(float(n) * _GO_UNITS[u] for n, u in parts)


# ------------------------------------------------------------- naming


@pytest.mark.parametrize("kind", KINDS)
def test_crd_naming(crds, kind):
    crd = crds[kind]
    plural = KINDS[kind]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.{GROUP}"
    spec = crd["spec"]
    assert spec["group"] == GROUP
    assert spec["scope"] == "Namespaced"
    names = spec["names"]
    assert names["kind"] == kind
    assert names["plural"] == plural
    assert names["singular"] == kind.lower()
    assert names["listKind"] == f"{kind}List"
    assert names["categories"] == ["lessor"]
    assert names["shortNames"] == SHORT_NAMES[kind]
    assert "preserveUnknownFields" not in spec or spec["preserveUnknownFields"] is False
    [version] = spec["versions"]
    assert version["name"] == VERSION
    assert version["served"] is True and version["storage"] is True
    assert version["subresources"] == {"status": {}}


def test_short_names_unique_and_not_builtin(crds):
    all_short = [s for crd in crds.values() for s in crd["spec"]["names"]["shortNames"]]
    assert all_short, "every kind has a short name"
    dupes = [s for s, n in Counter(all_short).items() if n > 1]
    assert not dupes
    assert not set(all_short) & BUILTIN_SHORT_NAMES
    assert not set(all_short) & BUILTIN_RESOURCE_NAMES
    own_names = {n for crd in crds.values() for n in (crd["spec"]["names"]["plural"], crd["spec"]["names"]["singular"])}
    assert not set(all_short) & own_names
    for s in all_short:
        assert re.fullmatch(r"[a-z][a-z0-9]*", s), s


# ----------------------------------------------------------- structural


ALLOWED_KEYS = {
    "type", "description", "properties", "items", "additionalProperties", "required",
    "enum", "default", "format", "pattern", "minimum", "maximum", "minLength", "maxLength",
    "minItems", "maxItems", "maxProperties", "nullable", "example",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-map-type", "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys", "x-kubernetes-validations",
}


@pytest.mark.parametrize("kind", KINDS)
def test_schema_is_structural(crds, kind):
    root = _schema(crds[kind])
    assert root["type"] == "object"
    assert root["properties"]["metadata"] == {"type": "object"}, "metadata may not be constrained beyond name"
    assert set(root["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    for path, node in walk(root):
        assert set(node) <= ALLOWED_KEYS, f"{path}: unexpected keys {set(node) - ALLOWED_KEYS}"
        if node.get("x-kubernetes-preserve-unknown-fields") and "type" not in node:
            continue  # any JSON value (a parameter's default), as the API server allows
        assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, f"{path}: untyped"
        if "properties" in node:
            assert node["type"] == "object", path
            assert "additionalProperties" not in node, f"{path}: properties with additionalProperties"
        if "additionalProperties" in node:
            assert isinstance(node["additionalProperties"], dict), f"{path}: additionalProperties must be a schema"
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert node["x-kubernetes-preserve-unknown-fields"] is True
            assert node["type"] == "object", f"{path}: preserve-unknown-fields only with type object"
        if node["type"] == "array":
            assert isinstance(node.get("items"), dict), f"{path}: array without items schema"
        for key in node.get("required", []):
            assert key in node.get("properties", {}), f"{path}: required {key!r} not declared"
        if "x-kubernetes-map-type" in node:
            assert node["type"] == "object"
        if node.get("x-kubernetes-list-type") == "map":
            keys = node["x-kubernetes-list-map-keys"]
            items = node["items"]
            assert items["type"] == "object"
            for k in keys:
                assert k in items.get("required", []) or "default" in items["properties"][k], f"{path}: map key {k}"
                assert items["properties"][k]["type"] in {"string", "integer", "boolean"}
        if "pattern" in node:
            # RE2 (the API server) has no lookaround nor backreferences.
            assert not re.search(r"\(\?[=!<]|\\[1-9]", node["pattern"]), path
            re.compile(node["pattern"])
        if "default" in node:
            jsonschema.Draft4Validator(to_jsonschema(node), format_checker=_format_checker).validate(node["default"])


@pytest.mark.parametrize("kind", KINDS)
def test_what_a_person_types_is_refused_with_a_sentence(crds, kind):
    """No `pattern` in a spec: the API server's refusal would print the regular expression. A CEL rule
    with a message says what is expected instead, and is cheap enough for the server's cost budget
    (a bounded string; tests/deploy/test_crds_server.py installs every CRD and sees the sentences)."""
    for path, node in walk(_schema(crds[kind])["properties"]["spec"], "spec"):
        assert "pattern" not in node, f"{path}: a pattern failure shows the regex; use a CEL rule with a message"
        for rule in node.get("x-kubernetes-validations", []):
            assert rule.get("message") or rule.get("messageExpression"), f"{path}: {rule['rule']} has no message"
        if typed_rules(node):
            # A lifespan setting may be a template (Poolboy's), so it may be longer; a typed value is still short.
            longest = 1024 if typed_regex(node).search("{{ x }}") else 64
            assert node["type"] == "string" and node.get("maxLength", 1000) <= longest, path


@pytest.mark.parametrize("kind", KINDS)
def test_schema_converts_to_valid_jsonschema(crds, kind):
    validator(crds[kind])


# -------------------------------------------- DESIGN.md section 3 fields

# (kind, path, type). "[]" marks array items. Every field DESIGN.md section 3
# names, at its path.
FIELDS = [
    ("Exporter", "spec.enabled", "boolean"),
    ("Exporter", "status.lastSeen", "string"),
    ("Exporter", "status.exporterStatus", "string"),
    ("Exporter", "status.leaseRef", "object"),
    ("Exporter", "status.leaseRef.name", "string"),
    ("Exporter", "status.conditions", "array"),
    ("Client", "spec.username", "string"),
    ("ExporterAccessPolicy", "spec.exporterSelector", "object"),
    ("ExporterAccessPolicy", "spec.policies", "array"),
    ("ExporterAccessPolicy", "spec.policies[].description", "string"),
    ("ExporterAccessPolicy", "spec.policies[].priority", "integer"),
    ("ExporterAccessPolicy", "spec.policies[].from", "array"),
    ("ExporterAccessPolicy", "spec.policies[].from[].clientSelector", "object"),
    ("ExporterAccessPolicy", "spec.policies[].maximumDuration", "string"),
    ("ExporterAccessPolicy", "spec.policies[].spotAccess", "boolean"),
    ("Lease", "spec.clientRef.name", "string"),
    ("Lease", "spec.selector", "object"),
    ("Lease", "spec.exporterRef.name", "string"),
    ("Lease", "spec.duration", "string"),
    ("Lease", "spec.beginTime", "string"),
    ("Lease", "spec.endTime", "string"),
    ("Lease", "spec.release", "boolean"),
    ("Lease", "spec.allowDisabled", "boolean"),
    ("Lease", "status.exporterRef.name", "string"),
    ("Lease", "status.beginTime", "string"),
    ("Lease", "status.endTime", "string"),
    ("Lease", "status.ended", "boolean"),
    ("Lease", "status.priority", "integer"),
    ("Lease", "status.spotAccess", "boolean"),
    ("Lease", "status.conditions", "array"),
    ("ResourceProvider", "spec.default", "object"),
    ("ResourceProvider", "spec.override", "object"),
    ("ResourceProvider", "spec.match", "object"),
    ("ResourceProvider", "spec.matchIgnore", "array"),
    ("ResourceProvider", "spec.matchIgnore[]", "string"),
    ("ResourceProvider", "spec.updateFilters[].pathMatch", "string"),
    ("ResourceProvider", "spec.updateFilters[].allowedOps", "array"),
    ("ResourceProvider", "spec.updateFilters[].allowedOps[]", "string"),
    ("ResourceProvider", "spec.validation.openAPIV3Schema", "object"),
    ("ResourceProvider", "spec.validation.checks[].name", "string"),
    ("ResourceProvider", "spec.validation.checks[].check", "string"),
    ("ResourceProvider", "spec.lifespan.default", "string"),
    ("ResourceProvider", "spec.lifespan.maximum", "string"),
    ("ResourceProvider", "spec.lifespan.relativeMaximum", "string"),
    ("ResourceProvider", "spec.lifespan.unclaimed", "string"),
    ("ResourceProvider", "spec.resourceRequiresClaim", "boolean"),
    ("ResourceProvider", "spec.resourceName", "string"),
    ("ResourceProvider", "spec.template.enable", "boolean"),
    ("ResourcePool", "spec.minAvailable", "integer"),
    ("ResourcePool", "spec.maxUnready", "integer"),
    ("ResourcePool", "spec.resources[].name", "string"),
    ("ResourcePool", "spec.resources[].provider.name", "string"),
    ("ResourcePool", "spec.resources[].template", "object"),
    ("ResourcePool", "spec.lifespan.default", "string"),
    ("ResourcePool", "spec.lifespan.maximum", "string"),
    ("ResourcePool", "spec.lifespan.relativeMaximum", "string"),
    ("ResourcePool", "spec.lifespan.unclaimed", "string"),
    ("ResourcePool", "status.resourceHandleCount.available", "integer"),
    ("ResourcePool", "status.resourceHandleCount.ready", "integer"),
    ("ResourcePool", "status.resourceHandles[].name", "string"),
    ("ResourceHandle", "spec.resourceClaim.name", "string"),
    ("ResourceHandle", "spec.resourceClaim.namespace", "string"),
    ("ResourceHandle", "spec.resourcePool.name", "string"),
    ("ResourceHandle", "spec.resourcePool.namespace", "string"),
    ("ResourceHandle", "spec.resources[].name", "string"),
    ("ResourceHandle", "spec.resources[].provider.name", "string"),
    ("ResourceHandle", "spec.resources[].template", "object"),
    ("ResourceHandle", "spec.resources[].reference", "object"),
    ("ResourceHandle", "spec.lifespan.default", "string"),
    ("ResourceHandle", "spec.lifespan.end", "string"),
    ("ResourceHandle", "spec.lifespan.maximum", "string"),
    ("ResourceHandle", "spec.lifespan.relativeMaximum", "string"),
    ("ResourceHandle", "status.resources", "array"),
    ("ResourceHandle", "status.ready", "boolean"),
    ("ResourceHandle", "status.healthy", "boolean"),
    ("ResourceHandle", "status.conditions", "array"),
    ("ResourceClaim", "spec.resources[].name", "string"),
    ("ResourceClaim", "spec.resources[].provider.name", "string"),
    ("ResourceClaim", "spec.resources[].template", "object"),
    ("ResourceClaim", "spec.lifespan.start", "string"),
    ("ResourceClaim", "spec.lifespan.end", "string"),
    ("ResourceClaim", "status.resourceHandle.name", "string"),
    ("ResourceClaim", "status.resourceHandle.namespace", "string"),
    ("ResourceClaim", "status.resources[].name", "string"),
    ("ResourceClaim", "status.resources[].provider", "object"),
    ("ResourceClaim", "status.resources[].reference", "object"),
    ("ResourceClaim", "status.resources[].state", "object"),
    ("ResourceClaim", "status.resources[].validationError", "string"),
    ("ResourceClaim", "status.lifespan.start", "string"),
    ("ResourceClaim", "status.lifespan.end", "string"),
    ("ResourceClaim", "status.lifespan.maximum", "string"),
    ("ResourceClaim", "status.lifespan.relativeMaximum", "string"),
    ("ResourceClaim", "status.lifespan.firstReady", "string"),
    ("ResourceClaim", "status.conditions", "array"),
]


@pytest.mark.parametrize("kind,path,typ", FIELDS, ids=[f"{k}.{p}" for k, p, _ in FIELDS])
def test_design_field(crds, kind, path, typ):
    assert lookup(_schema(crds[kind]), path)["type"] == typ


TIMES = [
    ("Exporter", "status.lastSeen"),
    ("Lease", "spec.beginTime"), ("Lease", "spec.endTime"),
    ("Lease", "status.beginTime"), ("Lease", "status.endTime"),
    ("ResourceHandle", "spec.lifespan.end"),
    ("ResourceClaim", "spec.lifespan.start"), ("ResourceClaim", "spec.lifespan.end"),
    ("ResourceClaim", "status.lifespan.start"), ("ResourceClaim", "status.lifespan.end"),
    ("ResourceClaim", "status.lifespan.firstReady"),
    ("ResourcePoolScaling", "spec.at"),
]
# The times a person types: a CEL rule checks them, so that a typo is refused with a sentence; `format:
# date-time` would refuse it first with a type error and keep the rule from running.
REQUESTED_TIMES = [("Lease", "spec.beginTime"), ("Lease", "spec.endTime"),
                   ("ResourceClaim", "spec.lifespan.start"), ("ResourceClaim", "spec.lifespan.end"),
                   ("ResourcePoolScaling", "spec.at")]


@pytest.mark.parametrize("kind,path", TIMES)
def test_times_are_rfc3339(crds, kind, path):
    node = lookup(_schema(crds[kind]), path)
    if (kind, path) in REQUESTED_TIMES:
        assert node["type"] == "string" and "format" not in node and node["maxLength"] == 64
        assert "RFC 3339" in typed_rules(node)[0][1]
    else:
        assert node == {**node, "type": "string", "format": "date-time"}


GO_DURATIONS = [("Lease", "spec.duration"), ("ExporterAccessPolicy", "spec.policies[].maximumDuration")]
LIFESPANS = [
    (kind, f"{base}.{f}")
    for kind, base, fields in [
        ("ResourceProvider", "spec.lifespan", ["default", "maximum", "relativeMaximum", "unclaimed"]),
        ("ResourcePool", "spec.lifespan", ["default", "maximum", "relativeMaximum", "unclaimed"]),
        ("ResourceHandle", "spec.lifespan", ["default", "maximum", "relativeMaximum"]),
        ("ResourceClaim", "status.lifespan", ["maximum", "relativeMaximum"]),
    ]
    for f in fields
]


@pytest.mark.parametrize("kind,path", GO_DURATIONS)
def test_go_duration_rule(crds, kind, path):
    pattern = typed_regex(lookup(_schema(crds[kind]), path))
    for ok in DURATION_OK:
        assert pattern.search(ok), ok
    for bad in DURATION_BAD:
        assert not pattern.search(bad), bad


#: Lifespan settings that may be templates (Poolboy's): rendered for each claim. `unclaimed` applies before there
#: is a claim, and a claim's status shows what the templates gave.
TEMPLATED_LIFESPANS = {(kind, f"spec.lifespan.{f}") for kind in ("ResourceProvider", "ResourcePool", "ResourceHandle")
                       for f in ("default", "maximum", "relativeMaximum")}


@pytest.mark.parametrize("kind,path", LIFESPANS)
def test_lifespan_rule(crds, kind, path):
    node = lookup(_schema(crds[kind]), path)
    pattern = typed_regex(node) if path.startswith("spec.") else re.compile(node["pattern"])
    templated = (kind, path) in TEMPLATED_LIFESPANS
    for ok in LIFESPAN_OK + (["{% if 'x' in resource_claim.annotations %}2d{% else %}2h{% endif %}"] if templated
                             else []):
        assert pattern.search(ok), ok
    for bad in LIFESPAN_BAD:
        assert bool(pattern.search(bad)) == (templated and "{{" in bad), bad


SELECTORS = [
    ("ExporterAccessPolicy", "spec.exporterSelector"),
    ("ExporterAccessPolicy", "spec.policies[].from[].clientSelector"),
    ("Lease", "spec.selector"),
]


@pytest.mark.parametrize("kind,path", SELECTORS)
def test_label_selectors(crds, kind, path):
    sel = lookup(_schema(crds[kind]), path)
    assert set(sel["properties"]) == {"matchLabels", "matchExpressions"}
    assert sel["properties"]["matchLabels"]["additionalProperties"] == {"type": "string"}
    expr = sel["properties"]["matchExpressions"]["items"]
    assert set(expr["required"]) == {"key", "operator"}
    assert expr["properties"]["operator"]["enum"] == ["In", "NotIn", "Exists", "DoesNotExist"]
    assert expr["properties"]["values"]["items"] == {"type": "string"}


FREE_FORM = [
    ("ResourceProvider", "spec.default"),
    ("ResourceProvider", "spec.override"),
    ("ResourceProvider", "spec.match"),
    ("ResourceProvider", "spec.validation.openAPIV3Schema"),
    ("ResourcePool", "spec.resources[].template"),
    ("ResourceHandle", "spec.resources[].template"),
    ("ResourceHandle", "status.resources[].state"),
    ("ResourceClaim", "spec.resources[].template"),
    ("ResourceClaim", "status.resources[].state"),
]


@pytest.mark.parametrize("kind,path", FREE_FORM)
def test_free_form_user_data(crds, kind, path):
    node = lookup(_schema(crds[kind]), path)
    assert node["type"] == "object"
    assert node["x-kubernetes-preserve-unknown-fields"] is True
    assert "properties" not in node


CONDITIONS = {
    "Exporter": "Online",
    "Lease": "Invalid, Unsatisfiable, Pending, Ready",
    "ResourceHandle": None,
    "ResourceClaim": "Valid, Bound, Ready",
}


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "ResourcePoolScaling"])  # Poolboy's status.state instead
def test_conditions_are_metav1(crds, kind):
    conds = lookup(_schema(crds[kind]), "status.conditions")
    assert conds["x-kubernetes-list-type"] == "map"
    assert conds["x-kubernetes-list-map-keys"] == ["type"]
    item = conds["items"]
    assert set(item["properties"]) == {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"}
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
    assert item["properties"]["observedGeneration"]["type"] == "integer"
    assert set(item["required"]) == {"type", "status", "reason", "message", "lastTransitionTime"}


def test_update_filter_ops_enum(crds):
    ops = lookup(_schema(crds["ResourceProvider"]), "spec.updateFilters[].allowedOps[]")
    assert ops["enum"] == ["add", "remove", "replace"]
    assert lookup(_schema(crds["ResourceProvider"]), "spec.updateFilters[]")["required"] == ["pathMatch"]


DEFAULTS = [
    ("Exporter", "spec.enabled", True),
    ("Exporter", "spec", {}),  # so that spec.enabled defaults even when spec is omitted
    ("Lease", "spec.release", False),
    ("Lease", "spec.allowDisabled", False),
    ("ExporterAccessPolicy", "spec.policies[].spotAccess", False),
    ("ExporterAccessPolicy", "spec.policies[].priority", 0),
    ("ResourceProvider", "spec.resourceRequiresClaim", False),
    ("ResourceProvider", "spec.template.enable", False),
]


@pytest.mark.parametrize("kind,path,value", DEFAULTS)
def test_defaults(crds, kind, path, value):
    assert lookup(_schema(crds[kind]), path)["default"] == value


MINIMUMS = [
    ("ResourcePool", "spec.minAvailable"),
    ("ResourcePool", "spec.maxUnready"),
]


@pytest.mark.parametrize("kind,path", MINIMUMS)
def test_minimum_zero(crds, kind, path):
    assert lookup(_schema(crds[kind]), path)["minimum"] == 0


# (kind, path of the object, field that must be required there, required?)
REQUIRED = [
    ("Lease", "", "spec", True),
    ("Lease", "spec", "clientRef", True),
    ("Lease", "spec.clientRef", "name", True),
    ("Lease", "spec.exporterRef", "name", True),
    ("Lease", "spec", "selector", False),  # empty/missing selector is the operator's InvalidSelector
    ("Lease", "spec", "exporterRef", False),
    ("ResourcePool", "spec", "resources", False),  # or spec.provider (provider mode): the operator's rule
    ("ResourcePool", "spec.provider", "name", True),
    ("ResourcePool", "spec.resources[]", "provider", True),
    ("ResourcePool", "spec.resources[].provider", "name", True),
    ("ResourceHandle", "spec.resources[]", "provider", True),
    ("ResourceHandle", "spec.resources[].provider", "name", True),
    ("ResourceHandle", "spec.resourceClaim", "name", True),
    ("ResourceHandle", "spec.resourceClaim", "namespace", True),
    ("ResourceClaim", "spec.resources[]", "provider", False),  # match may decide
    ("ResourceClaim", "spec.resources[].provider", "name", True),
    ("Exporter", "status.leaseRef", "name", False),  # cleared by the operator
]


@pytest.mark.parametrize("kind,path,field,required", REQUIRED)
def test_required(crds, kind, path, field, required):
    node = lookup(_schema(crds[kind]), path) if path else _schema(crds[kind])
    assert field in node["properties"]
    assert (field in node.get("required", [])) is required


def test_no_schema_level_semantics_on_lease(crds):
    # DESIGN: an empty selector without exporterRef is the operator's
    # Invalid/InvalidSelector condition, not an API error.
    spec = lookup(_schema(crds["Lease"]), "spec")
    assert "x-kubernetes-validations" not in spec
    assert not errors(crds["Lease"], _obj("Lease", {"clientRef": {"name": "a"}, "selector": {}}))
    assert not errors(crds["Lease"], _obj("Lease", {"clientRef": {"name": "a"}}))
    # A negative duration is well-formed: the operator reports InvalidDuration.
    assert not errors(crds["Lease"], _obj("Lease", {"clientRef": {"name": "a"}, "duration": "-1h"}))


# ------------------------------------------------------- printer columns

COLUMNS = {
    "Exporter": {
        "Online": '.status.conditions[?(@.type=="Online")].status',
        "Lease": ".status.leaseRef.name",
        "Agent": ".status.exporterStatus",
        "Age": ".metadata.creationTimestamp",
    },
    "Lease": {
        "Client": ".spec.clientRef.name",
        "Exporter": ".status.exporterRef.name",
        "Ready": '.status.conditions[?(@.type=="Ready")].status',
        "Reason": '.status.conditions[?(@.type=="Ready")].reason',
        "Ended": ".status.ended",
        "Age": ".metadata.creationTimestamp",
    },
    "ResourceClaim": {
        "Handle": ".status.resourceHandle.name",
        "Ready": '.status.conditions[?(@.type=="Ready")].status',
        "Reason": '.status.conditions[?(@.type=="Ready")].reason',
        "Age": ".metadata.creationTimestamp",
    },
    "ResourceHandle": {
        "Claim Namespace": ".spec.resourceClaim.namespace",
        "Claim Name": ".spec.resourceClaim.name",
        "Pool": ".spec.resourcePool.name",
        "Ready": '.status.conditions[?(@.type=="Ready")].status',
        "Rendered": '.status.conditions[?(@.type=="Rendered")].reason',
    },
    "ResourcePoolScaling": {
        "Pool": ".spec.resourcePool.name", "At": ".spec.at", "Count": ".spec.count", "Created": ".status.count",
        "State": ".status.state",
    },
    "ResourcePool": {
        "Min": ".spec.minAvailable",
        "Available": ".status.resourceHandleCount.available",
        "Ready": ".status.resourceHandleCount.ready",
    },
    "Client": {"Valid": '.status.conditions[?(@.type=="Valid")].status', "Age": ".metadata.creationTimestamp"},
    "ExporterAccessPolicy": {
        "Exporters": ".status.exporterSelector",
        "Valid": '.status.conditions[?(@.type=="Valid")].status',
        "Age": ".metadata.creationTimestamp",
    },
    "ResourceProvider": {
        "Kind": ".spec.override.kind",
        "Valid": '.status.conditions[?(@.type=="Valid")].status',
        "Age": ".metadata.creationTimestamp",
    },
}
# kubectl prints a date in the future as <invalid>: `date` only for times that are always past.
PAST_ONLY = {".metadata.creationTimestamp", ".status.lastSeen"}


def _column_schema_path(json_path):
    """'.status.conditions[?(@.type=="X")].status' -> 'status.conditions[].status'."""
    p = re.sub(r"\[\?\(@\.[a-zA-Z]+==(\"[^\"]*\"|true|false)\)\]", "[]", json_path)
    p = p.replace("[*]", "[]")
    return p.lstrip(".")


@pytest.mark.parametrize("kind", KINDS)
def test_every_ready_column_is_a_condition_status(crds, kind):
    """`kubectl get` prints True/False in every kind's Ready column: a condition's status, never a boolean
    (which prints `true`). The pool's Ready is a count of ready handles."""
    for column in _version(crds[kind])["additionalPrinterColumns"]:
        if column["name"] in ("Ready", "Valid", "Online") and kind != "ResourcePool":
            assert column["type"] == "string", (kind, column)
            assert column["jsonPath"] == f'.status.conditions[?(@.type=="{column["name"]}")].status', (kind, column)


@pytest.mark.parametrize("kind", KINDS)
def test_printer_columns(crds, kind):
    cols = _version(crds[kind])["additionalPrinterColumns"]
    by_name = {c["name"]: c for c in cols}
    assert len(by_name) == len(cols), "column names unique"
    for name, path in COLUMNS[kind].items():
        assert by_name[name]["jsonPath"] == path, name
        if name != "Age":
            assert by_name[name].get("priority", 0) == 0, f"{name} shows in plain kubectl get"
    for c in cols:
        assert c["type"] in {"integer", "number", "string", "boolean", "date"}
        assert c["jsonPath"].startswith(".")
        schema_path = _column_schema_path(c["jsonPath"])
        if schema_path.startswith("metadata."):
            continue
        if c["type"] == "date":
            assert c["jsonPath"] in PAST_ONLY, f"{c['name']} can be in the future: kubectl would print <invalid>"
        free = re.match(r"(.*\.(override|default))\.", schema_path)
        if free:  # into free-form user data
            assert lookup(_schema(crds[kind]), free.group(1))["x-kubernetes-preserve-unknown-fields"]
            continue
        node = lookup(_schema(crds[kind]), schema_path)
        expected = {"date": "string", "string": "string", "boolean": "boolean", "integer": "integer"}[c["type"]]
        assert node["type"] == expected, c  # a string column over a map would print it as JSON


# --------------------------------------------------------------- samples


def _obj(kind, spec, **meta):
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": "x", "namespace": "lab", **meta}, "spec": spec}


def test_samples_are_in_apply_order(samples):
    names = [n for n, _ in samples]
    assert names == sorted(names)
    assert all(re.match(r"\d\d-[a-z0-9-]+\.yaml$", n) for n in names), names
    first_file, first = samples[0]
    assert first == {**first, "apiVersion": "v1", "kind": "Namespace"}
    assert first["metadata"]["name"] == "lab"
    # Kinds are created before what refers to them.
    order = [o["kind"] for _, o in samples]
    for before, after in [("Namespace", "Exporter"), ("Exporter", "Lease"), ("Client", "Lease"),
                          ("ExporterAccessPolicy", "Lease"), ("ResourceProvider", "ResourcePool"),
                          ("ResourceProvider", "ResourceClaim")]:
        assert order.index(before) < order.index(after), (before, after)
    # Deleting the samples must never delete the operator's namespace.
    assert [o["metadata"]["name"] for _, o in samples if o["kind"] == "Namespace"] == ["lab"]


def test_every_sample_validates(crds, samples):
    seen = Counter()
    for fname, obj in samples:
        if obj["apiVersion"] == "v1":
            continue
        assert obj["apiVersion"] == API_VERSION, fname
        kind = obj["kind"]
        errs = errors(crds[kind], obj)
        assert not errs, f"{fname} {kind}/{obj['metadata']['name']}: {[e.message for e in errs]}"
        seen[kind] += 1
    assert set(seen) == set(KINDS) - {"ResourceHandle"}, "every user-facing kind has a sample"


def _by_kind(samples, kind):
    return [o for _, o in samples if o["kind"] == kind]


def test_lab_sample_shape(samples):
    exporters = _by_kind(samples, "Exporter")
    assert len(exporters) == 4
    for e in exporters:
        assert e["metadata"]["namespace"] == "lab"
        assert {"board", "location"} <= set(e["metadata"]["labels"])
        assert "status" not in e
    clients = {c["metadata"]["name"]: c for c in _by_kind(samples, "Client")}
    assert clients["alice"]["metadata"]["labels"] == {"team": "qa"}
    assert clients["bob"]["metadata"]["labels"] == {"team": "dev"}
    policies = [p for eap in _by_kind(samples, "ExporterAccessPolicy") for p in eap["spec"]["policies"]]
    assert any(p.get("spotAccess") for p in policies)
    assert any(p.get("maximumDuration") for p in policies)
    assert len({p["priority"] for p in policies}) > 1
    for o in _by_kind(samples, "ExporterAccessPolicy") + _by_kind(samples, "Lease") + _by_kind(samples, "ResourceClaim"):
        assert o["metadata"]["namespace"] == "lab"


def _matches(selector, labels):
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        has = e["key"] in labels
        op = e["operator"]
        if op == "Exists" and not has or op == "DoesNotExist" and has:
            return False
        if op == "In" and labels.get(e["key"]) not in e["values"]:
            return False
        if op == "NotIn" and has and labels[e["key"]] in e["values"]:
            return False
    return True


def test_lease_samples_show_each_condition(samples):
    leases = _by_kind(samples, "Lease")
    exporters = {e["metadata"]["name"]: e for e in _by_kind(samples, "Exporter")}
    clients = {c["metadata"]["name"]: c for c in _by_kind(samples, "Client")}
    eaps = _by_kind(samples, "ExporterAccessPolicy")
    for lease in leases:
        assert lease["spec"]["clientRef"]["name"] in clients

    def grants(lease):
        """(priority, maximumDuration) of the policies that admit the lease's client to some matching exporter."""
        client = clients[lease["spec"]["clientRef"]["name"]]
        out = []
        for e in exporters.values():
            if not _matches(lease["spec"].get("selector") or {}, e["metadata"]["labels"]):
                continue
            for eap in eaps:
                if not _matches(eap["spec"]["exporterSelector"], e["metadata"]["labels"]):
                    continue
                for p in eap["spec"]["policies"]:
                    if any(_matches(f["clientSelector"], client["metadata"]["labels"]) for f in p["from"]):
                        out.append(p)
        return out

    def kind_of(lease):
        spec = lease["spec"]
        if not spec.get("selector") and not spec.get("exporterRef"):
            return "InvalidSelector"
        if spec.get("exporterRef") and spec["exporterRef"]["name"] not in exporters:
            return "ExporterNotFound"
        policies = grants(lease)
        assert policies, f"{lease['metadata']['name']} would be NoAccess"
        want = seconds(spec["duration"])
        if all(p.get("maximumDuration") and seconds(p["maximumDuration"]) < want for p in policies):
            return "DurationExceeded"
        if spec.get("beginTime", "") > dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"):
            return "Scheduled"
        return "Ready"

    shown = Counter(kind_of(lease) for lease in leases)
    for reason in ["Ready", "Scheduled", "InvalidSelector", "ExporterNotFound", "DurationExceeded"]:
        assert shown[reason] >= 1, reason
    scheduled = [lease for lease in leases if kind_of(lease) == "Scheduled"]
    assert scheduled[0]["spec"]["beginTime"].startswith("2099-")


def test_pool_claim_sample(samples):
    [provider] = _by_kind(samples, "ResourceProvider")
    [pool] = _by_kind(samples, "ResourcePool")
    claims = {c["metadata"]["name"]: c for c in _by_kind(samples, "ResourceClaim")}
    assert provider["metadata"] == {"name": "env-configmap", "namespace": "lessor-system"}
    assert pool["metadata"] == {"name": "envs", "namespace": "lessor-system"}
    spec = provider["spec"]
    assert spec["template"]["enable"] is True
    assert spec["default"] == {"data": {"size": "small"}}
    assert spec["override"]["kind"] == "ConfigMap"
    assert spec["override"]["metadata"]["namespace"] == "lessor-system"
    assert "resource_handle" in spec["override"]["metadata"]["name"]
    assert {"pathMatch": "/data/size", "allowedOps": ["replace"]} in spec["updateFilters"]
    assert spec["lifespan"] == {"default": "1d", "maximum": "7d", "relativeMaximum": "3d", "unclaimed": "1h"}
    assert spec["resourceName"]
    size = spec["validation"]["openAPIV3Schema"]["properties"]["data"]["properties"]["size"]
    assert size["enum"] == ["small", "medium", "large"]
    assert pool["spec"]["minAvailable"] == 2
    assert pool["spec"]["resources"][0]["provider"]["name"] == "env-configmap"

    # Templates (after the provider's defaults) satisfy the provider's schema.
    tmpl_validator = jsonschema.Draft4Validator(spec["validation"]["openAPIV3Schema"])
    pool_template = pool["spec"]["resources"][0]["template"]
    tmpl_validator.validate(pool_template)
    exact = [c for c in claims.values() if c["spec"]["resources"][0].get("template") == pool_template
             and c["spec"]["resources"][0].get("provider", {}).get("name") == "env-configmap"]
    assert exact, "one claim asks for exactly the pool's template"
    for claim in claims.values():
        assert claim["metadata"]["namespace"] == "lab"
        for res in claim["spec"]["resources"]:
            t = copy.deepcopy(res["template"])
            for k, v in spec["default"].items():
                t.setdefault(k, {}).update({kk: vv for kk, vv in v.items() if kk not in t.get(k, {})})
            tmpl_validator.validate(t)
            if "provider" not in res:
                assert all(res["template"].get(k) == v for k, v in spec["match"].items()), "match decides"
    assert any("provider" not in r for c in claims.values() for r in c["spec"]["resources"])
    with pytest.raises(jsonschema.ValidationError):
        tmpl_validator.validate({"apiVersion": "v1", "kind": "ConfigMap", "data": {"size": "huge"}})


# ------------------------------------------------------------- malformed

MALFORMED = [
    ("Exporter", {"enabled": "yes"}, "spec.enabled as a string"),
    ("Exporter", {"enabled": True, "bogus": 1}, "unknown field"),
    ("Lease", {"clientRef": {"name": "a"}, "duration": "1d"}, "day unit in a Go duration"),
    ("Lease", {"clientRef": {"name": "a"}, "duration": 3600}, "duration as a number"),
    ("Lease", {"selector": {"matchLabels": {"a": "b"}}}, "no clientRef"),
    ("Lease", {"clientRef": {}}, "clientRef without name"),
    ("Lease", {"clientRef": {"name": "a"}, "beginTime": "tomorrow"}, "beginTime not RFC 3339"),
    ("Lease", {"clientRef": {"name": "a"}, "selector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}}, "bad operator"),
    ("Lease", {"clientRef": {"name": "a"}, "selector": {"matchLabels": {"a": 1}}}, "matchLabels value not a string"),
    ("Lease", {"clientRef": {"name": "a"}, "release": "true"}, "release as a string"),
    ("ExporterAccessPolicy", {"policies": [{"priority": "high"}]}, "priority as a string"),
    ("ExporterAccessPolicy", {"policies": [{"maximumDuration": "2 hours"}]}, "bad maximumDuration"),
    ("ResourceProvider", {"updateFilters": [{"pathMatch": "/x", "allowedOps": ["move"]}]}, "move op"),
    ("ResourceProvider", {"updateFilters": [{"allowedOps": ["add"]}]}, "filter without pathMatch"),
    ("ResourceProvider", {"lifespan": {"default": "1 day"}}, "bad lifespan"),
    ("ResourceProvider", {"default": "small"}, "default not an object"),
    ("ResourcePool", {"provider": {"parameterValues": {}}}, "provider mode without a provider name"),
    ("ResourcePool", {"resources": [{"name": "x"}]}, "resource without provider"),
    ("ResourcePool", {"resources": [{"provider": {"name": "p"}}], "minAvailable": -1}, "negative minAvailable"),
    ("ResourceClaim", {"resources": [{"provider": {}}]}, "provider without name"),
    ("ResourceClaim", {"lifespan": {"end": "soon"}}, "lifespan end not a time"),
    ("ResourceHandle", {"resources": [{"provider": {"name": "p"}}], "resourceClaim": {"name": "c"}}, "claim ref without namespace"),
]


@pytest.mark.parametrize("kind,spec,why", MALFORMED, ids=[m[2] for m in MALFORMED])
def test_malformed_objects_fail(crds, kind, spec, why):
    assert errors(crds[kind], _obj(kind, spec)), why


BAD_STATUS = [
    ("Lease", {"conditions": [{"type": "Ready", "status": "Maybe", "reason": "Ready", "message": "",
                               "lastTransitionTime": "2025-01-01T00:00:00Z"}]}),
    ("Lease", {"conditions": [{"type": "Ready", "status": "True", "reason": "", "message": "",
                               "lastTransitionTime": "2025-01-01T00:00:00Z"}]}),
    ("Exporter", {"lastSeen": "yesterday"}),
    ("ResourcePool", {"resourceHandleCount": {"available": "two"}}),
]


@pytest.mark.parametrize("kind,status", BAD_STATUS)
def test_malformed_status_fails(crds, kind, status):
    obj = _obj(kind, {"clientRef": {"name": "a"}} if kind == "Lease" else {"resources": [{"provider": {"name": "p"}}]} if kind == "ResourcePool" else {})
    obj["status"] = status
    assert errors(crds[kind], obj)


def test_well_formed_status_passes(crds):
    cond = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z",
            "observedGeneration": 1}
    lease = _obj("Lease", {"clientRef": {"name": "a"}, "selector": {"matchLabels": {"board": "rpi4"}}, "duration": "1h"})
    lease["status"] = {"exporterRef": {"name": "e"}, "beginTime": "2025-01-01T00:00:00Z", "endTime": "2025-01-01T01:00:00Z",
                       "ended": False, "priority": 20, "spotAccess": False, "conditions": [cond]}
    assert not errors(crds["Lease"], lease)
    handle = _obj("ResourceHandle", {
        "resourceClaim": {"name": "c", "namespace": "lab"},
        "resourcePool": {"name": "envs", "namespace": "lessor-system"},
        "resources": [{"name": "environment", "provider": {"name": "env-configmap"},
                       "template": {"data": {"size": "small"}},
                       "reference": {"apiVersion": "v1", "kind": "ConfigMap", "name": "guid-abc-env", "namespace": "lessor-system"}}],
        "lifespan": {"default": "1d", "end": "2025-01-02T00:00:00Z", "maximum": "7d", "relativeMaximum": "3d"},
    }, generateName="guid-")
    handle["status"] = {"resources": [{"name": "environment", "state": {"anything": [1, 2]}, "ready": True}],
                        "ready": True, "healthy": True, "conditions": [cond]}
    assert not errors(crds["ResourceHandle"], handle)
    claim = _obj("ResourceClaim", {"resources": [{"template": {"kind": "ConfigMap"}}], "lifespan": {"end": "2025-01-02T00:00:00Z"}})
    claim["status"] = {"resourceHandle": {"name": "guid-abc", "namespace": "lessor-system"},
                       "resources": [{"name": "environment", "provider": {"name": "env-configmap"},
                                      "state": {"data": {}}, "validationError": "data.size: must be one of small, medium, large"}],
                       "lifespan": {"start": "2025-01-01T00:00:00Z", "end": "2025-01-02T00:00:00Z", "maximum": "7d",
                                    "relativeMaximum": "3d", "firstReady": "2025-01-01T00:01:00Z"},
                       "conditions": [cond, {**cond, "type": "Bound", "reason": "Bound"}, {**cond, "type": "Valid", "reason": "Valid"}]}
    assert not errors(crds["ResourceClaim"], claim)


def test_pool_claim_tool_references_port(crds):
    """Provider references as the pool/claim tool writes them (apiVersion, kind, namespace) are accepted."""
    ref = {"apiVersion": "lessor.dev/v1alpha1", "kind": "ResourceProvider", "name": "p", "namespace": "lessor-system"}
    pool = _obj("ResourcePool", {"minAvailable": 1, "resources": [{"name": "r", "provider": ref, "template": {}}]})
    assert not errors(crds["ResourcePool"], pool)
    claim = _obj("ResourceClaim", {"resources": [{"provider": ref, "template": {}}]})
    assert not errors(crds["ResourceClaim"], claim)


# ---------------------------------------------------------------- deploy


def _one(deploy, fname, kind, name=None):
    found = [o for o in deploy[fname] if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, (fname, kind, name)
    return found[0]


def test_deploy_files(deploy):
    assert {"namespace.yaml", "rbac.yaml", "deployment.yaml", "service.yaml", "webhook.yaml"} <= set(deploy)
    assert _one(deploy, "namespace.yaml", "Namespace")["metadata"]["name"] == "lessor-system"
    for objs in deploy.values():
        for o in objs:
            if o["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration",
                                 "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "Kustomization",
                                 "FlowSchema", "PriorityLevelConfiguration"}:  # cluster-scoped
                assert o["metadata"]["namespace"] == "lessor-system", o["metadata"]["name"]


def test_rbac_least_privilege(deploy):
    sa = _one(deploy, "rbac.yaml", "ServiceAccount")
    assert (sa["metadata"]["name"], sa["metadata"]["namespace"]) == ("lessor", "lessor-system")
    roles = [o for o in deploy["rbac.yaml"] if o["kind"] in ("ClusterRole", "Role")]
    for role in roles:
        for rule in role["rules"]:
            if "nonResourceURLs" in rule:  # lessor-metrics-reader: get /metrics
                assert rule == {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}, rule
                continue
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"], rule
            if role["metadata"]["name"] not in ("lessor-jumpstarter-credentials", "lessor-jumpstarter-signing-key"):
                assert "secrets" not in rule["resources"], role["metadata"]["name"]
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    main = _one(deploy, "rbac.yaml", "ClusterRole", "lessor")

    def verbs(group, resource):
        return {v for r in main["rules"] if group in r["apiGroups"] and resource in r["resources"]
                and not r.get("resourceNames") for v in r["verbs"]}

    for plural in KINDS.values():
        assert {"list", "watch"} <= verbs(GROUP, plural)
        # Which status is written, and with which verb, is measured by tests/test_rbac.py.
        assert not {"create", "delete", "deletecollection"} & verbs(GROUP, f"{plural}/status")
    assert "delete" not in verbs(GROUP, "leases")
    assert {"create", "patch"} <= verbs(GROUP, "leases")  # create: a client's CreateLease over gRPC
    assert not {"create", "update", "patch", "delete"} & verbs(GROUP, "exporters")
    assert {"create", "patch", "delete"} <= verbs(GROUP, "resourcehandles")
    assert verbs(GROUP, "resourceclaims") == {"get", "list", "watch", "delete", "patch"}  # patch: labels only
    assert not {"create", "update", "patch", "delete"} & verbs(GROUP, "resourcepoolscalings")
    assert not {"create", "update", "patch", "delete"} & verbs(GROUP, "resourcepools")
    assert not {"create", "update", "patch", "delete"} & verbs(GROUP, "resourceproviders")
    assert verbs("", "namespaces") == {"get"}
    assert verbs("events.k8s.io", "events") == {"create", "patch"}
    assert not verbs("", "events"), "events go through events.k8s.io/v1"
    assert not verbs("", "configmaps"), "provided kinds are in their own role"
    # With --webhook-cert-dir (deployment.yaml) webhook.yaml registers the webhook; the operator never touches it.
    assert not [r for r in main["rules"] if "validatingwebhookconfigurations" in r["resources"]]
    leader = _one(deploy, "rbac.yaml", "Role", "lessor-leader-election")
    assert leader["metadata"]["namespace"] == "lessor-system"
    assert leader["rules"] == [{**leader["rules"][0], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"]}]
    # Jumpstarter's credentials: token Secrets read, created and re-owned, never listed, watched or deleted;
    # the signing key in the operator namespace only, read by name.
    credentials = _one(deploy, "rbac.yaml", "ClusterRole", "lessor-jumpstarter-credentials")
    assert credentials["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch"]}]
    signing = _one(deploy, "rbac.yaml", "Role", "lessor-jumpstarter-signing-key")
    assert signing["metadata"]["namespace"] == "lessor-system"
    assert signing["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["lessor-jumpstarter-signing-key"],
         "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]
    provided = _one(deploy, "rbac.yaml", "ClusterRole", "lessor-provided-resources")
    assert provided["rules"][0]["resources"] == ["configmaps"]
    bound = {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in deploy["rbac.yaml"] if b["kind"].endswith("Binding")}
    assert bound == {("ClusterRole", "lessor"), ("ClusterRole", "lessor-provided-resources"), ("Role", "lessor-leader-election"),
                     ("ClusterRole", "lessor-metrics-auth"), ("ClusterRole", "lessor-jumpstarter-credentials"),
                     ("Role", "lessor-jumpstarter-signing-key")}
    auth = _one(deploy, "rbac.yaml", "ClusterRole", "lessor-metrics-auth")  # --metrics-secure asks the API server
    assert auth["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}]
    for b in deploy["rbac.yaml"]:
        if b["kind"].endswith("Binding"):
            assert b["subjects"] == [{"kind": "ServiceAccount", "name": "lessor", "namespace": "lessor-system"}]


def test_deployment(deploy):
    d = _one(deploy, "deployment.yaml", "Deployment")
    assert d["spec"]["replicas"] == 2  # a leader and a warm follower; pdb.yaml keeps one
    pod = d["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "lessor"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [c] = pod["containers"]
    assert c["image"] == "lessor:dev"
    assert c["command"] == ["lessor", "run", "--webhook-cert-dir", "/etc/lessor/webhook", "--metrics-secure",
                            "--grpc-port", "8082", "--grpc-cert-dir", "/etc/lessor/grpc",
                            "--grpc-endpoint", "lessor-grpc.lessor-system.svc:8082", "--grpc-advertise", "$(POD_IP):8082"]
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": 8080, "health": 8081, "webhook": 9443,
                                                                   "grpc": 8082}
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in c["env"]
    grpc = _one(deploy, "service.yaml", "Service", "lessor-grpc")
    assert grpc["spec"]["ports"] == [{"name": "grpc", "port": 8082, "targetPort": "grpc", "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert {"requests", "limits"} <= set(c["resources"])
    assert {"/etc/lessor/webhook", "/etc/lessor/grpc"} <= {m["mountPath"] for m in c["volumeMounts"]}
    labels = d["spec"]["template"]["metadata"]["labels"]
    for svc in deploy["service.yaml"]:
        assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()), svc["metadata"]["name"]


def test_webhook(deploy):
    svc = _one(deploy, "service.yaml", "Service", "lessor-webhook")
    assert svc["spec"]["ports"] == [{**svc["spec"]["ports"][0], "port": 443, "targetPort": "webhook"}]
    vwc = _one(deploy, "webhook.yaml", "ValidatingWebhookConfiguration")
    assert vwc["metadata"]["name"] == "lessor-preflight"
    [hook] = vwc["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["timeoutSeconds"] == 10
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["clientConfig"]["service"] == {"name": "lessor-webhook", "namespace": "lessor-system", "path": "/validate", "port": 443}
    [rule] = hook["rules"]
    assert rule["apiGroups"] == [GROUP] and rule["apiVersions"] == [VERSION]
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    assert sorted(rule["resources"]) == sorted(KINDS.values())
    text = (_deploy_dir() / "webhook.yaml").read_text(encoding="utf-8")
    assert "cert-manager.io/inject-ca-from" in text


def test_schema_durations_parse_in_the_operator(crds):
    """Whatever the duration patterns admit, the operator's parser reads (no silent gap)."""
    durations = pytest.importorskip("lessor.templates.durations")
    for ok in DURATION_OK + LIFESPAN_OK:
        durations.parse_duration(ok)
    assert durations.parse_duration("1d12h") == dt.timedelta(days=1, hours=12)
    assert durations.parse_duration("1h30m") == dt.timedelta(minutes=90)


@pytest.mark.parametrize("kind,path", REQUESTED_TIMES)
def test_requested_times_are_bounded_to_lessors_range(crds, kind, path):
    """Years 1970 to 8999, as the operator's parser (`lessor.templates.timestamps`) takes them."""
    timestamps = pytest.importorskip("lessor.templates.timestamps")
    pattern = typed_regex(lookup(_schema(crds[kind]), path))
    for ok in ("1970-01-01T00:00:00Z", "2024-05-01T12:30:00Z", "8999-12-31T23:59:59Z", "2030-01-01T09:00:00.5+02:00",
               "2030-01-01t09:00:00z"):
        assert pattern.search(ok), ok
        timestamps.parse_timestamp(ok)  # what the rule admits, the operator reads
    for bad in ("0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "9000-01-01T00:00:00Z", "9999-12-31T23:59:59Z",
                "tomorrow", "2030-01-01", "2030-13-01T00:00:00Z", "2030-01-01T25:00:00Z", "2030-01-01T09:00:00",
                "2030-01-01 09:00:00Z"):
        assert not pattern.search(bad), bad
