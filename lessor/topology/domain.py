"""What a domain adds to the topology: questions only it asks, answered from the graph, and state of its own
kept up to date as objects change (the leasing domain's compiled policies).

The topology knows no domain: the app hands the topology actor its domains (`lessor/app/topology_questions.py` for
leasing). The questions every domain asks (an object, the handles of a pool, ...) stay the topology's own.
"""

from __future__ import annotations

from typing import Any, Protocol

from lessor.topology.changes import Change
from lessor.topology.graph import Topology


class Domain(Protocol):
    questions: tuple[type, ...]
    """The message types this domain answers."""

    def changed(self, change: Change) -> None:
        """An object changed (before the change is routed: a question asked after it sees the new state)."""
        ...

    def answer(self, topology: Topology, question: Any) -> Any:
        """The answer to one of `questions`, from the graph as it is now."""
        ...
