"""The actors and their pure rules: two domains, leasing/ and provisioning/, over what both use (docs/architecture.md, "Layers")."""
