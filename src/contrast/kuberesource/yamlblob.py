"""What a blob is: a long base64 string that YAML can read only as a string, plain anywhere.

The value of an initdata annotation (16 KB in a typical policy), a certificate or key in a
ConfigMap. ruamel's pure-Python scanner and emitter look at such a value character by character,
which was most of `generate`'s time, so `yamlio` sets blobs aside while ruamel reads and writes,
and `yamlrtdump` writes one as it is without asking ruamel's analysis. Both rely on the same
facts: a blob stands alone between blanks or quotes, and it holds a character that no YAML
number, boolean or null has ([G-Z], '/', lowercase letters other than o and x), so that it can
only be a string, whatever the YAML version, and is plain text in every style and context.
"""

from __future__ import annotations

import re

MINIMUM = 1024
# Finds blobs in a text; `fullmatch` on a string says whether the whole string is one.
PATTERN = re.compile(
    rf"(?<![^\s'\"])(?=[A-Za-z0-9+/=]{{{MINIMUM}}})(?=[A-Za-z0-9+/=]*?[G-Zg-np-wyz/])"
    r"[A-Za-z0-9+/=]+(?![^\s'\"])"
)


def is_blob(text: str) -> bool:
    """Whether all of `text` is one blob."""
    return len(text) >= MINIMUM and PATTERN.fullmatch(text) is not None
