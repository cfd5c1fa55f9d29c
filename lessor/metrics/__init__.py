"""The operator's own Prometheus metrics: of the objects' state, of rendering, and who may read them."""
