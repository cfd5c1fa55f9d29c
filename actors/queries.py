"""Questions actors of both domains ask the topology (the app's topology actor answers them by message).

The ones that only one domain asks live in that domain (`leasing/world.py`, `provisioning/questions.py`),
and the app hands the topology their answers (lessor/app/topology_questions.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TOPOLOGY = "topology"
"""The topology actor's address."""

Object = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class GetObject:
    """→ the cached object, or None."""

    kind: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class GetObjects:
    """→ tuple of the cached objects (None for each unknown), in the order of `names`: one question, not one
    per name (a waiting lease looks at its free candidates at each grace)."""

    kind: str
    namespace: str
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ListObjects:
    """→ tuple of the cached objects of a kind in a namespace."""

    kind: str
    namespace: str
