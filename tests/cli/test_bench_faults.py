"""`lessor bench faults` at a tiny size in the two modes that need more than a kill: its JSON shows the fault
happened (every informer listed again after the compaction; the operator's requests answered 429 and waited out)
and that the storm still converged with no double grant and no actor restart. The figures are the benchmark's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.slowness import scaled

pytestmark = pytest.mark.apiserver

LESSOR = Path(sys.executable).parent / "lessor"
TINY = ("--exporters", "20", "--groups", "4", "--clients", "6", "--leases", "60", "--rate", "20",
        "--kill-after", "1", "--down", "2")


def _faults(mode: str, tmp_path: Path) -> dict[str, Any]:
    done = subprocess.run([str(LESSOR), "bench", "faults", "--mode", mode, *TINY], cwd=tmp_path,
                          capture_output=True, text=True, timeout=scaled(400))
    assert done.returncode == 0, done.stderr[-3000:]
    figures: dict[str, Any] = json.loads(done.stdout)
    assert figures["mode"] == mode and figures["converged"], figures
    assert figures["granted"] == figures["expected_grants"] == 20, figures
    assert figures["double_grants"] == figures["stale_refs"] == figures["no_status"] == 0, figures
    assert figures["actor_restarts"] == {} and figures["tracebacks"] == 0, figures
    return figures


def test_bench_faults_compact_makes_every_informer_list_again_and_the_storm_converges(tmp_path: Path) -> None:
    figures = _faults("compact", tmp_path)
    assert figures["compacted_to_revision"] > 0
    assert figures["watch_failures"].get("410", 0) > 0, figures["watch_failures"]


def test_bench_faults_overload_answers_the_operator_429_and_it_waits_them_out(tmp_path: Path) -> None:
    figures = _faults("overload", tmp_path)
    assert figures["neighbour_429s"] > 0
    assert figures["retries"].get("429", 0) > 0, figures["retries"]
