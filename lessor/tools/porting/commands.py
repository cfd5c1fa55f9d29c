"""`lessor convert` and `lessor migrate`: reading manifests, writing YAML and the report."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from .convert import LOSSES, Note, convert


class InputError(Exception):
    """The input could not be read: the message names the file and what to do."""


def read_manifests(paths: Sequence[str], stdin: TextIO) -> list[Any]:
    """Every YAML document of the files (`-` or none: standard input), in order."""
    docs: list[Any] = []
    for path in paths or ["-"]:
        name = "standard input" if path == "-" else path
        try:
            text = stdin.read() if path == "-" else Path(path).read_text()
        except OSError as error:
            raise InputError(f"cannot read {name}: {error.strerror or error}") from None
        try:
            loaded = [doc for doc in yaml.safe_load_all(text) if doc is not None]
        except yaml.YAMLError as error:
            raise InputError(f"{name} is not YAML: {' '.join(str(error).split())}") from None
        for index, doc in enumerate(loaded):
            if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
                raise InputError(f"{name}: document {index + 1} is not a Kubernetes object (it needs apiVersion "
                                 "and kind)")
        docs += loaded
    return docs


def dump_manifests(objects: Sequence[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False, allow_unicode=True)


def report(notes: Sequence[Note], out: TextIO) -> None:
    for note in notes:
        print(f"lessor convert: {note}", file=out)


def run_convert(paths: Sequence[str], *, operator_namespace: str, allow_loss: bool = False,
                stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    """Convert the manifests; lessor's YAML on stdout, a line per field that did not carry over unchanged on stderr.

    Exit status 1 when anything was left out or will not work in lessor (0 with `allow_loss`), 2 for input
    that cannot be read: a conversion that loses something never passes for a success."""
    try:
        docs = read_manifests(paths, stdin)
    except InputError as error:
        print(f"lessor convert: error: {error}", file=stderr)
        return 2
    if not docs:
        print("lessor convert: error: no objects in the input (give files, or YAML on standard input)", file=stderr)
        return 2
    result = convert(docs, operator_namespace=operator_namespace)
    if result.objects:
        stdout.write(dump_manifests(result.objects))
    report(result.notes, stderr)
    counts = result.counts()
    print(f"lessor convert: {len(result.objects)} objects written; fields or objects: "
          + ", ".join(f"{count} {verb}" for verb, count in counts.items()), file=stderr)
    if not result.lossy:
        return 0
    lost = " and ".join(f"{counts[verb]} {verb}" for verb in LOSSES if counts[verb])
    if allow_loss:
        print(f"lessor convert: {lost}, accepted (--allow-loss)", file=stderr)
        return 0
    print(f"lessor convert: error: {lost} (listed above): exit status 1; --allow-loss accepts this", file=stderr)
    return 1
