"""`lessor bench grpc --through follower`: the figures are of calls a follower relayed, not of the leader's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.jumpstarter.test_grpc import LESSOR
from tests.slowness import scaled

pytestmark = pytest.mark.apiserver


def test_bench_grpc_through_a_follower_relays_every_call_and_prints_its_figures(tmp_path: Path) -> None:
    done = subprocess.run([str(LESSOR), "bench", "grpc", "--through", "follower", "--leases", "2", "--megabytes", "1",
                           "--pings", "20"], cwd=tmp_path, capture_output=True, text=True, timeout=scaled(300))
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)
    assert figures["setup"]["through"] == "follower"
    assert "two replicas" in done.stderr  # the progress says what is measured
    # Two CreateLeases, the GetLease polls, two DeleteLeases, ReportStatus, Listen, Dial, two router streams.
    assert figures["relayed_calls"] >= 2 + 2 + 2 + 4, figures
    assert figures["create_to_ready_ms"]["p50"] > 0 and figures["router"]["megabytes_per_second"] > 0, figures
