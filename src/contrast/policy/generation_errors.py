"""The error every expected failure of policy generation raises."""

from __future__ import annotations

from contrast.policy.errors import PolicyError


class PolicyGenerationError(PolicyError):
    """A workload whose policy cannot be generated as written (the message names what and why)."""
