"""Leader election on a coordination.k8s.io Lease, and the fence that keeps a deposed leader from writing."""
