"""The provisioning kinds, typed: ResourceClaim, ResourceHandle, ResourcePool, ResourceProvider, and the
ResourcePoolScaling that a pool reads.

Each property reads one field the actors, rules or webhook decide on, tolerant of any shape (see `meta`):
a missing or malformed field reads as None, empty, 0 or False. A field that a parser judges and reports
on (a lifespan, parameter values) is also given as written (`..._given`), so the parser can say what is
wrong with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from ..fields import Body, mapping_at, timestamp
from ..handles import claim_of
from ..labels import POOL_NAME, POOL_SCALING
from .conditions import Condition, StatusView
from .meta import EMPTY, View, ref_name, text

V = TypeVar("V", bound=View)

__all__ = ["ClaimView", "HandleView", "PoolView", "ProviderView", "ScalingView", "entries",
           "number", "view_of"]


def view_of(cls: type[V], body: Body, last: V | None) -> V:
    """`last` when it is the view of this very `body`, else a new one: an actor keeps the view of the object it
    last observed beside it, and builds it once per observed (or written) version."""
    return last if last is not None and last.body is body else cls.of(body)


def entries(value: Any) -> tuple[Mapping[str, Any], ...]:
    """A list of objects (`spec.resources`), index for index: an entry that is not an object reads as empty, a
    value that is not a list as no entries."""
    if not isinstance(value, list):
        return ()
    return tuple(entry if isinstance(entry, Mapping) else EMPTY for entry in value)


def number(value: Any) -> int | float | None:
    """A number field as written (an int stays an int); None for anything else, booleans included."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def provider_name(entry: Mapping[str, Any]) -> str | None:
    """The provider a resource entry (`spec.resources[]`, `status.resources[]`) names."""
    return ref_name(entry.get("provider"))


def _when(value: Any) -> str | None:
    when = value.get("when") if isinstance(value, Mapping) else None
    return when if isinstance(when, str) and when.strip() else None


@dataclass(frozen=True, slots=True)
class ClaimView(StatusView):
    """A ResourceClaim."""

    @property
    def resources(self) -> tuple[Mapping[str, Any], ...]:
        """`spec.resources[]`: a provider and a template each."""
        return entries(self.spec.get("resources"))

    @property
    def provider(self) -> Mapping[str, Any]:
        """`spec.provider` (provider mode: a provider and its parameter values); empty when there is none."""
        return mapping_at(self.spec, "provider")

    @property
    def provider_name(self) -> str | None:
        return ref_name(self.spec.get("provider"))

    @property
    def parameter_values_given(self) -> Any:
        """`spec.provider.parameterValues` as written (None when missing): the provider's parameters judge it."""
        return self.provider.get("parameterValues")

    @property
    def applied_provider(self) -> Mapping[str, Any]:
        """`status.provider`: the provider and parameter values last applied to the handle."""
        return mapping_at(self.status, "provider")

    @property
    def vars(self) -> Mapping[str, Any]:
        return mapping_at(self.spec, "vars")

    @property
    def disable_creation(self) -> bool:
        """`spec.disableCreation`: the claim waits for a pool's (or a free-standing) handle, never makes one."""
        return self.spec.get("disableCreation") is True

    @property
    def lifespan(self) -> Mapping[str, Any]:
        """`spec.lifespan`, the lifespan the user asks for."""
        return mapping_at(self.spec, "lifespan")

    @property
    def lifespan_given(self) -> Any:
        """`spec.lifespan` as written (None when missing), for the rules that say what is wrong with it."""
        return self.spec.get("lifespan")

    @property
    def requested_start_text(self) -> Any:
        """`spec.lifespan.start` as written; None when not asked for."""
        return self.lifespan.get("start")

    @property
    def requested_end_text(self) -> Any:
        """`spec.lifespan.end` as written; None when not asked for."""
        return self.lifespan.get("end")

    @property
    def requested_start(self) -> datetime | None:
        return timestamp(self.requested_start_text)

    @property
    def requested_end(self) -> datetime | None:
        return timestamp(self.requested_end_text)

    @property
    def status_lifespan(self) -> Mapping[str, Any]:
        """`status.lifespan`: the lifespan the claim got (start, end, firstReady, limits)."""
        return mapping_at(self.status, "lifespan")

    @property
    def lifespan_start(self) -> datetime | None:
        return timestamp(self.status_lifespan.get("start"))

    @property
    def lifespan_end(self) -> datetime | None:
        return timestamp(self.status_lifespan.get("end"))

    @property
    def first_ready(self) -> datetime | None:
        return timestamp(self.status_lifespan.get("firstReady"))

    @property
    def handle_ref(self) -> Mapping[str, Any] | None:
        """`status.resourceHandle` when the status names a handle (a detached one too)."""
        ref = self.status.get("resourceHandle")
        return ref if isinstance(ref, Mapping) else None

    @property
    def resource_handle(self) -> str | None:
        """The name of the handle the claim's status says it is bound to."""
        return ref_name(self.status.get("resourceHandle"))

    @property
    def detached(self) -> bool:
        """`status.resourceHandle.detached`: its handle is gone for good (`autoDetach`); it waits for its end."""
        return mapping_at(self.status, "resourceHandle").get("detached") is True

    @property
    def pinned_pool(self) -> str | None:
        """The one pool the claim asks (the resource-pool-name annotation, as Poolboy's)."""
        return self.meta.annotations.get(POOL_NAME) or None

    def when(self, field: str) -> str | None:
        """`spec.<field>.when` (`autoDelete`, `autoDetach`): the expression, None when there is none."""
        return _when(self.spec.get(field))

    @property
    def seen_by_templates(self) -> tuple[Mapping[str, str], Mapping[str, str]]:
        """Its labels and annotations: templates (lifespan settings, checks) may read them."""
        return self.meta.labels, self.meta.annotations


def _ready(status: Mapping[str, Any]) -> bool:
    return status.get("ready") is True


def _healthy(status: Mapping[str, Any]) -> bool:
    return status.get("healthy") is not False


@dataclass(frozen=True, slots=True)
class HandleView(StatusView):
    """A ResourceHandle."""

    @property
    def claim(self) -> tuple[str, str] | None:
        """(namespace, name) of the claim it is bound to; None while unbound."""
        return claim_of(self.body)

    @property
    def claim_ref(self) -> Mapping[str, Any]:
        return mapping_at(self.spec, "resourceClaim")

    @property
    def pooled(self) -> bool:
        """Whether it was made by (and waits in) a pool: `spec.resourcePool` is set."""
        return bool(self.spec.get("resourcePool"))

    @property
    def pool(self) -> str | None:
        """The name of its pool."""
        return ref_name(self.spec.get("resourcePool"))

    @property
    def provider(self) -> Mapping[str, Any] | None:
        """`spec.provider` (provider mode), the reference as written; None when it has none."""
        value = self.spec.get("provider")
        return value if isinstance(value, Mapping) else None

    @property
    def resources(self) -> tuple[Mapping[str, Any], ...]:
        """`spec.resources[]`: provider, template and (once created) reference of each."""
        return entries(self.spec.get("resources"))

    @property
    def reported(self) -> tuple[Mapping[str, Any], ...]:
        """`status.resources[]`: what its actor reports of each resource (reference, state, readiness)."""
        return entries(self.status.get("resources"))

    @property
    def lifespan(self) -> Mapping[str, Any]:
        return mapping_at(self.spec, "lifespan")

    @property
    def lifespan_given(self) -> Any:
        """`spec.lifespan` as written (None when missing), for `LifespanConfig.parse`, which judges it."""
        return self.spec.get("lifespan")

    @property
    def lifespan_end(self) -> datetime | None:
        return timestamp(self.lifespan.get("end"))

    @property
    def vars(self) -> Mapping[str, Any]:
        return mapping_at(self.spec, "vars")

    @property
    def resource_labels(self) -> Mapping[str, Any] | None:
        value = self.spec.get("resourceLabels")
        return value if isinstance(value, Mapping) else None

    @property
    def resource_annotations(self) -> Mapping[str, Any] | None:
        value = self.spec.get("resourceAnnotations")
        return value if isinstance(value, Mapping) else None

    @property
    def preference_score(self) -> float:
        """`spec.preferenceScore`; 0 when it has none."""
        return float(number(self.spec.get("preferenceScore")) or 0)

    @property
    def ready(self) -> bool:
        """`status.ready`: every resource is ready, as its actor reported."""
        return _ready(self.status)

    @property
    def healthy(self) -> bool:
        """Not reported unhealthy (`status.healthy`; unknown is healthy)."""
        return _healthy(self.status)

    @staticmethod
    def ready_of(body: Body) -> bool:
        """`ready` of a handle, without building its view: a pool asks it of each of its handles, often."""
        return _ready(mapping_at(body, "status"))

    @staticmethod
    def healthy_of(body: Body) -> bool:
        """`healthy` of a handle, without building its view (see `ready_of`)."""
        return _healthy(mapping_at(body, "status"))

    @property
    def rendered(self) -> Condition | None:
        """Its `Rendered` condition: whether (and at which generation) its actor reported on its spec."""
        return self.condition("Rendered")

    @property
    def refusal(self) -> Condition | None:
        """Its `Rendered` condition when it is False: its actor refuses to render a resource (and says why)."""
        rendered = self.rendered
        return rendered if rendered is not None and rendered.status == "False" else None

    @property
    def scaling(self) -> str | None:
        """The ResourcePoolScaling it was created for (its label)."""
        return self.scaling_of(self.body)

    @staticmethod
    def scaling_of(body: Body) -> str | None:
        """`scaling` of a handle, without building its view (see `ready_of`)."""
        label = mapping_at(mapping_at(body, "metadata"), "labels").get(POOL_SCALING)
        return label if isinstance(label, str) and label else None

    @property
    def generate_name(self) -> str:
        return text(mapping_at(self.body, "metadata").get("generateName")) or ""

    @property
    def guid(self) -> str:
        """The part of its name that `generateName` added (the whole name if it had none)."""
        name, prefix = self.name, self.generate_name
        if prefix and name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix):]
        if name.startswith("guid-") and len(name) > len("guid-"):
            return name[len("guid-"):]
        return name


@dataclass(frozen=True, slots=True)
class PoolView(StatusView):
    """A ResourcePool."""

    @property
    def min_available(self) -> int:
        """`spec.minAvailable`: how many unbound handles it keeps; 0 when unreadable."""
        value = self.spec.get("minAvailable")
        if isinstance(value, bool):
            return 0
        try:
            return int(value or 0)
        except (TypeError, ValueError):
            return 0

    @property
    def max_unready(self) -> int | None:
        """`spec.maxUnready`: how many not-ready handles it may have at once; None: no limit."""
        value = self.spec.get("maxUnready")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def preference_score(self) -> int | float | None:
        """`spec.preferenceScore` as written (carried to its handles); None when it has none."""
        return number(self.spec.get("preferenceScore"))

    @property
    def delete_unhealthy(self) -> bool:
        return self.spec.get("deleteUnhealthyResourceHandles") is True

    @property
    def lifespan_given(self) -> Any:
        """`spec.lifespan` as written (None when missing), for `LifespanConfig.parse`, which judges it."""
        return self.spec.get("lifespan")

    @property
    def provider_mode(self) -> bool:
        return isinstance(self.spec.get("provider"), Mapping)

    @property
    def provider_name(self) -> str | None:
        return ref_name(self.spec.get("provider"))

    @property
    def resources(self) -> tuple[Mapping[str, Any], ...]:
        return entries(self.spec.get("resources"))

    @property
    def uses(self) -> tuple[str, Any]:
        """Its mode and providers: ("provider", name) in provider mode, else ("resources", the provider of each
        resource in order). A claim asks only the pools in its own mode with its providers."""
        if self.provider_mode:
            return "provider", self.provider_name
        return "resources", tuple(provider_name(entry) for entry in self.resources)

    def carried(self, key: str) -> Mapping[str, Any] | None:
        """`spec.<key>` when it is an object (`vars`, `resourceLabels`, `resourceAnnotations`: copied onto each
        handle the pool makes)."""
        value = self.spec.get(key)
        return value if isinstance(value, Mapping) else None


@dataclass(frozen=True, slots=True)
class ProviderView(StatusView):
    """A ResourceProvider's definition fields (`Provider` in the actors compiles the rest)."""

    @property
    def disable_creation(self) -> bool:
        """`spec.disableCreation`: its claims wait for pools' (or free-standing) handles, never make one."""
        return self.spec.get("disableCreation") is True

    @property
    def vars(self) -> Mapping[str, Any]:
        return mapping_at(self.spec, "vars")

    @property
    def lifespan(self) -> Mapping[str, Any]:
        return mapping_at(self.spec, "lifespan")

    @property
    def status_summary_template(self) -> Mapping[str, Any] | None:
        """`spec.statusSummaryTemplate`; None when missing or empty."""
        value = self.spec.get("statusSummaryTemplate")
        return value if isinstance(value, Mapping) and value else None

    @property
    def resource_name(self) -> str | None:
        return text(self.spec.get("resourceName")) or None

    @property
    def resource_requires_claim(self) -> bool:
        return self.spec.get("resourceRequiresClaim") is True


@dataclass(frozen=True, slots=True)
class ScalingView(StatusView):
    """A ResourcePoolScaling."""

    @property
    def pool(self) -> str | None:
        """The pool it scales up (`spec.resourcePool.name`)."""
        return ref_name(self.spec.get("resourcePool"))

    @property
    def pool_given(self) -> Any:
        """`spec.resourcePool.name` as written (any type), for the webhook that judges it."""
        return mapping_at(self.spec, "resourcePool").get("name")
