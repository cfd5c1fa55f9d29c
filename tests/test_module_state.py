"""No module-level state written at run time in the runtime's rooms (issue 39 item 2): what an operator keeps is
owned by it (an actor's own state, or the Context the operator builds), so two operators in one process (the
tests run several) share nothing. A new piece of module-level mutable state fails here until it is moved, or
allowed below with the reason it is safe."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOMS = {"lessor.actors": ROOT / "actors", "lessor.mailbox": ROOT / "mailbox", "lessor.templates": ROOT / "templates"}

MUTATORS = frozenset({"add", "append", "appendleft", "clear", "discard", "extend", "extendleft", "insert", "pop",
                      "popitem", "popleft", "remove", "setdefault", "update", "sort", "reverse", "cache_clear"})
"""Methods that change a container (or a cached function) in place."""
CACHES = frozenset({"cache", "lru_cache"})
CONTAINERS = frozenset({"dict", "list", "set", "deque", "defaultdict", "OrderedDict", "Counter", "bytearray"})
IMMUTABLE = frozenset({"Slot", "TypeVar", "ParamSpec", "NewType", "Path", "Decimal", "Fraction", "MappingProxyType",
                       "ContextVar"})
"""Classes whose instances hold no state to share (a ContextVar's value is each context's own); the finder counts
any method call on an instance of another class."""
READERS = frozenset({"len", "iter", "sorted", "set", "frozenset", "list", "tuple", "dict", "any", "all", "min", "max",
                     "sum", "enumerate", "zip", "map", "filter", "reversed", "isinstance", "getattr", "hasattr", "str",
                     "repr", "update"})
"""Calls that only read the container handed to them (`other.update(TABLE)` copies TABLE)."""

ALLOWED: dict[tuple[str, str], str] = {
    # (module, name): why it is safe to share between operators
    ("lessor.actors.provisioning.provider", "_compile"):
        "bounded (256) memo of a pure function of the provider's canonical JSON, an immutable str",
    ("lessor.actors.provisioning.handle_index", "_regexes"):
        "bounded (256) memo of compiled regexes, keyed by a tuple of pattern strings",
    ("lessor.templates.regexes", "compile_regex"):
        "bounded (1024) memo of compiled regexes, keyed by the pattern string",
    ("lessor.templates.schema", "_validator"):
        "bounded (256) memo of a pure function of the schema's canonical JSON",
    ("lessor.templates.sandbox", "compile_template"):
        "bounded (1024) memo of a pure compile of the template's source, an immutable str",
    ("lessor.templates.sandbox", "compile_expression"):
        "bounded (1024) memo of a pure compile of the expression's source, an immutable str",
    ("lessor.templates.timestamps", "_parse_text"):
        "bounded (4096) memo of a pure parse of an immutable str",
    ("lessor.templates.strgen", "_RANDOM"):
        "a SystemRandom: draws from the operating system, keeps no state of its own",
    ("lessor.templates.budget", "_WATCHDOG"):
        "one daemon thread that interrupts templates past their deadline: it holds only the budgets in flight "
        "(one per busy render thread, each dropped at its deadline), nothing of an operator's, and sharing it "
        "changes no answer",
    ("lessor.templates.budget", "_CURRENT"):
        "thread-local: the budget of the work the current render thread runs, set and cleared around it",
}


def _module(path: Path, room: str, base: Path) -> str:
    parts = path.relative_to(base).with_suffix("").parts
    return ".".join((room, *parts)).removesuffix(".__init__")


def _stored_names(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level names bound to a container or a call's result (anything that may hold state)."""
    found: dict[str, ast.expr] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        if value is None or not isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp,
                                                   ast.SetComp, ast.Call)):
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                found[target.id] = value
    return found


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _cached_functions(tree: ast.Module) -> Iterator[str]:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                called = decorator.func if isinstance(decorator, ast.Call) else decorator
                name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
                if name in CACHES:
                    yield node.name


def _written(tree: ast.Module, stored: dict[str, ast.expr]) -> Iterator[str]:
    """Names among `stored` that a function writes: `global`, `NAME[k] = v`, `del NAME[k]`, `NAME.x = v`,
    `NAME.add(...)` and the other in-place container methods, any method of an object a class made
    (`THROTTLE.note(...)`), and a container handed to a call (`_remember(_cache, k, v)`)."""
    names = set(stored)
    instances = {name for name, value in stored.items() if isinstance(value, ast.Call)
                 and _callee(value).lstrip("_")[:1].isupper() and _callee(value) not in IMMUTABLE}
    containers = {name for name, value in stored.items() if not isinstance(value, ast.Call)
                  or _callee(value) in CONTAINERS}
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Global):
                yield from node.names
            targets: list[ast.expr] = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = list(node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                if isinstance(target, (ast.Subscript, ast.Attribute)) and isinstance(target.value, ast.Name) \
                        and target.value.id in names:
                    yield target.value.id
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                    and (node.func.value.id in instances or node.func.value.id in names
                         and node.func.attr in MUTATORS):
                yield node.func.value.id
            if _callee(node) in READERS:
                continue
            for argument in (*node.args, *(keyword.value for keyword in node.keywords)):
                if isinstance(argument, ast.Name) and argument.id in containers:
                    yield argument.id  # handed to a function that may write it


def _imported(tree: ast.Module, module: str, package: bool) -> dict[str, tuple[str, str]]:
    """Module-level `from X import NAME [as alias]`: alias → (X, NAME), relative imports resolved."""
    found: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        base = module.split(".") if package else module.split(".")[:-1]
        if node.level:
            base = base[:len(base) - node.level + 1]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        for alias in node.names:
            found[alias.asname or alias.name] = (source, alias.name)
    return found


def module_state(sources: dict[str, tuple[str, bool]]) -> set[tuple[str, str]]:
    """(module, name) of each piece of module-level state written at run time (by its own module or by one
    that imports it), and each module-level memo; `sources`: module → (source, whether a package)."""
    trees = {module: ast.parse(source) for module, (source, _) in sources.items()}
    stored = {module: _stored_names(tree) for module, tree in trees.items()}
    found: set[tuple[str, str]] = set()
    for module, tree in trees.items():
        here = {name: (module, name) for name in stored[module]}
        for alias, (source, name) in _imported(tree, module, sources[module][1]).items():
            if name in stored.get(source, {}):
                here[alias] = (source, name)
        values = {alias: stored[where][name] for alias, (where, name) in here.items()}
        found |= {here.get(name, (module, name)) for name in _written(tree, values)}
        found |= {(module, name) for name in _cached_functions(tree)}
    return found


def all_module_state() -> set[tuple[str, str]]:
    sources = {_module(path, room, base): (path.read_text(), path.name == "__init__.py")
               for room, base in ROOMS.items() for path in sorted(base.rglob("*.py"))}
    return module_state(sources)


def test_no_module_level_state_is_written_at_run_time() -> None:
    unexplained = sorted(all_module_state() - set(ALLOWED))
    assert unexplained == [], (
        "module-level state written at run time: move it onto what owns it (an actor, or a Slot of the "
        f"Context), or allow it in {__name__}.ALLOWED with the reason it is safe to share: {unexplained}")


def test_every_allowance_is_still_needed() -> None:
    assert sorted(set(ALLOWED) - all_module_state()) == []


def test_the_finder_sees_each_way_of_writing() -> None:
    made = "THROTTLE = Throttle()\n"
    user = "from .made import THROTTLE as HELD\ndef f():\n    HELD.note()\n"
    assert module_state({"p.made": (made, False), "p.user": (user, False)}) == {("p.made", "THROTTLE")}
    source = '''
import functools
TABLE = {}
SEEN = set()
QUEUE = Queue()
COUNT = 0
FROZEN = frozenset()
CACHE: dict[str, int] = {}
WORDS = {"a": 1}
def f(k):
    global COUNT
    TABLE[k] = 1
    SEEN.add(k)
    QUEUE.get()
    FROZEN.union(k)
    remember(CACHE, k)
    len(WORDS)
@functools.lru_cache(maxsize=8)
def memo(k): return k
'''
    assert module_state({"m": (source, False)}) == {("m", "TABLE"), ("m", "SEEN"), ("m", "QUEUE"), ("m", "COUNT"),
                                         ("m", "CACHE"), ("m", "memo")}  # not WORDS: len() only reads
