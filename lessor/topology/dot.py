"""The topology as Graphviz DOT, for looking at what the operator believes.

One cluster per namespace, one node per object (labelled kind/name), one
edge per reference or selector match, labelled with the field that makes it.
Ended leases are grey; objects that are named but not known are dashed.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from lessor.topology.fields import is_inert
from lessor.topology.keys import ObjectKey

if TYPE_CHECKING:
    from lessor.topology.graph import Topology


def render(topology: Topology) -> str:
    keys = sorted(topology.keys())
    edges = sorted((edge.source, edge.target, edge.field) for key in keys for edge in topology.edges_from(key))
    missing = sorted({target for _, target, _ in edges if target not in topology})
    by_namespace: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        obj = topology.get(key)
        style = ", style=filled, fillcolor=lightgrey" if obj is not None and is_inert(key, obj) else ""
        by_namespace[key.namespace].append(f"{_id(key)} [label={_quote(_label(key))}{style}];")
    for key in missing:
        by_namespace[key.namespace].append(f"{_id(key)} [label={_quote(_label(key))}, style=dashed];")
    lines = ["digraph topology {", "  rankdir=LR;", "  node [shape=box, fontsize=10];", "  edge [fontsize=8];"]
    for index, namespace in enumerate(sorted(by_namespace)):
        lines.append(f"  subgraph cluster_{index} {{")
        lines.append(f"    label={_quote(namespace or '(cluster)')};")
        lines.extend(f"    {node}" for node in by_namespace[namespace])
        lines.append("  }")
    lines.extend(f"  {_id(source)} -> {_id(target)} [label={_quote(field)}];" for source, target, field in edges)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _label(key: ObjectKey) -> str:
    return f"{key.kind}/{key.name}"


def _id(key: ObjectKey) -> str:
    return _quote(str(key))


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
