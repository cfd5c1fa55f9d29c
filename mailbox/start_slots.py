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
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cell import Cell


class StartSlots:
    """The free slots and the line. A slot is free only while nobody waits in line (`give_back` hands it on).

    With tenants (the kind's `tenant`), each tenant has a line of its own, and a slot that comes free goes to
    the tenants in turn: one namespace's ten thousand new exporters waiting to start hold another
    namespace's one new exporter back by a start per waiting namespace, not by all of theirs."""

    __slots__ = ("free", "_lines", "_order", "_tenant_of")

    def __init__(self, size: int, tenant_of: Callable[[str], Hashable] | None = None) -> None:
        self.free = size
        self._tenant_of = tenant_of
        self._lines: dict[Hashable, deque[Cell]] = {}  # by tenant (one line, None's, without tenants)
        self._order: deque[Hashable] = deque()  # tenants with cells in line, the next to be given a slot first

    def take(self) -> bool:
        if self.free:
            self.free -= 1
            return True
        return False

    def wait(self, cell: Cell) -> None:
        tenant = self._tenant_of(cell.address) if self._tenant_of is not None else None
        line = self._lines.get(tenant)
        if line is None:
            line = self._lines[tenant] = deque()
            self._order.append(tenant)
        line.append(cell)

    def give_back(self) -> Cell | None:
        """The slot, handed to the next cell still waiting in line (to be given its task), else freed. Cells
        that left the line meanwhile (stopped, or given a task to stop or restart first) are passed over."""
        order, lines = self._order, self._lines
        while order:
            tenant = order.popleft()
            line = lines[tenant]
            found = None
            while line:
                cell = line.popleft()
                if cell.waits_in_line():
                    found = cell
                    break
            if line:
                order.append(tenant)  # its next cell waits for the other tenants' turns
            else:
                del lines[tenant]
            if found is not None:
                return found
        self.free += 1
        return None
