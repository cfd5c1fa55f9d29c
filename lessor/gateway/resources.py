"""Where each kind lives in the REST API."""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "lessor.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


def _lessor(kind: str, plural: str) -> Resource:
    return Resource(GROUP, VERSION, kind, plural)


EXPORTER = _lessor("Exporter", "exporters")
CLIENT = _lessor("Client", "clients")
POLICY = _lessor("ExporterAccessPolicy", "exporteraccesspolicies")
LEASE = _lessor("Lease", "leases")
PROVIDER = _lessor("ResourceProvider", "resourceproviders")
POOL = _lessor("ResourcePool", "resourcepools")
HANDLE = _lessor("ResourceHandle", "resourcehandles")
CLAIM = _lessor("ResourceClaim", "resourceclaims")

LESSOR_RESOURCES: tuple[Resource, ...] = (EXPORTER, CLIENT, POLICY, LEASE, PROVIDER, POOL, HANDLE, CLAIM)

NAMESPACE = Resource("", "v1", "Namespace", "namespaces", namespaced=False)
CONFIGMAP = Resource("", "v1", "ConfigMap", "configmaps")
CRD = Resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False)
VALIDATING_WEBHOOK = Resource(
    "admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration",
    "validatingwebhookconfigurations", namespaced=False,
)

_KNOWN = {(r.api_version, r.kind): r for r in (*LESSOR_RESOURCES, NAMESPACE, CONFIGMAP, CRD, VALIDATING_WEBHOOK)}


def known(api_version: str, kind: str) -> Resource | None:
    return _KNOWN.get((api_version, kind))
