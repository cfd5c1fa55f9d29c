"""What runs beside the operator, never in it: `lessor dev` and `lessor controlplane` (dev, controlplane),
`lessor bench` (bench), `lessor convert` and `lessor migrate` (porting).

The runtime (every other module of lessor but the CLI) never imports this package (tests/test_layers.py)."""
