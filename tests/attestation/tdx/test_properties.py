"""Parsers on arbitrary and mutated input: a `ContrastError` or a value, never a crash."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime

from cryptography import x509
from hypothesis import example, given, settings
from hypothesis import strategies as st

from contrast.attestation.certificates import load_certificates
from contrast.attestation.tdx.collateral import QeIdentity, TcbInfo, load_collateral
from contrast.attestation.tdx.pck import SGX_EXTENSION_OID, PckExtension
from contrast.attestation.tdx.quote import Quote
from contrast.attestation.tdx.trust import GENUINE_INTEL_ROOTS
from contrast.attestation.tdx.verify import verify_quote_bytes
from contrast.errors import ContrastError
from tests.attestation.tdx.vectors import quote_bytes, vector
from tests.conftest import ATTESTATION_DATA

SAMPLE = quote_bytes(vector("trustee-quote4-v4-debug"))
SAMPLE_V5 = quote_bytes(vector("trustee-quote5-v5"))
_chain = Quote.from_bytes(SAMPLE).signature_data.pck_chain_pem
assert _chain is not None
EXTENSION = (
    load_certificates(_chain)[0]
    .extensions.get_extension_for_oid(x509.ObjectIdentifier(SGX_EXTENSION_OID))
    .value.value  # type: ignore[attr-defined]
)
GTG = ATTESTATION_DATA / "collateral" / "intel" / "gtg-2023-06"
TCB_INFO = (GTG / "tcb_info.json").read_bytes()
QE_IDENTITY = (GTG / "qe_identity.json").read_bytes()
NOW = datetime(2023, 6, 20, tzinfo=UTC)


def mutations(sample: bytes) -> st.SearchStrategy[bytes]:
    """The sample with a few bytes changed, cut short, or with bytes inserted."""

    @st.composite
    def mutate(draw: st.DrawFn) -> bytes:
        data = bytearray(sample)
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(["set", "cut", "insert"]))
            index = draw(st.integers(0, max(len(data) - 1, 0)))
            if kind == "set" and data:
                data[index] = draw(st.integers(0, 255))
            elif kind == "cut":
                del data[index:]
            else:
                data[index:index] = draw(st.binary(min_size=1, max_size=8))
        return bytes(data)

    return mutate()


def parses_or_refuses(parse: object, data: bytes) -> None:
    with contextlib.suppress(ContrastError):
        parse(data)  # type: ignore[operator]


@given(st.binary(max_size=2000))
@example(b"")
@example(SAMPLE[:48])
def test_quote_from_arbitrary_bytes(data: bytes) -> None:
    parses_or_refuses(Quote.from_bytes, data)


@given(st.one_of(mutations(SAMPLE), mutations(SAMPLE_V5)))
def test_quote_from_mutated_bytes(data: bytes) -> None:
    try:
        quote = Quote.from_bytes(data)
    except ContrastError:
        return
    assert quote.to_bytes() == data


@settings(max_examples=50)
@given(mutations(SAMPLE))
def test_verify_mutated_quote_raises_only_contrast_errors(data: bytes) -> None:
    with contextlib.suppress(ContrastError):
        verify_quote_bytes(data, now=NOW, roots=GENUINE_INTEL_ROOTS)


@given(st.binary(max_size=400))
def test_pck_extension_from_arbitrary_bytes(data: bytes) -> None:
    parses_or_refuses(PckExtension.from_der, data)


@given(mutations(EXTENSION))
def test_pck_extension_from_mutated_bytes(data: bytes) -> None:
    parses_or_refuses(PckExtension.from_der, data)


@given(mutations(TCB_INFO))
def test_tcb_info_from_mutated_text(data: bytes) -> None:
    parses_or_refuses(TcbInfo.from_json, data)


@given(mutations(QE_IDENTITY))
def test_qe_identity_from_mutated_text(data: bytes) -> None:
    parses_or_refuses(QeIdentity.from_json, data)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(
    ["id", "version", "fmspc", "pceId", "tcbLevels", "tcb", "issueDate", "nextUpdate",
     "tdxModule", "tdxModuleIdentities", "sgxtcbcomponents", "tdxtcbcomponents", "svn",
     "tcbStatus", "mrsigner", "isvprodid", "tcb_info", "qe_identity", "signature"]
)  # fmt: skip


@given(st.dictionaries(KEYS, JSON_VALUES, max_size=8))
def test_tcb_info_from_arbitrary_structures(inner: dict[str, object]) -> None:
    inner.setdefault("id", "TDX")
    inner.setdefault("version", 3)
    body = json.dumps(inner)
    document = f'{{"tcbInfo":{body},"signature":"{"00" * 64}"}}'.encode()
    parses_or_refuses(TcbInfo.from_json, document)


@given(st.dictionaries(KEYS, JSON_VALUES, max_size=8))
def test_collateral_loader_from_arbitrary_json(document: dict[str, object]) -> None:
    parses_or_refuses(lambda data: load_collateral([data]), json.dumps(document).encode())


@given(st.binary(max_size=600))
def test_collateral_loader_from_arbitrary_bytes(data: bytes) -> None:
    parses_or_refuses(lambda item: load_collateral([item]), data)
