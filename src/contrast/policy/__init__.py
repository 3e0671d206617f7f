"""Kata agent policies and the initdata documents that carry them into the pod's TEE."""
