"""How checks run: order, failures, the deadline, and checker set-up."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import pytest

from lessor.admission import (
    AdmissionRequest,
    Cause,
    Check,
    CheckResult,
    Deadline,
    FailurePolicy,
    Lookup,
    Registry,
    Unavailable,
    review,
)

SHORT = Deadline(webhook_timeout=0.2, margin=0.1)  # the checks get 0.1 s
SAFETY_NET = 5  # s; only there to turn a hang into a failure


class NoLookup:
    async def get(self, group: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return None

    async def list(self, group: str, kind: str, namespace: str, *,
                   consistent: bool = False) -> list[Mapping[str, Any]]:
        return []


class Stub:
    """A checker whose set-up runs ``prepare`` (if any) and returns the given checks."""

    def __init__(
        self,
        name: str,
        checks: dict[str, Check],
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.name = name
        self.check_names = tuple(checks)
        self._checks = checks
        self._prepare = prepare

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        if self._prepare is not None:
            await self._prepare()
        return self._checks


def deny(message: str, field: str = "") -> Check:
    async def check() -> CheckResult:
        return CheckResult.deny(Cause(message, field))

    return check


def ok(*warnings: str) -> Check:
    async def check() -> CheckResult:
        return CheckResult.ok(*warnings)

    return check


def lease_review(uid: str = "uid-1") -> dict[str, Any]:
    lease = {"apiVersion": "lessor.dev/v1alpha1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {}}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "lessor.dev", "version": "v1alpha1", "kind": "Lease"},
            "name": "l",
            "namespace": "lab",
            "operation": "CREATE",
            "object": lease,
        },
    }


async def answer(*checkers: Stub, deadline: Deadline = SHORT) -> dict[str, Any]:
    registry = Registry()
    for checker in checkers:
        registry.register("lessor.dev", "Lease", checker)
    with anyio.fail_after(SAFETY_NET):
        result = await review(lease_review(), registry, NoLookup(), deadline)
    response: dict[str, Any] = result["response"]
    return response


def causes(response: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["reason"], c["message"]) for c in response["status"]["details"]["causes"]]


async def test_results_come_back_in_declared_order_whatever_order_they_finish_in() -> None:
    layout = {f"checker-{c}": [f"check-{c}{k}" for k in "abc"] for c in "xyz"}
    expected = [name for names in layout.values() for name in names]

    def slow_denial(name: str, delay: float) -> Check:
        async def check() -> CheckResult:
            await anyio.sleep(delay)
            return CheckResult.deny(Cause(f"{name} says no"))

        return check

    for run in range(50):
        rng = random.Random(run)
        delays = [i / 1000 for i in range(len(expected))]  # 0..8 ms, shuffled per run
        rng.shuffle(delays)
        delay = dict(zip(expected, delays))
        checkers = [
            Stub(checker, {n: slow_denial(n, delay[n]) for n in names}) for checker, names in layout.items()
        ]
        response = await answer(*checkers)
        assert causes(response) == [(n, f"{n} says no") for n in expected]


async def test_an_exception_in_a_check_becomes_an_internal_error_naming_it_and_wins_over_denials() -> None:
    async def broken() -> CheckResult:
        raise RuntimeError("policy cache unavailable")

    response = await answer(
        Stub("lease", {"lease-selector": deny("too wide", "spec.selector"), "lease-policy": broken})
    )

    assert response["allowed"] is False
    assert response["status"]["code"] == 500
    assert response["status"]["reason"] == "InternalError"
    assert causes(response) == [
        ("lease-selector", "too wide"),
        ("lease-policy", "check lease-policy failed: RuntimeError: policy cache unavailable"),
    ]
    assert "lease-selector: spec.selector: too wide" in response["status"]["message"]


async def test_a_check_returning_no_result_is_an_internal_error() -> None:
    async def forgetful() -> CheckResult:
        return None  # type: ignore[return-value]

    response = await answer(Stub("lease", {"lease-forgetful": forgetful}))

    assert response["status"]["code"] == 500
    assert causes(response) == [
        ("lease-forgetful", "check lease-forgetful returned NoneType, not a CheckResult")
    ]


async def test_a_failing_set_up_is_reported_against_its_checker_and_other_checkers_still_answer() -> None:
    async def unreachable() -> None:
        raise ConnectionError("no route to API server")

    response = await answer(
        Stub("policy", {"policy-match": ok(), "policy-duration": ok()}, prepare=unreachable),
        Stub("lease", {"lease-selector": deny("too wide", "spec.selector")}),
    )

    assert response["status"]["code"] == 500
    assert causes(response) == [
        (
            "policy",
            "checker policy failed to set up (ConnectionError: no route to API server); "
            "checks not run: policy-match, policy-duration",
        ),
        ("lease-selector", "too wide"),
    ]


async def test_a_check_still_running_at_the_deadline_is_cancelled_and_answered_by_its_failure_policy() -> None:
    cancelled = anyio.Event()
    completed = []

    async def hangs() -> CheckResult:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        completed.append("hangs")  # unreachable unless sleep_forever returned
        return CheckResult.ok()

    strict = Stub("strict", {"strict-policy": hangs})
    strict.failure_policies = {"strict-policy": FailurePolicy.FAIL}  # type: ignore[attr-defined]
    response = await answer(
        Stub("lease", {"lease-selector": deny("too wide", "spec.selector"), "lease-policy": hangs}),
        strict,
        Stub("exporter", {"exporter-exists": deny("no exporter named e1", "spec.exporterRef.name")}),
    )

    assert cancelled.is_set() and not completed
    assert response["status"]["code"] == 422  # a verdict, never a 500
    assert causes(response) == [
        ("lease-selector", "too wide"),
        ("strict-policy", "check strict-policy could not finish (not within the review's 0.1 s); it refuses "
                          "what it could not check (failure policy Fail): try again later, or make the object "
                          "smaller"),
        ("exporter-exists", "no exporter named e1"),
    ]
    assert response["warnings"] == [  # the default policy, Ignore: the check is named, the object not held up by it
        "lease-policy: could not finish (not within the review's 0.1 s), so this object was not checked by it "
        "(failure policy Ignore); the operator judges it and reports on it"]


async def test_a_set_up_still_running_at_the_deadline_names_its_checker_and_the_checks_it_held_up() -> None:
    response = await answer(
        Stub("policy", {"policy-match": ok()}, prepare=anyio.sleep_forever),
        Stub("lease", {"lease-selector": deny("too wide")}),
    )

    assert causes(response) == [("lease-selector", "too wide")]
    assert response["warnings"] == [
        "policy-match: could not finish (set-up of checker policy did not finish within the review's 0.1 s), so "
        "this object was not checked by it (failure policy Ignore); the operator judges it and reports on it"]


async def test_a_lookup_the_api_server_does_not_answer_is_a_verdict_by_policy_not_an_internal_error() -> None:
    async def throttled() -> None:
        raise Unavailable("the API server did not answer: 429 TooManyRequests")

    async def unanswered() -> CheckResult:
        raise Unavailable("the API server did not answer: 503 ServiceUnavailable")

    strict = Stub("strict", {"strict-policy": unanswered})
    strict.failure_policies = {"strict-policy": FailurePolicy.FAIL}  # type: ignore[attr-defined]
    response = await answer(Stub("policy", {"policy-match": ok()}, prepare=throttled), strict)

    assert response["status"]["code"] == 422
    assert causes(response) == [("strict-policy", "check strict-policy could not finish (the API server did not "
                                 "answer: 503 ServiceUnavailable); it refuses what it could not check (failure "
                                 "policy Fail): try again later, or make the object smaller")]
    assert response["warnings"] == [
        "policy-match: could not finish (set-up of checker policy could not finish: the API server did not answer: "
        "429 TooManyRequests), so this object was not checked by it (failure policy Ignore); the operator judges "
        "it and reports on it"]


async def test_set_up_runs_once_per_request_and_its_checks_share_what_it_fetched() -> None:
    set_ups = []
    seen = []

    class Shared:
        name = "lease"
        check_names = ("lease-a", "lease-b")

        async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
            fetched = {"policies": [request["namespace"]]}
            set_ups.append(fetched)

            async def a() -> CheckResult:
                seen.append(fetched)
                return CheckResult.ok()

            async def b() -> CheckResult:
                seen.append(fetched)
                return CheckResult.ok()

            return {"lease-a": a, "lease-b": b}

    response = await answer(Shared())

    assert response["allowed"] is True
    assert len(set_ups) == 1
    assert len(seen) == 2 and all(s is set_ups[0] for s in seen)


async def test_checkers_set_up_concurrently_and_checks_do_not_wait_for_other_checkers() -> None:
    first_set_up, second_set_up, first_checked = anyio.Event(), anyio.Event(), anyio.Event()

    async def first_prepare() -> None:
        first_set_up.set()
        await second_set_up.wait()  # deadlocks if set-ups ran one after the other

    async def second_prepare() -> None:
        second_set_up.set()
        await first_set_up.wait()
        await first_checked.wait()  # deadlocks if checks waited for every set-up

    async def first_check() -> CheckResult:
        first_checked.set()
        return CheckResult.ok()

    response = await answer(
        Stub("first", {"first-check": first_check}, prepare=first_prepare),
        Stub("second", {"second-check": ok()}, prepare=second_prepare),
    )

    assert response == {"uid": "uid-1", "allowed": True}


async def test_checks_of_one_checker_run_concurrently() -> None:
    a_started, b_started = anyio.Event(), anyio.Event()

    async def a() -> CheckResult:
        a_started.set()
        await b_started.wait()
        return CheckResult.ok()

    async def b() -> CheckResult:
        b_started.set()
        await a_started.wait()
        return CheckResult.ok()

    response = await answer(Stub("lease", {"lease-a": a, "lease-b": b}))

    assert response["allowed"] is True


async def test_set_up_may_leave_out_checks_that_do_not_apply() -> None:
    class PinnedOnly:
        name = "lease"
        check_names = ("lease-selector", "lease-pinned-exporter")

        async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
            return {"lease-selector": deny("too wide")}  # the lease pins no exporter

    response = await answer(PinnedOnly())

    assert causes(response) == [("lease-selector", "too wide")]


async def test_set_up_returning_an_undeclared_check_is_an_internal_error() -> None:
    class Sloppy:
        name = "lease"
        check_names = ("lease-selector",)

        async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
            return {"lease-selector": ok(), "lease-typo": ok()}

    response = await answer(Sloppy())

    assert response["status"]["code"] == 500
    assert causes(response) == [
        ("lease", "checker lease returned undeclared checks ['lease-typo']; checks not run: lease-selector")
    ]


def test_the_checks_get_the_webhook_timeout_minus_the_margin() -> None:
    assert Deadline(webhook_timeout=10, margin=2).seconds == 8


@pytest.mark.parametrize(("timeout", "margin"), [(10, 10), (10, 0), (31, 2), (0, 0)])
def test_a_deadline_that_leaves_no_time_or_exceeds_what_kubernetes_allows_is_refused(
    timeout: float, margin: float
) -> None:
    with pytest.raises(ValueError):
        Deadline(webhook_timeout=timeout, margin=margin)
