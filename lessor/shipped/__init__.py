"""What the package ships besides code: the CRDs and deploy/ manifests, read as data."""
