"""`max_starting`: at most so many actors of a kind inside `started()` at once, the others in line.

An actor waiting for a slot holds no task: its cell waits in the kind's line, and the start that ends hands
its slot to the next cell there, which then gets its task. A task per waiting actor (its coroutines and
frames, a future in a semaphore's queue: about 1.2 KB) was the largest part of what a start-up allocates
only to free it again: when the topology announces 100k exporters, all their cells are made at once while
64 start at a time, and those tasks, freed one start at a time among the cells and actors that stay, left
the allocator's arenas a third empty for good (docs/benchmarks.md, scale).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cell import Cell


class StartSlots:
    """The free slots and the line. A slot is free only while nobody waits in line (`give_back` hands it on)."""

    __slots__ = ("free", "_line")

    def __init__(self, size: int) -> None:
        self.free = size
        self._line: deque[Cell] = deque()

    def take(self) -> bool:
        if self.free:
            self.free -= 1
            return True
        return False

    def wait(self, cell: Cell) -> None:
        self._line.append(cell)

    def give_back(self) -> Cell | None:
        """The slot, handed to the next cell still waiting in line (to be given its task), else freed. Cells
        that left the line meanwhile (stopped, or given a task to stop or restart first) are passed over."""
        line = self._line
        while line:
            cell = line.popleft()
            if cell.waits_in_line():
                return cell
        self.free += 1
        return None
