"""Contrast for Python: confidential containers on Kubernetes, proven by remote attestation."""

__version__ = "0.1.0"
