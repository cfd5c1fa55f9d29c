"""What the user gets back: the response mapping, the skip annotation, what is never checked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from lessor.admission import (
    SKIP_ANNOTATION,
    AdmissionRequest,
    Cause,
    Check,
    CheckResult,
    Deadline,
    Lookup,
    Registry,
    review,
)

DEADLINE = Deadline(webhook_timeout=0.2, margin=0.1)


class NoLookup:
    async def get(self, group: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return None

    async def list(self, group: str, kind: str, namespace: str, *,
                   consistent: bool = False) -> list[Mapping[str, Any]]:
        return []


class Recording:
    """A checker that records its set-up and every check it ran."""

    def __init__(self, name: str, results: dict[str, CheckResult], log: list[str]) -> None:
        self.name = name
        self.check_names = tuple(results)
        self._results = results
        self._log = log

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        self._log.append(f"set up {self.name}")
        return {name: self._check(name, result) for name, result in self._results.items()}

    def _check(self, name: str, result: CheckResult) -> Check:
        async def check() -> CheckResult:
            self._log.append(name)
            return result

        return check


def lease(spec: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "Lease",
        "metadata": {"name": "l", "namespace": "lab", **metadata},
        "spec": spec if spec is not None else {"selector": {}},
    }


def request(
    obj: dict[str, Any] | None,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    kind: str = "Lease",
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "lessor.dev", "version": "v1alpha1", "kind": kind},
            "name": "l",
            "namespace": "lab",
            "operation": operation,
            "object": obj,
            "oldObject": old,
        },
    }


async def respond(registry: Registry, body: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(5):
        answer = await review(body, registry, NoLookup(), DEADLINE)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response: dict[str, Any] = answer["response"]
    return response


def lease_registry(log: list[str]) -> Registry:
    registry = Registry()
    registry.register(
        "lessor.dev",
        "Lease",
        Recording(
            "lease",
            {
                "lease-selector": CheckResult.deny(Cause("must not be empty", "spec.selector")),
                "lease-duration": CheckResult.deny(Cause("2h exceeds\nthe policy's 1h")),
            },
            log,
        ),
    )
    registry.register("lessor.dev", "Lease", Recording("client", {"client-exists": CheckResult.ok()}, log))
    return registry


# The response


async def test_a_denial_is_422_invalid_with_one_cause_per_check_cause_and_a_one_line_summary() -> None:
    response = await respond(lease_registry([]), request(lease()))

    assert response["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert response["allowed"] is False
    status = response["status"]
    assert (status["status"], status["code"], status["reason"]) == ("Failure", 422, "Invalid")
    assert status["details"]["causes"] == [
        {"reason": "lease-selector", "message": "must not be empty", "field": "spec.selector"},
        {"reason": "lease-duration", "message": "2h exceeds the policy's 1h"},
    ]
    assert status["details"]["kind"] == "Lease" and status["details"]["name"] == "l"
    assert status["message"] == (
        "denied by lessor preflight: lease-selector: spec.selector: must not be empty; "
        "lease-duration: 2h exceeds the policy's 1h"
    )


async def test_warnings_from_all_checks_reach_the_user_named_after_their_check_even_when_admitted() -> None:
    registry = Registry()
    registry.register(
        "lessor.dev",
        "Lease",
        Recording(
            "lease",
            {
                "lease-spot": CheckResult.ok("spot access: the lease may be evicted"),
                "lease-duration": CheckResult.ok("no end time", "no begin time"),
            },
            [],
        ),
    )

    response = await respond(registry, request(lease()))

    assert response == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": True,
        "warnings": [
            "lease-spot: spot access: the lease may be evicted",
            "lease-duration: no end time",
            "lease-duration: no begin time",
        ],
    }


async def test_warnings_of_a_denying_check_are_kept() -> None:
    registry = Registry()
    denial = CheckResult.deny(
        Cause("no such client", "spec.clientRef.name"), warnings=("clients are cached",)
    )
    registry.register("lessor.dev", "Lease", Recording("client", {"client-exists": denial}, []))

    response = await respond(registry, request(lease()))

    assert response["allowed"] is False
    assert response["warnings"] == ["client-exists: clients are cached"]


def test_a_result_cannot_deny_without_saying_why_nor_admit_with_causes() -> None:
    with pytest.raises(ValueError):
        CheckResult.deny()
    with pytest.raises(ValueError):
        CheckResult(allowed=True, causes=(Cause("x"),))


# The skip annotation


async def test_skip_annotation_ignores_case_and_spaces_and_warns_for_each_skipped_check() -> None:
    log: list[str] = []
    obj = lease(annotations={SKIP_ANNOTATION: " Lease-Selector ,LEASE - duration,"})

    response = await respond(lease_registry(log), request(obj))

    assert response["allowed"] is True
    assert response["warnings"] == [
        f"check lease-selector skipped by annotation {SKIP_ANNOTATION}",
        f"check lease-duration skipped by annotation {SKIP_ANNOTATION}",
    ]
    assert log == ["set up client", "client-exists"]  # a checker with nothing left is not even set up


async def test_skip_all_skips_every_check_without_setting_anything_up() -> None:
    log: list[str] = []

    response = await respond(lease_registry(log), request(lease(annotations={SKIP_ANNOTATION: " ALL "})))

    assert response["allowed"] is True
    assert response["warnings"] == [
        f"check {name} skipped by annotation {SKIP_ANNOTATION}"
        for name in ("lease-selector", "lease-duration", "client-exists")
    ]
    assert log == []


async def test_unknown_names_in_the_skip_annotation_are_warned_about_and_the_rest_still_apply() -> None:
    log: list[str] = []
    obj = lease(annotations={SKIP_ANNOTATION: "lease-selectr, lease-duration"})

    response = await respond(lease_registry(log), request(obj))

    assert [c["reason"] for c in response["status"]["details"]["causes"]] == ["lease-selector"]
    assert response["warnings"] == [
        f"check lease-duration skipped by annotation {SKIP_ANNOTATION}",
        f"{SKIP_ANNOTATION}: no check named 'lease-selectr'",
    ]


async def test_all_among_other_names_skips_only_those_names() -> None:
    log: list[str] = []
    obj = lease(annotations={SKIP_ANNOTATION: "all,lease-duration"})

    response = await respond(lease_registry(log), request(obj))

    assert [c["reason"] for c in response["status"]["details"]["causes"]] == ["lease-selector"]
    assert response["warnings"] == [
        f"{SKIP_ANNOTATION}: 'all' only counts on its own; ignored",
        f"check lease-duration skipped by annotation {SKIP_ANNOTATION}",
    ]


# What is never checked


async def test_deletes_are_admitted_without_running_checks() -> None:
    log: list[str] = []

    response = await respond(lease_registry(log), request(None, "DELETE", old=lease()))

    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}
    assert log == []


@pytest.mark.parametrize(
    "changed",
    [
        {"metadata": {"name": "l", "namespace": "lab", "labels": {"team": "qa"}, "finalizers": ["x"]}},
        {"status": {"ended": True, "conditions": [{"type": "Ready", "status": "False"}]}},
        {"metadata": {"name": "l", "namespace": "lab", "annotations": {SKIP_ANNOTATION: "all"}}},
    ],
    ids=["labels-and-finalizers", "status", "skip-annotation"],
)
async def test_updates_to_metadata_or_status_alone_are_admitted_without_running_checks(
    changed: dict[str, Any],
) -> None:
    log: list[str] = []
    old = lease()

    response = await respond(lease_registry(log), request({**old, **changed}, "UPDATE", old=old))

    assert response["allowed"] is True
    assert log == []


async def test_an_update_to_the_spec_is_checked() -> None:
    log: list[str] = []
    old = lease({"selector": {"matchLabels": {"board": "rpi"}}})

    response = await respond(lease_registry(log), request(lease(), "UPDATE", old=old))

    assert response["allowed"] is False
    assert "set up lease" in log


# The registry


async def test_checkers_apply_only_to_the_kind_they_are_registered_for() -> None:
    log: list[str] = []

    response = await respond(lease_registry(log), request(lease(), kind="Exporter"))

    assert response["allowed"] is True
    assert log == []


@pytest.mark.parametrize(
    "names",
    [("Lease-Selector",), ("lease selector",), ("all",), ("a,b",), ("lease",)],
    ids=["uppercase", "space", "all", "comma", "same-as-its-checker"],
)
def test_names_the_skip_annotation_could_not_address_are_refused(names: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        checker = Recording("lease", dict.fromkeys(names, CheckResult.ok()), [])
        Registry().register("lessor.dev", "Lease", checker)


def test_two_checkers_of_one_kind_cannot_share_a_check_name() -> None:
    registry = Registry()
    registry.register("lessor.dev", "Lease", Recording("lease", {"lease-selector": CheckResult.ok()}, []))
    with pytest.raises(ValueError):
        registry.register("lessor.dev", "Lease", Recording("other", {"lease-selector": CheckResult.ok()}, []))
    registry.register("lessor.dev", "Exporter", Recording("other", {"lease-selector": CheckResult.ok()}, []))
