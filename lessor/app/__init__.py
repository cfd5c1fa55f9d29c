"""The application: wires the gateway, the topology, the actors and the servers into `lessor run`."""
