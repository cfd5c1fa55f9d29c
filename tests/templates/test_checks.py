"""Custom validation checks (`spec.validation.checks[]`), as the seed's issue writes them."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from lessor.templates import CheckFailure, TemplateError, check_expression, check_variables, run_checks

NOW = datetime(2024, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
CLAIM = {"metadata": {"name": "c", "creationTimestamp": "2024-02-20T12:00:00Z"}}
SEED_CHECKS = [
    {
        "name": "destroy schedule must be no more than 14 days from creation",
        "check": "spec.actionSchedule.destroy < timestamp(resource_claim.metadata.creationTimestamp).add('14d')",
    },
    {
        "name": "stop schedule must be no more than 8 hours from now",
        "check": "spec.actionSchedule.stop < timestamp.utcnow.add('8h')",
    },
]


def schedule(stop: str, destroy: str) -> dict[str, object]:
    template = {"spec": {"actionSchedule": {"stop": stop, "destroy": destroy}}}
    return check_variables(template, resource_claim=CLAIM, clock=lambda: NOW)


def test_the_seed_checks_pass_for_a_schedule_within_limits() -> None:
    assert run_checks(SEED_CHECKS, schedule("2024-03-01T19:59:59Z", "2024-03-05T00:00:00Z")) == []


def test_the_seed_checks_report_each_rule_that_is_broken() -> None:
    failures = run_checks(SEED_CHECKS, schedule("2024-03-01T20:00:00Z", "2024-03-05T12:00:00Z"))
    assert failures == [
        CheckFailure(SEED_CHECKS[0]["name"], SEED_CHECKS[0]["check"]),
        CheckFailure(SEED_CHECKS[1]["name"], SEED_CHECKS[1]["check"]),
    ]
    assert str(failures[1]) == "check 'stop schedule must be no more than 8 hours from now' failed"


def test_a_check_that_errors_is_a_failure_with_the_error_and_the_others_still_run() -> None:
    checks = [{"name": "typo", "check": "spec.actionSchedul.stop < timestamp.utcnow"}, *SEED_CHECKS]
    failures = run_checks(checks, schedule("not a time", "2024-03-05T00:00:00Z"))
    assert [failure.name for failure in failures] == ["typo", SEED_CHECKS[1]["name"]]
    assert failures[0].error == "undefined: 'dict object' has no attribute 'actionSchedul'"
    assert failures[1].error is not None and "invalid timestamp 'not a time'" in failures[1].error
    assert str(failures[1]).startswith("check 'stop schedule must be no more than 8 hours from now' could not be")


@pytest.mark.parametrize(
    ("check", "error"),
    [
        ("spec.actionSchedule.stop", "must give true or false, this one gave a value of type str"),
        ("1", "must give true or false, this one gave a value of type int"),
        ("missing", "undefined: 'missing' is undefined"),
        ("spec.actionSchedule.stop <", "syntax error"),
        ("''.__class__", "refused by the sandbox"),
        ("1 / 0 > 1", "division by zero"),
    ],
)
def test_a_check_must_evaluate_to_a_boolean(check: str, error: str) -> None:
    with pytest.raises(TemplateError, match=error):
        check_expression(check, schedule("2024-03-01T13:00:00Z", "2024-03-05T00:00:00Z"))


def test_a_check_without_an_expression_is_reported_not_skipped() -> None:
    failures = run_checks([{"name": "empty"}, {"name": "blank", "check": "  "}], {})
    assert [(failure.name, failure.error) for failure in failures] == [
        ("empty", "the check has no expression"),
        ("blank", "the check has no expression"),
    ]


def test_a_check_without_a_name_is_named_by_its_expression() -> None:
    assert run_checks([{"check": "false"}], {}) == [CheckFailure("false", "false")]


def test_standard_variables_win_over_template_fields_of_the_same_name() -> None:
    variables = check_variables({"resource_claim": "spoofed", "spec": {}}, resource_claim=CLAIM)
    assert check_expression("resource_claim.metadata.name == 'c'", variables)
