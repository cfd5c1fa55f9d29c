"""The interface a preflight checker implements.

A checker is set up once per admission request and hands back the checks
that apply to it. Checks are zero-argument coroutine functions, usually
closures or bound methods over what the set-up fetched, so they share it
without fetching it again. The check names are declared up front so that the
skip annotation can be validated, and a fully skipped checker not even set
up, without running anything.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any, Protocol

from lessor.admission.results import CheckResult

AdmissionRequest = Mapping[str, Any]
"""The ``request`` stanza of an ``admission.k8s.io/v1`` AdmissionReview, as parsed JSON."""

Check = Callable[[], Awaitable[CheckResult]]


class FailurePolicy(StrEnum):
    """What a check that cannot finish before the deadline answers (named after the webhook's own setting).

    `IGNORE`, the default: the object is allowed with a warning naming the check
    that did not run; every check here mirrors a rule the operator applies again
    and reports in a condition. `FAIL`: it is denied, naming the check, for a rule
    that is meant to be enforced at admission (a provider's `validation.checks`).
    """

    FAIL = "Fail"
    IGNORE = "Ignore"


class Unavailable(Exception):
    """A lookup the API server did not answer (throttled, unavailable, timed out): the check cannot finish,
    and is answered by its failure policy like one that ran out of time, not as an internal error."""


def failure_policy(checker: Any, check: str) -> FailurePolicy:
    """`check`'s policy: the checker's `failure_policies[check]` when it declares one, else IGNORE."""
    policies = getattr(checker, "failure_policies", None) or {}
    return FailurePolicy(policies.get(check, FailurePolicy.IGNORE))


class Lookup(Protocol):
    """Read-only access to cluster objects for checkers.

    Injected rather than imported so that checks stay testable without an
    API server and can never write.
    """

    async def get(self, group: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The object, or None when it does not exist."""
        ...

    async def list(self, group: str, kind: str, namespace: str, *,
                   consistent: bool = False) -> Sequence[Mapping[str, Any]]:
        """The namespace's objects; with ``consistent`` as etcd has them now (what confirms a denial
        that a cache trailing by one event could cause)."""
        ...


class Checker(Protocol):
    """Sets up the checks for one admission request.

    ``name`` and ``check_names`` are lowercase DNS-label-like words, unique
    among the checkers registered for a kind; ``check_names`` also fixes the
    order in which results are reported.

    ``setup`` may return only some of the declared checks (those that apply
    to this request). A checker may also have ``failure_policies``, a mapping
    from check name to `FailurePolicy`, for checks that are not ``IGNORE``. It must keep no per-request state on the checker,
    which serves concurrent requests.
    """

    @property
    def name(self) -> str: ...

    @property
    def check_names(self) -> Sequence[str]: ...

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]: ...
