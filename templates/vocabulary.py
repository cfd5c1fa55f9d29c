"""The functions, filters and tests lessor's templates have, and those a template uses that they lack.

What is offered is read from the sandbox's own environment (`sandbox.ENVIRONMENT`), never from a
copy: a function added there is known at once to the provider's `Valid` condition, to the webhook
and to `lessor convert`.

Why look before rendering: Jinja2 refuses an unknown filter or test when it compiles a template
only outside a branch (`{% if x %}{{ y | strgen }}{% endif %}` compiles), and a call to a function
nobody defines (`now()`) only fails when it runs. A provider using one would be `Valid` and fail
on every claim instead. `sandbox.compile_template` and `compile_expression` refuse them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jinja2 import Environment, nodes

#: Names Jinja2 itself binds while a template runs: `loop(...)` in a recursive for, `caller()` in a call block...
_RUNTIME = frozenset({"loop", "caller", "super", "self", "varargs", "kwargs"})


@dataclass(frozen=True, order=True)
class Missing:
    """One use of a name lessor's templates lack: `what` is function, filter, test or name; `line` is 1-based."""

    line: int
    what: str
    name: str

    @property
    def message(self) -> str:
        return f"lessor's templates have no {self.what} {self.name!r}"

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def offered(environment: Environment) -> dict[str, frozenset[str]]:
    """The functions (globals), filters and tests of `environment`."""
    return {"function": frozenset(environment.globals), "filter": frozenset(environment.filters),
            "test": frozenset(environment.tests)}


def missing_in(environment: Environment, tree: nodes.Node, also: Iterable[str] = ()) -> list[Missing]:
    """Every filter, test and called name in `tree` that `environment` lacks, in order of lines.

    A called name the template binds itself (`{% set f = timestamp %}`, a macro) is not missing; nor
    is a variable, since no variable is callable. `also`: names that are missing wherever they are
    read (`lessor convert` passes the globals of the tool it converts from, such as `datetime`).
    """
    has = offered(environment)
    every = [tree, *tree.find_all(nodes.Node)]  # a check's tree may be one filter or call: find_all skips the root
    bound = {node.name for node in every if isinstance(node, nodes.Name) and node.ctx in ("store", "param")}
    bound |= {node.name for node in every if isinstance(node, nodes.Macro)}
    free = set(also) - has["function"] - bound
    found: set[Missing] = set()
    for node in every:
        if isinstance(node, nodes.Filter) and node.name not in has["filter"]:
            found.add(Missing(node.lineno, "filter", node.name))
        elif isinstance(node, nodes.Test) and node.name not in has["test"]:
            found.add(Missing(node.lineno, "test", node.name))
        elif isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name):
            name = node.node.name
            if name not in has["function"] and name not in bound and name not in _RUNTIME:
                found.add(Missing(node.lineno, "function", name))
        elif isinstance(node, nodes.Name) and node.ctx == "load" and node.name in free:
            found.add(Missing(node.lineno, "name", node.name))
    called = {(m.line, m.name) for m in found if m.what == "function"}
    return sorted(m for m in found if m.what != "name" or (m.line, m.name) not in called)


def missing_names(source: str, *, expression: bool = False, also: Iterable[str] = ()) -> list[Missing]:
    """`missing_in` for one template (or, with `expression`, one check); raises what Jinja2 raises on a syntax
    error."""
    from .sandbox import ENVIRONMENT, parse_expression

    tree = parse_expression(source) if expression else ENVIRONMENT.parse(source)
    return missing_in(ENVIRONMENT, tree, also)
