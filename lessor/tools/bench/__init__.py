"""Benchmarks: each module exposes `async def run(args) -> dict` and prints JSON via `lessor bench NAME`."""
