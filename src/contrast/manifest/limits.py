"""How large a manifest may be before it is parsed, apart from the model so that reading a
manifest's JSON does not import pydantic (`generate` reads the previous one at every run)."""

from __future__ import annotations

from contrast.boundedjson import JsonLimits

# A manifest is checked for size and depth before it is parsed (it reaches SetManifest from
# anyone before the first manifest is set). 4 MiB is gRPC's default message limit, which caps
# SetManifest anyway (tens of thousands of policies); a manifest nests 5 levels deep.
MANIFEST_LIMITS = JsonLimits(max_bytes=4 << 20, max_depth=32)
