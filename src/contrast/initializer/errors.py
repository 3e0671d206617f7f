"""The initializer's root error, under the project's: what ends the init container on purpose.

The client raises it as is (the Coordinator refused this workload, or no certificate came before
the deadline); the encrypted volume's setup has its own kind under it.
"""

from __future__ import annotations

from contrast.errors import ContrastError


class InitializerError(ContrastError):
    """The init container cannot give its workload what it needs; retrying will not help."""
