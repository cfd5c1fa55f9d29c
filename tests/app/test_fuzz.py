"""Hostile and careless objects of all nine kinds through the real API server, with and without the webhook.

The bodies come from Hypothesis strategies (lessor/tools/bench/fuzz_bodies.py);
`lessor run` runs as a process of its own, so an object that blocks its
event loop fails the run instead of hanging it. Each run draws fresh bodies
from a new seed, printed first; ``LESSOR_FUZZ_SEED=N`` replays it and
``LESSOR_FUZZ_COUNT`` changes the bodies per kind. `lessor bench fuzz`
runs the same, longer.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import strategies as st

from lessor.admission import Deadline, MalformedReview, review
from lessor.admission.checks import preflight_registry
from lessor.tools.bench.fuzz import SEED_VARIABLE, VERDICTS, fresh_seed, fuzz
from lessor.tools.bench.fuzz_bodies import KINDS, manifests
from lessor.tools.controlplane import ControlPlane
from lessor.gateway import Gateway
from tests.slowness import scaled

COUNT = int(os.environ.get("LESSOR_FUZZ_COUNT", "40"))


class Objects:
    """An empty cluster, for the checks that look things up."""

    async def get(self, group: str, kind: str, namespace: str, name: str) -> None:
        return None

    async def list(self, group: str, kind: str, namespace: str, *, consistent: bool = False) -> list[Any]:
        return []


@pytest.mark.parametrize("webhook", [True, False], ids=["webhook", "no-webhook"])
async def test_no_body_crashes_blocks_or_misleads_the_operator_or_touches_what_is_not_its_own(
    controlplane: ControlPlane, kube: Gateway, tmp_path: Path, webhook: bool
) -> None:
    seed = fresh_seed()
    print(f"fuzz seed {seed}: replay with {SEED_VARIABLE}={seed}", flush=True)

    report = await fuzz(kube, controlplane.kubeconfig, count=COUNT, seed=seed, webhook=webhook, log_dir=tmp_path,
                        settle=scaled(15), linger=3)

    summary = json.dumps(report.summary(), indent=2, default=str)
    (tmp_path / "fuzz-report.json").write_text(summary)
    print(summary)
    assert report.tried >= len(KINDS) * COUNT * 0.9, "the operator stopped answering before most bodies were sent"
    assert report.accepted > 0 and sum(report.refused.values()) > 0, "bodies must exercise both sides"
    assert not report.problems(), f"seed {seed} ({SEED_VARIABLE}={seed} replays it):\n{summary}"


def test_every_kind_whose_spec_the_operator_judges_is_checked_for_its_verdict() -> None:
    """All but Exporter, whose only condition (Online) follows its agent's heartbeat, not its spec, and
    ResourcePoolScaling, which has no conditions (its status.state is what its pool did)."""
    assert set(VERDICTS) == set(KINDS) - {"Exporter", "ResourcePoolScaling"}


def review_of(body: dict[str, Any], operation: str, old: dict[str, Any] | None) -> dict[str, Any]:
    group, _, version = body["apiVersion"].partition("/")
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "fuzz", "kind": {"group": group, "version": version, "kind": body["kind"]},
        "name": body["metadata"].get("name", ""), "namespace": "lab", "operation": operation,
        "object": body, "oldObject": old}}


def test_the_webhook_answers_every_fuzzed_review_with_a_verdict_never_an_internal_error() -> None:
    """Straight to the webhook, without the CRD's schema in front: wrong types reach the checks too."""
    seed = fresh_seed()
    print(f"fuzz seed {seed}: replay with {SEED_VARIABLE}={seed}", flush=True)
    registry = preflight_registry("ops")
    lookup = Objects()
    answers: list[tuple[dict[str, Any], dict[str, Any]]] = []

    async def judge(body: dict[str, Any], operation: str, old: dict[str, Any] | None) -> None:
        try:
            answer = await review(review_of(body, operation, old), registry, lookup, Deadline())
        except MalformedReview:
            return  # a 400 saying which field: what a review whose object is not an object gets
        answers.append((body, answer["response"]))

    @hypothesis.seed(seed)
    @hypothesis.settings(max_examples=int(os.environ.get("LESSOR_FUZZ_REVIEWS", "200")), deadline=None,
                         database=None, suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(kind=st.sampled_from(KINDS), data=st.data(), update=st.booleans())
    def one(kind: str, data: st.DataObject, update: bool) -> None:
        body = data.draw(manifests(kind))
        body["metadata"]["name"] = "x"
        old = data.draw(manifests(kind)) if update else None
        if old is not None:
            old["metadata"]["name"] = "x"
        asyncio.run(judge(body, "UPDATE" if update else "CREATE", old))
        body_answer = answers[-1][1] if answers and answers[-1][0] is body else None
        if body_answer is not None and not body_answer["allowed"]:
            status = body_answer["status"]
            assert status["reason"] != "InternalError", status["message"]
            assert all(c.get("field") for c in status["details"]["causes"]), status["details"]["causes"]

    one()
    denied = sum(not answer["allowed"] for _, answer in answers)
    print(f"{len(answers)} reviews answered, {denied} denied")
    assert answers and denied, "the reviews must reach the checks, and some be denied"


def test_the_operator_log_is_read_line_by_line_for_tracebacks_and_restarts(tmp_path: Path) -> None:
    from lessor.tools.bench.fuzz import _read_log

    log = tmp_path / "operator.log"
    noise = "2026-11-26 06:00:00 WARNING lessor.actors: creating a handle failed\n" * 10_000
    log.write_text(noise + "2026-11-26 06:00:01 ERROR lessor.mailbox.cell: claim/team/c1 failed; restarting in 0.1s\n"
                   "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n    boom()\n"
                   "ValueError: boom\n" + noise)
    tracebacks, restarts = _read_log(log)
    assert restarts == {"claim": 1.0}
    assert tracebacks == ["2026-11-26 06:00:01 ERROR lessor.mailbox.cell: claim/team/c1 failed; restarting in 0.1s\n"
                          "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n    boom()\n"
                          "ValueError: boom"]
