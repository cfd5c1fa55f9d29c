"""Kubernetes Events, recorded and summarised as client-go's recorder does."""
