"""Lifespan arithmetic for handles and claims: pure functions of the settings, the claim and `now`.

- `default` applies when a handle is claimed: the lifespan ends `default`
  after the claim's start, unless the claim asks for an end.
- `maximum` counts from the claim's creation, `relativeMaximum` from now
  (the moment the end is decided); the earlier of the two is the limit.
- A requested `spec.lifespan.end` beyond the limit is clamped to it, and the
  claim says so: the user asked for something and got less.
- `unclaimed` limits how long a pool's handle waits for a claim.
- A handle made for several providers takes the minimum of each setting,
  so no provider's limit is exceeded because another provider is laxer.
- `default`, `maximum` and `relativeMaximum` may be templates, as in
  Poolboy (`{% if 'vip' in resource_claim.annotations %}2d{% else %}2h{% endif %}`):
  kept as written in the handle and rendered, in the sandbox and its budget,
  wherever the claim reads them (they see `resource_claim`, `resource_handle`
  and the handle's vars), so they follow the claim. `unclaimed` applies
  before there is a claim and stays a plain duration.

No clock is read here: the caller passes `now`, so the rules are testable
and an actor can decide with the time its message was handled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from lessor.model.fields import mapping_at
from lessor.model.times import format_time
from lessor.model.views.provisioning import ClaimView, HandleView
from lessor.templates import (
    TemplateError,
    escape_pointer_token,
    format_duration,
    format_timestamp,
    parse_duration,
    parse_timestamp,
    render_object,
    render_string,
    template_errors,
    template_variables,
)

_SETTINGS = (("default", "default"), ("maximum", "maximum"),
             ("relative_maximum", "relativeMaximum"), ("unclaimed", "unclaimed"))
_KEYS = dict(_SETTINGS)
_MARKUP = ("{{", "{%", "{#")


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and any(mark in value for mark in _MARKUP)


@dataclass(frozen=True)
class LifespanConfig:
    """The four lifespan settings of a provider, pool or handle; None where unset."""

    default: timedelta | None = None
    maximum: timedelta | None = None
    relative_maximum: timedelta | None = None
    unclaimed: timedelta | None = None
    templates: tuple[tuple[str, str], ...] = ()
    """(attribute, template) for settings written as templates, rendered by `render`; an attribute may appear
    more than once (a handle made for several providers), and with a duration too: the least value wins."""

    @classmethod
    def parse(cls, spec: Any, field: str) -> tuple[LifespanConfig, tuple[str, ...]]:
        """Read a `lifespan` object; errors name the field (`spec.lifespan.maximum: invalid duration ...`).

        A setting that does not parse is left unset and reported, so the
        others still apply.
        """
        if spec is None:
            return cls(), ()
        if not isinstance(spec, Mapping):
            return cls(), (f"{field}: must be an object",)
        values: dict[str, timedelta | None] = {}
        templates: list[tuple[str, str]] = []
        errors = []
        for attribute, key in _SETTINGS:
            text = spec.get(key)
            if text is None:
                continue
            if _is_template(text):
                if key == "unclaimed":
                    errors.append(f"{field}.{key}: cannot be a template: it applies before there is a claim "
                                  "(write a duration such as 6h)")
                    continue
                problems = template_errors(f"{field}.{key}", text)
                errors += problems
                if not problems:
                    templates.append((attribute, text))
                continue
            try:
                value = parse_duration(text)
            except (TypeError, ValueError) as error:
                errors.append(f"{field}.{key}: {error}")
                continue
            if value < timedelta(0):
                errors.append(f"{field}.{key}: a lifespan cannot be negative ({text!r})")
                continue
            values[attribute] = value
        return cls(**values, templates=tuple(templates)), tuple(errors)

    def render(self, variables: Mapping[str, Any], field: str = "spec.lifespan") -> tuple[LifespanConfig,
                                                                                            tuple[str, ...]]:
        """The settings with every template rendered (the least value where several set one); a template that
        cannot be rendered, or that does not give a duration, leaves its setting unset and is an error naming it
        (`spec.lifespan.maximum: ...`)."""
        if not self.templates:
            return self, ()
        values = {attribute: getattr(self, attribute) for attribute, _ in _SETTINGS}
        errors = []
        for attribute, source in self.templates:
            key = _KEYS[attribute]
            try:
                text = render_string(source, variables, f"/spec/lifespan/{key}")
                value = parse_duration(str(text).strip())
                if value < timedelta(0):
                    raise ValueError(f"a lifespan cannot be negative ({text!r})")
            except TemplateError as error:
                errors.append(f"{field}.{key}: could not render: {error.message}")
                continue
            except (TypeError, ValueError) as error:
                errors.append(f"{field}.{key}: the template gave {str(text)[:64]!r}, not a duration: {error}")
                continue
            current = values[attribute]
            values[attribute] = value if current is None else min(current, value)
        return LifespanConfig(**values), tuple(errors)

    def to_spec(self, *, unclaimed: bool = False) -> dict[str, str]:
        """The settings as a `lifespan` object (durations written as `1d`, `12h`, templates as written); unset
        ones left out."""
        spec = {}
        for attribute, key in _SETTINGS:
            value = getattr(self, attribute)
            sources = [source for name, source in self.templates if name == attribute]
            if sources:
                spec[key] = _least_of(sources, value)
            elif value is not None and (key != "unclaimed" or unclaimed):
                spec[key] = format_duration(value)
        return spec

    def limit(self, *, created: datetime, now: datetime) -> tuple[datetime | None, str]:
        """The latest end allowed, and which setting sets it (empty when unlimited)."""
        candidates = []
        if self.maximum is not None:
            candidates.append((created + self.maximum,
                               f"maximum {format_duration(self.maximum)} from the claim's creation"))
        if self.relative_maximum is not None:
            candidates.append((now + self.relative_maximum,
                               f"relativeMaximum {format_duration(self.relative_maximum)} from now"))
        if not candidates:
            return None, ""
        return min(candidates, key=lambda candidate: candidate[0])


def _least_of(sources: list[str], value: timedelta | None) -> str:
    """One template for a setting several templates (and perhaps a duration) set: the least of their values."""
    if len(sources) == 1 and value is None:
        return sources[0]
    parts = "".join(f"{{% set lifespan_{i} %}}{source}{{% endset %}}" for i, source in enumerate(sources))
    values = [f"timedelta(lifespan_{i} | trim)" for i in range(len(sources))]
    if value is not None:
        values.append(f"timedelta({format_duration(value)!r})")
    return f"{parts}{{{{ [{', '.join(values)}] | min }}}}"


def combine(configs: Iterable[LifespanConfig]) -> LifespanConfig:
    """The minimum of each setting over `configs` (unset where none sets it); templates are kept, to be
    rendered (the least value wins then)."""
    configs = list(configs)

    def least(attribute: str) -> timedelta | None:
        values = [getattr(config, attribute) for config in configs if getattr(config, attribute) is not None]
        return min(values) if values else None

    templates = tuple(dict.fromkeys(entry for config in configs for entry in config.templates))
    return LifespanConfig(**{attribute: least(attribute) for attribute, _ in _SETTINGS}, templates=templates)


def lifespan_variables(claim: Mapping[str, Any] | None, handle: Mapping[str, Any] | None,
                       now: datetime) -> dict[str, Any]:
    """What a lifespan template sees: `resource_claim`, `resource_handle` and the handle's vars (as in Poolboy)."""
    variables = template_variables(resource_claim=claim, resource_handle=handle, clock=lambda: now)
    rendered: dict[str, Any] = {}
    values = HandleView.of(handle).vars if handle is not None else {}
    for name, value in values.items():
        try:
            rendered[name] = render_object(value, {**rendered, **variables},
                                           f"/spec/vars/{escape_pointer_token(str(name))}")
        except TemplateError:
            continue  # a var that cannot render is undefined here; the handle reports it
    return {**rendered, **variables}


def rendered_lifespan(spec: Any, *, claim: Mapping[str, Any] | None, handle: Mapping[str, Any] | None,
                      now: datetime, field: str = "spec.lifespan") -> tuple[LifespanConfig, tuple[str, ...]]:
    """A `lifespan` object read and its templates rendered for `claim` and `handle`: (config, errors)."""
    config, errors = LifespanConfig.parse(spec, field)
    if not config.templates:
        return config, errors
    config, problems = config.render(lifespan_variables(claim, handle, now), field)
    return config, errors + problems


@dataclass(frozen=True)
class Lifespan:
    """A claim's effective lifespan.

    `end` is None when nothing limits it. `clamped` is True when the claim
    asked for a later end than allowed; `message` then says what it asked,
    what limits it and the end it gets (for a condition or an event).
    """

    start: datetime
    end: datetime | None
    limit: datetime | None
    clamped: bool = False
    message: str = ""

    def status(self, config: LifespanConfig) -> dict[str, str]:
        """`status.lifespan` of the claim (`firstReady` is the actor's to add)."""
        status = {"start": format_time(self.start)}
        if self.end is not None:
            status["end"] = format_time(self.end)
        if config.maximum is not None:
            status["maximum"] = format_duration(config.maximum)
        if config.relative_maximum is not None:
            status["relativeMaximum"] = format_duration(config.relative_maximum)
        return status


def claim_lifespan(config: LifespanConfig, *, created: datetime, start: datetime,
                   requested_end: datetime | None, now: datetime) -> Lifespan:
    """The lifespan a claim gets.

    `created` is the claim's creationTimestamp, `start` when it is (or was)
    claimed, `requested_end` its `spec.lifespan.end`. Without a requested
    end the default applies; without a default the limit is the end, so a
    `maximum` is never exceeded by leaving the end out.
    """
    limit, limited_by = config.limit(created=created, now=now)
    if requested_end is not None:
        if limit is not None and requested_end > limit:
            return Lifespan(start, limit, limit, True,
                            f"spec.lifespan.end {format_timestamp(requested_end)} is later than allowed by the "
                            f"{limited_by}; the lifespan ends at {format_timestamp(limit)}")
        return Lifespan(start, requested_end, limit)
    if config.default is not None:
        end = start + config.default
        if limit is not None and end > limit:
            return Lifespan(start, limit, limit, False,
                            f"the default lifespan {format_duration(config.default)} would end after the "
                            f"{limited_by}; the lifespan ends at {format_timestamp(limit)}")
        return Lifespan(start, end, limit)
    return Lifespan(start, limit, limit)


def claim_lifespan_of(config: LifespanConfig, claim: Mapping[str, Any], *, start: datetime,
                      now: datetime) -> tuple[Lifespan | None, str]:
    """`claim_lifespan` reading the claim's creation and requested end; (None, error) when unreadable."""
    try:  # read as written: the parser says what is wrong with it
        created = parse_timestamp(mapping_at(claim, "metadata").get("creationTimestamp"))
    except (TypeError, ValueError) as error:
        return None, f"metadata.creationTimestamp: {error}"
    requested = ClaimView.of(claim).requested_end_text
    requested_end = None
    if requested is not None:
        try:
            requested_end = parse_timestamp(requested)
        except (TypeError, ValueError) as error:
            return None, f"spec.lifespan.end: {error}"
    return claim_lifespan(config, created=created, start=start, requested_end=requested_end, now=now), ""


def unclaimed_end(config: LifespanConfig, *, created: datetime) -> datetime | None:
    """When an unclaimed pool handle is replaced: `unclaimed` after its creation (None: never)."""
    return None if config.unclaimed is None else created + config.unclaimed


def handle_lifespan_spec(config: LifespanConfig, end: datetime | None = None) -> dict[str, str]:
    """`spec.lifespan` of a handle: its settings (no `unclaimed`, which the pool keeps) and its end."""
    spec = config.to_spec()
    if end is not None:
        spec["end"] = format_time(end)
    return spec
