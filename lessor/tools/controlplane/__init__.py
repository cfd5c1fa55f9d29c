"""A local etcd + kube-apiserver (+ kube-controller-manager), built from Go modules and cached."""

from lessor.tools.controlplane.build import Binaries, ensure_binaries
from lessor.tools.controlplane.run import ControlPlane

__all__ = ["Binaries", "ControlPlane", "ensure_binaries"]
