"""The seed package's root error, under the project's: a caller of `seed` catches this one.

The engine raises it as is (a seed or salt of the wrong shape, a workload secret request without
an id); shares and the threshold split have their own kinds under it.
"""

from __future__ import annotations

from contrast.errors import ContrastError


class SeedError(ContrastError):
    """The seed, its shares or its split cannot be used as given."""
