"""The policy package's root error, under the project's: a caller of `policy` catches this one.

Each step has its kind under it: generation (`PolicyGenerationError`), settings and their JSON
patches, agent requests, initdata, and the engine's load and evaluation.
"""

from __future__ import annotations

from contrast.errors import ContrastError


class PolicyError(ContrastError):
    """A policy, or one of its inputs, that cannot be generated, read, loaded or evaluated."""
