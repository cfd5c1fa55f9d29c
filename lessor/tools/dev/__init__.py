"""`lessor dev` and `lessor controlplane`: a local control plane, the operator and its samples, with Prometheus
and Zipkin on request."""
