"""`lessor bench grpc --hostile` at a tiny size: its JSON says per probe what was answered, and no probe got
UNKNOWN or INTERNAL (the figures themselves are the benchmark's, not the test's)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.jumpstarter.test_grpc import LESSOR
from tests.slowness import scaled

pytestmark = pytest.mark.apiserver


def test_bench_grpc_hostile_reports_each_probe_and_no_call_is_unknown_or_internal(tmp_path: Path) -> None:
    done = subprocess.run([str(LESSOR), "bench", "grpc", "--hostile", "--bad-calls", "24", "--bad-tokens", "14",
                           "--streams", "20", "--router-mib", "16"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=scaled(400))
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)
    assert figures["mode"] == "hostile" and figures["unknown_or_internal"] == 0, figures
    probes = figures["probes"]
    assert set(probes) == {"malformed_bodies", "crafted_tokens", "stream_flood", "router_never_reads"}
    for name, probe in probes.items():
        assert not {"UNKNOWN", "INTERNAL"} & set(probe["codes"]), (name, probe["codes"])
        assert probe["tracebacks"] == 0, name
        assert {"before", "after"} <= set(probe["rss_mb"]) and probe["log_lines_per_bad_call"] >= 0, probe
        assert probe["legit_create_lease_ms"]["calls"] > 0, (name, probe)
    assert probes["malformed_bodies"]["codes"] == {"INVALID_ARGUMENT": 24}
    assert sum(probes["crafted_tokens"]["codes"].values()) == 14 and "OK" not in probes["crafted_tokens"]["codes"]
    assert probes["stream_flood"]["codes"]["RESOURCE_EXHAUSTED"] > 0, probes["stream_flood"]
    assert probes["stream_flood"]["codes"]["UNAUTHENTICATED"] == 20
    assert probes["router_never_reads"]["megabytes_accepted"] > 0
    assert figures["quiet"]["legit_create_lease_ms"]["calls"] > 0
