"""The Coordinator's transit engine: Vault's transit secrets API on port 8200, for auto-unseal.

As the original (`coordinator/internal/transitengineapi`): workloads present their mesh
certificate, may use only the key named by their own workload secret ID, and every key is derived
from the seed, so it survives restarts and recovery and is the same on every replica.
"""
