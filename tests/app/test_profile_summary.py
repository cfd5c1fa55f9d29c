"""The summary `lessor bench leases --profile` adds to its JSON: which stage a sampled stack counts for."""

from __future__ import annotations

from lessor.tools.bench.profiling import OTHER, summarise

SITE = "/venv/lib/python3.11/site-packages"
STD = "/usr/lib/python3.11"
ROOT = f"process 1:\"python -m lessor run\";main ({SITE}/lessor/cli.py);_run_once ({STD}/asyncio/base_events.py)"


def test_a_sample_counts_for_the_innermost_frame_that_names_a_stage_passing_over_generic_library_frames() -> None:
    raw = "\n".join([
        # deepcopy (standard library) inside the topology: topology
        f"{ROOT};receive ({SITE}/lessor/topology/actor.py);deepcopy ({STD}/copy.py) 3",
        # json inside the informer: JSON, not the watch
        f"{ROOT};_on_line ({SITE}/lessor/gateway/informer.py);loads ({STD}/json/__init__.py) 2",
        # a span begun by a message's handling: spans
        f"{ROOT};_drain ({SITE}/lessor/mailbox/cell.py);start_span ({SITE}/opentelemetry/sdk/trace/__init__.py) 4",
        # the loop alone, under the command's frame: no stage
        f"{ROOT};select ({STD}/selectors.py) 1",
    ])
    report = summarise(raw)
    assert report["samples"] == 10
    assert report["stages_percent"] == {"spans": 40.0, "topology": 30.0, "JSON": 20.0, OTHER: 10.0}
    assert report["top_self_percent"]["start_span (opentelemetry/sdk/trace/__init__.py)"] == 40.0
    assert report["top_cumulative_percent"]["main (lessor/cli.py)"] == 100.0


def test_lines_that_are_not_stacks_are_skipped() -> None:
    assert summarise("\n\nnot a stack\n")["samples"] == 0
