"""lessor's object model: pure code below the actors, knowing neither HTTP nor actors.

- `kinds`: the lessor kinds (apiVersion, kind, plural, actor prefix) and how the topology names any kind;
- `keys`: object keys and actor addresses (one function builds an address, one splits it);
- `fields`: typed read-only readers of object fields (versions, timestamps, lease refs, holders);
- `times`: the one way lessor writes a time into an object (whole seconds, rounded down);
- `handles`: what a bound handle records of its claim;
- `selectors`, `jsonpatch`: label selectors and JSON Patch, which actors and the topology both use.
"""
