"""`lessor convert` never passes a problem off as a success (issue #21): what it reports and how it exits.

Each note says what happened to its field: left out, will not work (kept, but lessor refuses it or
cannot render it), changed, replaced or copied unchanged; the last line counts each; exit status 1
on a loss unless `--allow-loss`. And a provider whose templates cannot render says so itself, on
the real API server: `Valid=False`, not a `ProviderTemplateError` on each claim.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, PROVIDER
from lessor.tools.porting import convert
from lessor.tools.porting.commands import run_convert
from tests.polling import discard, until

POOLBOY = "poolboy.gpte.redhat.com/v1"
OPS = "lessor-system"


def provider(name: str = "p", **spec: Any) -> dict[str, Any]:
    spec.setdefault("override", {"apiVersion": "v1", "kind": "ConfigMap"})
    return {"apiVersion": POOLBOY, "kind": "ResourceProvider", "metadata": {"name": name, "namespace": "poolboy"},
            "spec": spec}


def claim(name: str, namespace: str = "u", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": POOLBOY, "kind": "ResourceClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}


def lines(result: Any, verb: str) -> list[str]:
    return [f"{n.field}: {n.message}" for n in result.notes if n.verb == verb]


def command(docs: list[dict[str, Any]], *args: str) -> tuple[int, str, str]:
    """`lessor convert ARGS` on the documents, as a user runs it."""
    exe = str(Path(sys.executable).parent / "lessor")
    done = subprocess.run([exe, "convert", *args], input=yaml.safe_dump_all(docs), capture_output=True, text=True,
                          timeout=60)
    return done.returncode, done.stdout, done.stderr


def offered(line: str) -> bool:
    """Whether lessor's sandbox now has the name a note says it lacks: Poolboy's functions are being added to it,
    and a note must then disappear (tests that must always find one use names no one will add: `frobnicate`...)."""
    from lessor.templates.sandbox import ENVIRONMENT

    what, name = re.search(r"have no (\w+) '(\w+)'", line).groups()  # type: ignore[union-attr]
    return name in {"filter": ENVIRONMENT.filters, "test": ENVIRONMENT.tests}.get(what, ENVIRONMENT.globals)


def lacking(expected: list[str]) -> list[str]:
    return [line for line in expected if not offered(line)]


# A Poolboy provider with its functions: now() and datetime, a filter inside a branch (which Jinja2 alone
# would let pass), and checks written with Poolboy's filters and functions.
USES_POOLBOY_FUNCTIONS = provider(
    template={"enable": True},
    override={"apiVersion": "v1", "kind": "ConfigMap", "data": {
        "created": "{{ now(true, '%Y-%m-%d') }}",
        "password": "{% if resource_claim %}\n{{ '[a-z]{12}' | strgen }}\n{% endif %}",
        "plain": "{{ resource_index }}"}},
    validation={"checks": [
        {"name": "soon", "check": "spec.start | to_datetime('%Y-%m-%d') < now()"},
        {"name": "short", "check": "(spec.stop | to_datetime) - datetime.now() < '2h' | parse_time_interval"}]},
)


# What no version of lessor will render: a function, a filter inside a branch, a filter in a check.
CANNOT_RENDER = provider(
    template={"enable": True},
    override={"apiVersion": "v1", "kind": "ConfigMap", "data": {
        "created": "{{ frobnicate(true) }}", "password": "{% if resource_claim %}\n{{ 'x' | shout }}\n{% endif %}"}},
    validation={"checks": [{"name": "soon", "check": "spec.start | shout < timestamp.utcnow"}]},
)


# --------------------------------------------------------------------------- every function named, with its line


def test_every_template_function_lessor_lacks_is_named_with_its_line_in_checks_too() -> None:
    result = convert([USES_POOLBOY_FUNCTIONS])
    assert lines(result, "will not work") == lacking([
        "spec.override.data.created: line 1: lessor's templates have no function 'now': use timestamp.utcnow",
        "spec.override.data.password: line 2: lessor's templates have no filter 'strgen': no random string "
        "generator; use guid",
        "spec.validation.checks[0].check: line 1: lessor's templates have no filter 'to_datetime': use "
        "timestamp(\"...\")",
        "spec.validation.checks[0].check: line 1: lessor's templates have no function 'now': use timestamp.utcnow",
        "spec.validation.checks[1].check: line 1: lessor's templates have no filter 'parse_time_interval': use "
        "timedelta(\"...\")",
        "spec.validation.checks[1].check: line 1: lessor's templates have no filter 'to_datetime': use "
        "timestamp(\"...\")",
        "spec.validation.checks[1].check: line 1: lessor's templates have no name 'datetime': use timestamp(...) "
        "and timedelta(...)",
    ])


def test_templates_are_looked_at_wherever_poolboy_renders_them() -> None:
    multi_line = "spec.ok and\nspec.stop | shout < timestamp.utcnow"
    source = provider(
        readinessCheck="frobnicate() > x", healthCheck="x is truthy", vars={"stamp": "{{ frobnicate() }}"},
        statusSummaryTemplate={"url": "{{ resources | shout('[0].url') }}"},
        parameters=[{"name": "p", "validation": {"checks": [{"name": "c", "check": multi_line}]}}],
        linkedResourceProviders=[{"name": "other", "when": "frobnicate() != ''", "parameterValues": {"a": "{{ x | shout }}"}}],
    )
    auto = claim("c", resources=[{"provider": {"name": "p"}}], autoDelete={"when": "frobnicate([]) == {}"})
    result = convert([source, auto])
    named = {note.field: note.message for note in result.notes if note.message.startswith("line ")}
    assert {note.field for note in result.notes if note.verb == "will not work"} - set(named) == {
        "spec.resources[0].provider.name"}  # the claim: its provider is invalid
    function, filter_ = "line 1: lessor's templates have no function 'frobnicate'", "lessor's templates have no filter 'shout'"
    assert named == {
        "spec.readinessCheck": function, "spec.healthCheck": "line 1: lessor's templates have no test 'truthy'",
        "spec.vars.stamp": function, "spec.statusSummaryTemplate.url": f"line 1: {filter_}",
        "spec.parameters[0].validation.checks[0].check": f"line 2: {filter_}",
        "spec.linkedResourceProviders[0].when": function,
        "spec.linkedResourceProviders[0].parameterValues.a": f"line 1: {filter_}", "spec.autoDelete.when": function}


def test_a_poolboy_global_is_missing_unless_the_provider_defines_a_var_of_that_name() -> None:
    source = provider(vars={"now": "a var", "stamp": "{{ now }}", "when": "{{ timezone.utc }}"})
    named = lines(convert([source]), "will not work")
    assert named == lacking(["spec.vars.when: line 1: lessor's templates have no name 'timezone': timestamps are "
                             "always UTC"])  # `now` is the provider's var here


def test_vars_are_judged_by_the_provider_rule_without_template_enable_too() -> None:
    """lessor renders a provider's vars wherever they are read, with or without template.enable (as Poolboy does):
    so the rule behind `Valid` and the webhook judges them always."""
    from lessor.actors.provisioning.validity import provider_errors

    [converted] = convert([provider(vars={"stamp": "{{ frobnicate() }}"})]).objects
    assert [(e.field, e.reason, e.message) for e in provider_errors(converted)] == [
        ("spec.vars.stamp", "InvalidTemplate", "line 1: lessor's templates have no function 'frobnicate'")]


def test_what_lessor_offers_is_read_from_its_templates_not_from_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """When a function lands in lessor's sandbox, convert stops naming it, with no change to convert."""
    from lessor.templates.sandbox import ENVIRONMENT

    def source(suffix: str) -> dict[str, Any]:  # a new provider each time: lessor caches a provider's verdict
        return provider(template={"enable": True}, override={
            "apiVersion": "v1", "kind": "ConfigMap", "data": {"id": "{{ 'abcd' | shout }}-" + suffix}})

    assert [n.field for n in convert([source("before")]).notes if n.verb == "will not work"] == [
        "spec.override.data.id"]
    monkeypatch.setitem(ENVIRONMENT.filters, "shout", str.upper)
    assert [n for n in convert([source("after")]).notes if n.verb == "will not work"] == []


# --------------------------------------------------------------------------- nothing falsely "changed"


def test_what_cannot_work_is_never_reported_as_changed() -> None:
    cannot_render = provider(template={"enable": True}, override={"apiVersion": "v1", "kind": "ConfigMap", "data": {
        "created": "{{ frobnicate(true) }}", "plain": "{{ resource_index }}"}})
    result = convert([cannot_render, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}])
    changed = {note.field for note in result.notes if note.verb == "changed"}
    # `{{ frobnicate(...) }}` gets `| string` like any lone expression, but it does not work: not "changed".
    assert changed == {"metadata.namespace", "spec.override.data.plain"}
    assert lines(result, "will not work") == [
        "spec.override.data.created: line 1: lessor's templates have no function 'frobnicate'"]
    assert [str(n) for n in result.notes if n.subject.startswith("ConfigMap")] == [
        "ConfigMap /c: (object): copied unchanged: not a Poolboy or Jumpstarter kind"]
    # Already text in both tools: nothing to change.
    result = convert([provider(template={"enable": True}, override={
        "apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "{{ resource_index | string }}"}})])
    assert [n.field for n in result.notes] == ["metadata.namespace"]


def test_what_the_template_section_loses_is_reported() -> None:
    result = convert([provider(template={"enable": True, "style": "jinja2", "futureKnob": 1})])
    assert lines(result, "left out") == ["spec.template.futureKnob: lessor does not implement it"]
    assert result.objects[0]["spec"]["template"] == {"enable": True}


# --------------------------------------------------------------------------- providers and linked values


def test_a_link_only_provider_converts_without_a_loss() -> None:
    """It creates nothing itself and fixes no kind; lessor takes it as Poolboy does (a claim gets its links')."""
    base = provider("base", parameters=[{"name": "size"}], template={"definition": {"data": {"size": "{{ size }}"}}})
    binder = provider("binder", linkedResourceProviders=[{"name": "base", "parameterValues": {"size": "2"}}])
    del binder["spec"]["override"]
    result = convert([base, binder])
    assert [n for n in result.notes if n.loss] == []
    assert not result.lossy


LOWER = {"openAPIV3Schema": {"type": "string", "default": "one", "enum": ["one", "two"]}}
BASE = provider("base", parameters=[{"name": "word", "validation": LOWER}],
                template={"enable": True, "definition": {"data": {"word": "{{ word }}"}}})


def linking(when: str | None = None) -> dict[str, Any]:
    link: dict[str, Any] = {"name": "base", "parameterValues": {"word": "{{ word | upper }}"}}
    if when:
        link["when"] = when
    return provider("upper", linkedResourceProviders=[link], parameters=[
        {"name": "word", "validation": {"openAPIV3Schema": {"type": "string", "default": "one"}}},
        {"name": "n", "validation": {"openAPIV3Schema": {"type": "integer", "default": 0}}}])


def lessors(obj: dict[str, Any]) -> dict[str, Any]:
    """The provider as lessor's own object (`convert` copies it unchanged): its author chose lessor's rules."""
    return {**obj, "apiVersion": "lessor.dev/v1alpha1", "metadata": {**obj["metadata"], "namespace": OPS}}


def test_converting_keeps_poolboys_unchecked_linked_values_and_says_so() -> None:
    """Poolboy passes a link's values on unchecked: the converted linked provider trusts them too, in one
    "changed" line that says why and how to turn it off; nothing is lost, so `lessor convert` exits 0."""
    docs = [BASE, linking(when="n == 1"), claim("c", provider={"name": "upper", "parameterValues": {"n": 1}})]
    result = convert(docs)
    assert not result.lossy, [str(n) for n in result.notes if n.loss]
    base = next(obj for obj in result.objects if obj["metadata"]["name"] == "base")
    assert base["spec"]["trustLinkedParameterValues"] is True
    [note] = [n for n in result.notes if n.field == "spec.trustLinkedParameterValues"]
    assert (note.subject, note.verb) == ("ResourceProvider poolboy/base", "changed")
    assert "ResourceProvider upper's spec.linkedResourceProviders[0] (word)" in note.message
    assert "Poolboy uses unchecked" in note.message and "Set it to false" in note.message
    upper = next(obj for obj in result.objects if obj["metadata"]["name"] == "upper")
    assert "trustLinkedParameterValues" not in upper["spec"]  # nothing links it

    code, out, err = command(docs)
    assert code == 0, err
    assert [line for line in err.splitlines() if "trustLinkedParameterValues" in line] == [
        f"lessor convert: {note}"]
    assert [d["spec"].get("trustLinkedParameterValues") for d in yaml.safe_load_all(out)
            if d["metadata"]["name"] == "base"] == [True]


def test_a_linked_provider_whose_parameters_refuse_nothing_is_left_as_lessors_default() -> None:
    free = provider("base", parameters=[{"name": "word"}], template={"enable": True, "definition": {"data": {
        "word": "{{ word }}"}}})
    result = convert([free, linking()])
    assert [n for n in result.notes if n.field == "spec.trustLinkedParameterValues"] == []
    assert all("trustLinkedParameterValues" not in obj["spec"] for obj in result.objects)


def test_linked_values_a_lessor_provider_refuses_are_reported_on_the_claim_that_gives_them() -> None:
    """A provider that is lessor's already keeps lessor's default: the values are judged, and refused."""
    result = convert([lessors(BASE), linking(when="n == 1"),
                      claim("c", provider={"name": "upper", "parameterValues": {"n": 1}})])
    [note] = [n for n in result.notes if n.verb == "will not work"]
    assert note.subject == "ResourceClaim u/c" and note.field == "spec.provider.parameterValues"
    assert "lessor refuses this ResourceClaim (SchemaViolation): ResourceProvider upper's link to base " \
           "(spec.linkedResourceProviders[0]) gives linked resource base values that ResourceProvider base refuses: " \
           "spec.provider.parameterValues.word: 'ONE' is not one of ['one', 'two'] (its " \
           "spec.trustLinkedParameterValues: true would use them as given, as Poolboy does)" == note.message


def test_linked_values_are_judged_with_the_parameters_defaults_when_no_claim_uses_the_provider() -> None:
    result = convert([lessors(BASE), linking()])
    assert lines(result, "will not work") == [
        "spec.linkedResourceProviders: with the parameters' defaults, ResourceProvider upper's link to base "
        "(spec.linkedResourceProviders[0]) gives linked resource base values that ResourceProvider base refuses: "
        "spec.provider.parameterValues.word: 'ONE' is not one of ['one', 'two'] (its spec.trustLinkedParameterValues: "
        "true would use them as given, as Poolboy does)"]
    # Without the linked provider in the input there is nothing to judge against: nothing is claimed.
    assert lines(convert([linking()]), "will not work") == []


# --------------------------------------------------------------------------- counts and exit status


def test_the_summary_counts_every_verb_and_changed_fields_one_by_one() -> None:
    out, err = io.StringIO(), io.StringIO()
    docs = [provider(template={"enable": True}, override={"apiVersion": "v1", "kind": "ConfigMap", "data": {
        "a": "{{ resource_index }}", "b": "{{ resource_name }}"}})]
    assert run_convert([], operator_namespace=OPS, stdin=io.StringIO(yaml.safe_dump_all(docs)), stdout=out,
                       stderr=err) == 0  # only changes: a success
    report = err.getvalue().splitlines()
    assert [line.split(": ")[2] for line in report[:-1]] == ["metadata.namespace", "spec.override.data.a",
                                                           "spec.override.data.b"]
    assert report[-1] == "lessor convert: 1 objects written; fields or objects: 0 left out, 0 will not work, " \
                         "3 changed, 0 replaced, 0 copied unchanged"


@pytest.mark.parametrize(("docs", "lost"), [
    ([provider(futureField=1)], "1 left out"),
    ([CANNOT_RENDER], "3 will not work"),
    ([provider(futureField=1), {"apiVersion": POOLBOY, "kind": "ResourceWatch", "metadata": {"name": "w"}}],
     "2 left out"),
], ids=["a field left out", "functions lessor lacks", "an object left out"])
def test_a_loss_exits_1_unless_allowed_and_is_reported_either_way(docs: list[dict[str, Any]], lost: str) -> None:
    code, out, err = command(docs)
    assert code == 1
    assert err.splitlines()[-1] == f"lessor convert: error: {lost} (listed above): exit status 1; --allow-loss " \
                                   "accepts this"
    assert list(yaml.safe_load_all(out))  # the objects are written all the same
    code, out_allowed, err_allowed = command(docs, "--allow-loss")
    assert code == 0 and out_allowed == out
    assert err_allowed.splitlines()[:-1] == err.splitlines()[:-1]  # the same report
    assert err_allowed.splitlines()[-1] == f"lessor convert: {lost}, accepted (--allow-loss)"


def test_what_the_old_operator_wrote_for_itself_is_no_loss() -> None:
    """`kubectl get -o yaml` output carries status and the old operator's labels: lessor writes its own."""
    lease = {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Lease", "metadata": {"name": "l", "namespace": "lab"},
             "spec": {"clientRef": {"name": "a"}, "selector": {}, "duration": "1h"}, "status": {"ended": False}}
    code, _, err = command([lease])
    assert code == 0, err
    assert "Lease lab/l: status: replaced: written by the operator" in err


def test_help_says_what_the_exit_status_means() -> None:
    exe = str(Path(sys.executable).parent / "lessor")
    done = subprocess.run([exe, "convert", "--help"], capture_output=True, text=True, check=True, timeout=60)
    text = " ".join(done.stdout.split())
    assert "--allow-loss" in text
    assert "Exit status 1 when anything was left out or will not work (--allow-loss: 0, still reported)" in text


# --------------------------------------------------------------------------- real API server


def _condition(obj: Any, type_: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == type_), {})


@pytest.mark.usefixtures("operator")
async def test_a_provider_whose_templates_cannot_render_is_valid_false_itself(kube: Gateway, namespace: str) -> None:
    """Converted with `--allow-loss`: the provider itself says `Valid=False` (InvalidTemplate), naming each field,
    line and function; its claims say the provider is invalid, instead of a ProviderTemplateError on each."""
    source = provider("cannot-render", **CANNOT_RENDER["spec"])
    used = claim("uses-it", namespace, resources=[{"provider": {"name": "cannot-render"}, "template": {}}])
    result = convert([source, used])
    converted_provider, converted_claim = result.objects
    try:
        await kube.create(PROVIDER, OPS, converted_provider)
        await kube.create(CLAIM, namespace, converted_claim)
        got = await until(kube, PROVIDER, OPS, "cannot-render", lambda p: _condition(p, "Valid").get("status") == "False")
        valid = _condition(got, "Valid")
        assert valid["reason"] == "InvalidTemplate"
        for field, problem in [("spec.override.data.created", "line 1: lessor's templates have no function "
                                                              "'frobnicate'"),
                               ("spec.override.data.password", "line 2: lessor's templates have no filter 'shout'"),
                               ("spec.validation.checks[0].check", "line 1: lessor's templates have no filter 'shout'")]:
            assert f"{field}: {problem}" in valid["message"]
        got = await until(kube, CLAIM, namespace, "uses-it", lambda c: _condition(c, "Valid").get("status") == "False")
        assert _condition(got, "Valid")["reason"] == "ProviderInvalid"
        assert "ResourceProvider cannot-render is invalid: spec.override/data/created: line 1: lessor's templates " \
               "have no function 'frobnicate'" in _condition(got, "Valid")["message"]
    finally:
        await discard(kube, CLAIM, namespace, "uses-it")
        await discard(kube, PROVIDER, OPS, "cannot-render")
