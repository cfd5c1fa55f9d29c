"""Runs the selected checks concurrently, under the deadline.

Checkers set up concurrently, and each checker's checks start as soon as its
own set-up is done, without waiting for slower checkers. Every outcome is
written to a slot fixed in advance by (checker, check) position, so reports
come out in declared order whatever order the work finished in. At the
deadline, whatever is still running is cancelled and reported as an
internal error, alongside the results that did arrive.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
from anyio.abc import TaskGroup

from lessor.admission.checker import AdmissionRequest, Check, FailurePolicy, Lookup, Unavailable, failure_policy
from lessor.admission.results import Cause, CheckResult, Report
from lessor.admission.skip import Selected

logger = logging.getLogger(__name__)


class _Slots:
    """Where one checker's set-up outcome and check results land."""

    def __init__(self, selected: Selected) -> None:
        self.selected = selected
        self.setup_failure: CheckResult | None = None
        self.unavailable = ""  # why its set-up could not finish (a lookup the API server did not answer)
        self.applied: tuple[str, ...] | None = None  # None until set-up is done
        self.results: dict[str, CheckResult] = {}


async def run_checks(
    selected: Sequence[Selected], request: AdmissionRequest, lookup: Lookup, seconds: float,
    deadline: float | None = None,
) -> list[Report]:
    """Reports in checker order, then declared check order; returns after ``seconds`` at most.

    ``deadline``: the review's whole deadline, which late checks name (default ``seconds``).

    That bound holds as long as checks are cancellable: a check that blocks
    the event loop or swallows cancellation holds the answer back.
    """
    slots = [_Slots(s) for s in selected]
    with anyio.move_on_after(seconds):
        async with anyio.create_task_group() as tasks:
            for slot in slots:
                tasks.start_soon(_set_up, slot, request, lookup, tasks)
    return [report for slot in slots for report in _reports(slot, seconds if deadline is None else deadline)]


async def _set_up(slot: _Slots, request: AdmissionRequest, lookup: Lookup, tasks: TaskGroup) -> None:
    checker = slot.selected.checker
    try:
        checks = await checker.setup(request, lookup)
    except Unavailable as exc:
        slot.unavailable = f"set-up of checker {checker.name} could not finish: {exc}"
        return
    except Exception as exc:
        logger.exception("set-up of checker %s failed", checker.name)
        slot.setup_failure = _error(f"checker {checker.name} failed to set up ({_describe(exc)})", slot)
        return
    if undeclared := sorted(set(checks) - set(checker.check_names)):
        slot.setup_failure = _error(f"checker {checker.name} returned undeclared checks {undeclared}", slot)
        return
    slot.applied = tuple(name for name in slot.selected.check_names if name in checks)
    for name in slot.applied:
        tasks.start_soon(_run_check, slot, name, checks[name])


async def _run_check(slot: _Slots, name: str, check: Check) -> None:
    try:
        result = await check()
    except Unavailable as exc:
        result = unfinished(slot.selected.checker, name, str(exc))
    except Exception as exc:
        logger.exception("check %s failed", name)
        result = CheckResult.error(Cause(f"check {name} failed: {_describe(exc)}"))
    if not isinstance(result, CheckResult):
        result = CheckResult.error(Cause(f"check {name} returned {type(result).__name__}, not a CheckResult"))
    slot.results[name] = result


def _reports(slot: _Slots, seconds: float) -> list[Report]:
    checker = slot.selected.checker
    if slot.setup_failure is not None:
        return [Report(checker.name, slot.setup_failure)]
    if slot.unavailable:
        return [Report(name, unfinished(checker, name, slot.unavailable)) for name in slot.selected.check_names]
    if slot.applied is None:  # its set-up ran out of time: every check it would have run did
        why = f"set-up of checker {checker.name} did not finish within the review's {seconds:g} s"
        return [Report(name, unfinished(checker, name, why)) for name in slot.selected.check_names]
    return [
        Report(name, slot.results[name] if name in slot.results
               else unfinished(checker, name, f"not within the review's {seconds:g} s"))
        for name in slot.applied
    ]


def unfinished(checker: object, name: str, why: str) -> CheckResult:
    """The verdict of check `name` when it could not finish (`why`): its failure policy's, never an error."""
    if failure_policy(checker, name) is FailurePolicy.FAIL:
        return CheckResult.deny(Cause(f"check {name} could not finish ({why}); it refuses what it could not "
                                      "check (failure policy Fail): try again later, or make the object smaller"))
    return CheckResult.ok(f"could not finish ({why}), so this object was not checked by it (failure policy "
                          "Ignore); the operator judges it and reports on it")


def _error(message: str, slot: _Slots) -> CheckResult:
    """A checker-level failure, naming the checks it kept from running: the ones to skip meanwhile."""
    return CheckResult.error(Cause(f"{message}; checks not run: {', '.join(slot.selected.check_names)}"))


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
