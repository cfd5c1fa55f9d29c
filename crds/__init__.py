"""CustomResourceDefinitions, one file per kind (shipped as package data)."""
