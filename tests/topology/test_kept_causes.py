"""What the topology keeps of each object's last watch event before `Synced`, for its actor to start in that
event's trace: only recorded traces, only their ids, and at most `KEPT_CAUSES` objects (the oldest go first)."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from lessor.mailbox import Cause
from lessor.topology import Topology
from lessor.topology.actor import KEPT_CAUSES
from lessor.topology.keys import LEASE, ObjectKey
from lessor.app.topology_questions import topology_state


def _cause(trace_id: int, sampled: bool = True) -> Cause:
    span = NonRecordingSpan(SpanContext(trace_id, 1, is_remote=False,
                                        trace_flags=TraceFlags(TraceFlags.SAMPLED if sampled else 0)))
    return Cause(trace.set_span_in_context(span))


def _trace_of(cause: Cause) -> int:
    return trace.get_current_span(cause.context).get_span_context().trace_id


def test_only_recorded_causes_are_kept_the_newest_of_each_object_and_a_bounded_number() -> None:
    state = topology_state(Topology("lessor-system"))
    lease = ObjectKey(LEASE, "lab", "l1")
    state.keep_cause(lease, _cause(1))
    state.keep_cause(lease, _cause(2))
    assert _trace_of(state.causes[lease]) == 2  # its last event's
    state.keep_cause(lease, _cause(3, sampled=False))
    assert lease not in state.causes  # a trace no one records is not continued
    state.keep_cause(lease, _cause(4))
    state.keep_cause(lease, None)  # deleted, or tracing off
    assert lease not in state.causes

    for i in range(KEPT_CAUSES + 10):
        state.keep_cause(ObjectKey(LEASE, "lab", f"l{i}"), _cause(i + 1))
    assert len(state.causes) == KEPT_CAUSES
    assert ObjectKey(LEASE, "lab", "l0") not in state.causes
    assert _trace_of(state.causes[ObjectKey(LEASE, "lab", f"l{KEPT_CAUSES + 9}")]) == KEPT_CAUSES + 10
