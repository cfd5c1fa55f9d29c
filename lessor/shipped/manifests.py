"""Reading the YAML shipped with the package (CRDs, samples) and applying it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from importlib import resources
from typing import Any

import yaml

from lessor.gateway import Gateway


def load_documents(texts: Iterable[str]) -> Iterator[dict[str, Any]]:
    for text in texts:
        for doc in yaml.safe_load_all(text):
            if doc:
                yield doc


def package_yaml(package: str, subfolder: str | None = None) -> list[str]:
    """The YAML files of a package folder, in name order (samples rely on it)."""
    folder = resources.files(package)
    if subfolder:
        folder = folder / subfolder
    files = sorted((f for f in folder.iterdir() if f.name.endswith((".yaml", ".yml"))), key=lambda f: f.name)
    return [f.read_text() for f in files]


def crds() -> list[dict[str, Any]]:
    return list(load_documents(package_yaml("lessor.crds")))


def samples() -> list[dict[str, Any]]:
    return list(load_documents(package_yaml("lessor.deploy", "samples")))


async def apply_all(gateway: Gateway, docs: Iterable[dict[str, Any]], default_namespace: str = "default") -> list[str]:
    """Server-side apply each object; returns `kind/name` of each, for progress output."""
    applied = []
    for doc in docs:
        res = await gateway.resolve(doc["apiVersion"], doc["kind"])
        meta = doc["metadata"]
        namespace = meta.get("namespace", default_namespace) if res.namespaced else None
        await gateway.apply(res, namespace, meta["name"], doc)
        applied.append(f"{doc['kind']}/{meta['name']}")
    return applied
