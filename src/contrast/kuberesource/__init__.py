"""Kubernetes resources: reading and writing YAML, workload kinds, injection, release resources."""
