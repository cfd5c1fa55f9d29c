"""Where each kind lives in the REST API."""

from __future__ import annotations

from dataclasses import dataclass

from lessor.model import kinds
from lessor.model.kinds import API_VERSION as API_VERSION  # re-exported for the app
from lessor.model.kinds import GROUP as GROUP
from lessor.model.kinds import VERSION as VERSION


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


def _lessor(kind: kinds.Kind) -> Resource:
    """The REST resource of one of lessor's kinds (identity and plural from `lessor.model.kinds`)."""
    return Resource(GROUP, VERSION, kind.kind, kind.plural)


EXPORTER = _lessor(kinds.EXPORTER)
CLIENT = _lessor(kinds.CLIENT)
POLICY = _lessor(kinds.POLICY)
LEASE = _lessor(kinds.LEASE)
PROVIDER = _lessor(kinds.PROVIDER)
POOL = _lessor(kinds.POOL)
HANDLE = _lessor(kinds.HANDLE)
CLAIM = _lessor(kinds.CLAIM)

SCALING = _lessor(kinds.SCALING)
LESSOR_RESOURCES: tuple[Resource, ...] = (EXPORTER, CLIENT, POLICY, LEASE, PROVIDER, POOL, HANDLE, CLAIM, SCALING)

NAMESPACE = Resource("", "v1", "Namespace", "namespaces", namespaced=False)
CONFIGMAP = Resource("", "v1", "ConfigMap", "configmaps")
CRD = Resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False)
EVENT = Resource("events.k8s.io", "v1", "Event", "events")
VALIDATING_WEBHOOK = Resource(
    "admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration",
    "validatingwebhookconfigurations", namespaced=False,
)

_KNOWN = {(r.api_version, r.kind): r for r in (*LESSOR_RESOURCES, NAMESPACE, CONFIGMAP, EVENT, CRD, VALIDATING_WEBHOOK)}


def known(api_version: str, kind: str) -> Resource | None:
    return _KNOWN.get((api_version, kind))
