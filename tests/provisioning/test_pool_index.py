"""The pool's index of unbound handles finds exactly the handle a scan with `matches_handle` would (fast, in memory)."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from lessor.actors.provisioning.claim_spec import ClaimResource, ClaimSpec, matches_handle
from lessor.actors.provisioning.handle_index import IndexedHandles, template_key


def _free(handle: Any) -> bool:
    return not (handle.get("spec") or {}).get("resourceClaim")


def _preference(handle: Any) -> tuple[bool, str]:
    return not (handle.get("status") or {}).get("ready"), handle["metadata"]["name"]


def _spec(template: dict[str, Any], ignore: tuple[str, ...] = ()) -> ClaimSpec:
    provider = SimpleNamespace(name="env", match_ignore=ignore)
    return ClaimSpec((ClaimResource(0, "env", provider, template),))  # type: ignore[arg-type]


def _handle(name: str, template: dict[str, Any], *, ready: bool = True, claim: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": [{"provider": {"name": "env"}, "template": template}]}
    if claim:
        spec["resourceClaim"] = {"namespace": "ns", "name": claim}
    return {"metadata": {"name": name}, "spec": spec, "status": {"ready": ready}}


def test_matching_templates_have_the_same_key_even_where_only_ignored_values_differ() -> None:
    ignore = ("/data/owner", "/vars/.*")
    assert template_key({"data": {"size": "s", "owner": "a"}}, ignore) == template_key({"data": {"size": "s"}}, ignore)
    assert template_key({"vars": {"x": 1}}, ignore) == template_key({}, ignore)
    assert template_key({"n": 1}, ()) == template_key({"n": 1.0}, ())
    assert template_key({"n": 1}, ()) != template_key({"n": True}, ())


def test_the_index_picks_what_a_scan_would_through_binds_and_changes() -> None:
    rng = random.Random(7)
    sizes, owners = ["s", "m"], ["a", "b", None]
    handles = IndexedHandles(_free, _preference)
    for step in range(400):
        name = f"h{rng.randrange(60):02d}"
        template: dict[str, Any] = {"data": {"size": rng.choice(sizes)}}
        if (owner := rng.choice(owners)) is not None:
            template["data"]["owner"] = owner
        if rng.random() < 0.15:
            handles.pop(name, None)
        else:
            claim = f"c{step}" if rng.random() < 0.3 else None
            handles[name] = _handle(name, template, ready=rng.random() < 0.5, claim=claim)
        want = {"data": {"size": rng.choice(sizes), "owner": rng.choice(["a", "b"])}}
        for ignore in [("/data/owner",), ()]:
            spec = _spec(want, ignore)
            taken = {f"h{rng.randrange(60):02d}"}
            scanned = min((h for h in handles.values() if _free(h) and h["metadata"]["name"] not in taken
                           and matches_handle(spec, h)), key=_preference, default=None)
            assert handles.unbound.best(spec, taken) == scanned


def test_the_handle_bound_to_a_claim_is_found_until_it_is_released() -> None:
    handles = IndexedHandles(_free, _preference)
    handles["h1"] = _handle("h1", {}, claim="c1")
    assert handles.bound_to(("ns", "c1")) == handles["h1"]
    handles["h1"] = _handle("h1", {})
    assert handles.bound_to(("ns", "c1")) is None
    assert handles.unbound.best(_spec({}), set()) == handles["h1"]
