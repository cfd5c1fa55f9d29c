"""LabelSelector semantics and validation, as the API server has them."""

import pytest

from lessor.model.selectors import EVERYTHING, NOTHING, Operator, SelectorError, format_selector, parse_selector

BOARD = {"board": "rpi4", "site": "lab-a"}


def expression(key: str, operator: str, *values: str) -> dict:
    found: dict = {"key": key, "operator": operator}
    if values:
        found["values"] = list(values)
    return found


@pytest.mark.parametrize(
    ("selector", "matched"),
    [
        ({"matchLabels": {"board": "rpi4"}}, True),
        ({"matchLabels": {"board": "rpi5"}}, False),
        ({"matchLabels": {"board": "rpi4", "site": "lab-b"}}, False),
        ({"matchExpressions": [expression("board", "In", "rpi3", "rpi4")]}, True),
        ({"matchExpressions": [expression("board", "In", "rpi3")]}, False),
        ({"matchExpressions": [expression("arch", "In", "arm64")]}, False),
        ({"matchExpressions": [expression("board", "NotIn", "rpi3")]}, True),
        ({"matchExpressions": [expression("board", "NotIn", "rpi4", "rpi3")]}, False),
        ({"matchExpressions": [expression("arch", "NotIn", "arm64")]}, True),
        ({"matchExpressions": [expression("site", "Exists")]}, True),
        ({"matchExpressions": [expression("arch", "Exists")]}, False),
        ({"matchExpressions": [expression("arch", "DoesNotExist")]}, True),
        ({"matchExpressions": [expression("site", "DoesNotExist")]}, False),
        (
            {"matchLabels": {"board": "rpi4"}, "matchExpressions": [expression("site", "NotIn", "lab-a")]},
            False,
        ),
    ],
)
def test_each_operator_matches_as_kubernetes_does(selector: dict, matched: bool) -> None:
    assert parse_selector(selector).matches(BOARD) is matched


def test_an_empty_label_value_is_a_value_not_an_absence() -> None:
    labels = {"tier": ""}
    assert parse_selector({"matchLabels": {"tier": ""}}).matches(labels)
    assert parse_selector({"matchExpressions": [expression("tier", "Exists")]}).matches(labels)
    assert not parse_selector({"matchLabels": {"tier": ""}}).matches({})


def test_empty_selector_matches_everything_and_says_so() -> None:
    for raw in ({}, {"matchLabels": {}}, {"matchLabels": {}, "matchExpressions": []}):
        selector = parse_selector(raw)
        assert selector.empty
        assert selector.matches({}) and selector.matches(BOARD) and selector.matches(None)
    assert parse_selector({}) == EVERYTHING


def test_nil_selector_matches_nothing_and_is_not_empty() -> None:
    selector = parse_selector(None)
    assert selector is NOTHING
    assert not selector.empty
    assert not selector.matches({}) and not selector.matches(BOARD)


def test_a_selector_with_requirements_is_not_empty() -> None:
    assert not parse_selector({"matchLabels": {"board": "rpi4"}}).empty
    assert not parse_selector({"matchExpressions": [expression("x", "DoesNotExist")]}).empty


def test_match_labels_become_single_valued_in() -> None:
    selector = parse_selector({"matchLabels": {"board": "rpi4"}})
    (requirement,) = selector.requirements
    assert (requirement.key, requirement.operator, requirement.values) == ("board", Operator.IN, {"rpi4"})


def test_selector_prints_in_kubectl_syntax() -> None:
    selector = parse_selector(
        {
            "matchLabels": {"board": "rpi4"},
            "matchExpressions": [
                expression("site", "In", "b", "a"),
                expression("arch", "NotIn", "x86"),
                expression("gpu", "Exists"),
                expression("broken", "DoesNotExist"),
            ],
        }
    )
    assert str(selector) == "board=rpi4,site in (a,b),arch notin (x86),gpu,!broken"
    assert str(NOTHING) == "<none>"
    assert str(EVERYTHING) == ""


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (
            {"matchExpressions": [expression("a", "Exists"), expression("b", "In")]},
            "spec.selector.matchExpressions[1].values",
        ),
        ({"matchExpressions": [expression("b", "NotIn")]}, "spec.selector.matchExpressions[0].values"),
        ({"matchExpressions": [expression("b", "Exists", "x")]}, "spec.selector.matchExpressions[0].values"),
        ({"matchExpressions": [expression("b", "DoesNotExist", "x")]}, "spec.selector.matchExpressions[0].values"),
        ({"matchExpressions": [expression("b", "Equals", "x")]}, "spec.selector.matchExpressions[0].operator"),
        ({"matchExpressions": [{"key": "b", "values": ["x"]}]}, "spec.selector.matchExpressions[0].operator"),
        ({"matchExpressions": [{"operator": "Exists"}]}, "spec.selector.matchExpressions[0].key"),
        ({"matchExpressions": [expression("bad key", "Exists")]}, "spec.selector.matchExpressions[0].key"),
        ({"matchExpressions": [expression("Bad.Prefix/k", "Exists")]}, "spec.selector.matchExpressions[0].key"),
        ({"matchExpressions": [expression("k", "In", "ok", "-bad")]}, "spec.selector.matchExpressions[0].values[1]"),
        ({"matchExpressions": "board=rpi4"}, "spec.selector.matchExpressions"),
        ({"matchExpressions": ["board"]}, "spec.selector.matchExpressions[0]"),
        ({"matchLabels": {"board": "x" * 64}}, "spec.selector.matchLabels.board"),
        ({"matchLabels": {"board": 4}}, "spec.selector.matchLabels.board"),
        ({"matchLabels": {"/board": "x"}}, "spec.selector.matchLabels"),
        ({"matchLabels": ["board"]}, "spec.selector.matchLabels"),
        ({"matchLabel": {"board": "rpi4"}}, "spec.selector.matchLabel"),
        ("board=rpi4", "spec.selector"),
    ],
)
def test_invalid_selector_names_the_offending_field(raw: object, field: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector(raw, "spec.selector")
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


def test_every_failure_is_reported_not_just_the_first() -> None:
    raw = {"matchExpressions": [expression("a", "In"), expression("b", "Sometimes"), expression("c", "Exists")]}
    with pytest.raises(SelectorError) as caught:
        parse_selector(raw, "spec.exporterSelector")
    assert [cause.field for cause in caught.value.causes] == [
        "spec.exporterSelector.matchExpressions[0].values",
        "spec.exporterSelector.matchExpressions[1].operator",
    ]
    assert "Sometimes" in str(caught.value)


def test_valid_qualified_keys_and_values_are_accepted() -> None:
    selector = parse_selector(
        {
            "matchLabels": {"lessor.dev/lease-ended": "true", "a_b.c-d": "X.y_z-1"},
            "matchExpressions": [expression("example.com/k", "In", "")],
        }
    )
    assert selector.matches({"lessor.dev/lease-ended": "true", "a_b.c-d": "X.y_z-1", "example.com/k": ""})


@pytest.mark.parametrize(
    ("selector", "shown"),
    [
        ({"matchLabels": {"env": "lab", "board": "rpi4"}}, "board=rpi4,env=lab"),
        ({"matchLabels": {"board": "rpi4"}, "matchExpressions": [expression("env", "In", "lab")]},
         "board=rpi4,env in (lab)"),
        ({"matchExpressions": [expression("arch", "NotIn", "x86", "arm"), expression("a", "Exists"),
                               expression("z", "DoesNotExist")]}, "a,arch notin (arm,x86),!z"),
        ({}, "<all>"),
        ({"matchLabels": {}}, "<all>"),
        (None, "<none>"),
        ({"matchExpressions": [expression("a", "In")]}, "<invalid>"),
        ("board=rpi4", "<invalid>"),
    ],
)
def test_a_selector_prints_as_kubectl_prints_it(selector: object, shown: str) -> None:
    assert format_selector(selector) == shown


def test_a_selector_past_the_limits_is_refused_naming_them_before_each_requirement_is_read() -> None:
    from lessor.model.selectors import MAX_REQUIREMENTS, MAX_VALUES

    huge = {"matchLabels": {f"k{i}": "v" for i in range(10_000)}}
    with pytest.raises(SelectorError) as caught:
        parse_selector(huge, "spec.selector")
    assert "10000 requirements" in str(caught.value) and f"limit of {MAX_REQUIREMENTS}" in str(caught.value)
    mixed = {"matchLabels": {f"k{i}": "v" for i in range(MAX_REQUIREMENTS - 1)},
             "matchExpressions": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]}
    with pytest.raises(SelectorError):
        parse_selector(mixed, "spec.selector")
    parse_selector({**mixed, "matchExpressions": mixed["matchExpressions"][:1]}, "spec.selector")  # at the limit
    many = {"matchExpressions": [{"key": "a", "operator": "In", "values": [str(i) for i in range(MAX_VALUES + 1)]}]}
    with pytest.raises(SelectorError) as caught:
        parse_selector(many, "spec.selector")
    assert "spec.selector.matchExpressions[0].values" in str(caught.value)
