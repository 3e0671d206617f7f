"""SNP launch digests against sev-snp-measure's own published vectors.

The expected digests are copied from virtee/sev-snp-measure 0.0.13 `tests/test_guest.py` (the
version we depend on); the firmware is that project's `ovmf_AmdSev_suffix.bin` fixture (see
fixtures/README.md). Upstream passes `/dev/null` as kernel and initrd; an empty file has the same
content, and our front refuses anything that is not a regular file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from contrast.attestation.snp.launch import (
    DEFAULT_GUEST_FEATURES,
    GuestImage,
    LaunchDigestError,
    launch_digest,
    launch_digests,
    vcpu_signature,
)
from contrast.attestation.snp.report import Product

FIXTURES = Path(__file__).parent / "fixtures"
OVMF = FIXTURES / "ovmf_AmdSev_suffix.bin"
OVMF_SHA256 = "8f765dfabc127fc0a938a0744a3103ec15864d7d794eb4c398aa976b6d6ab16c"
CMDLINE = "console=ttyS0 loglevel=7"

# (test name upstream, vCPUs, with kernel?, cmdline, guest features, expected digest)
UPSTREAM_VECTORS = [
    ("test_snp_default", 1, True, CMDLINE, 0x21,
     "803f691094946e42068aaa3a8f9e26a5c89f36f7b73ecfb28c653360fe4b3aba7e534442e7e1e17895dfe778d0228977"),
    ("test_snp_guest_feature_snp_only", 1, True, CMDLINE, 0x1,
     "6d287813eb5222d770f75005c664e34c204f385ce832cc2ce7d0d6f354454362f390ef83a92046c042e706363b4b08fa"),
    ("test_snp_without_kernel_default", 1, False, "", 0x21,
     "e1e1ca029dd7973ab9513295be68198472dcd4fc834bd9af9b63f6e8a1674dbf281a9278a4a2ebe0eed9f22adbcd0e2b"),
    ("test_snp_without_kernel_feature_snp_only", 1, False, "", 0x1,
     "19358ba9a7615534a9a1e2f0dfc29384dcd4dcb7062ff9c6013b26869a5fc6ecabe033c48dd6f6db5d6d76e7c5df632d"),
    ("test_snp_with_multiple_vcpus_default", 4, True, "", 0x21,
     "4953b1fb416fa874980e8442b3706d345926d5f38879134e00813c5d7abcbe78eafe7b422907be0b4698e2414a631942"),
    ("test_snp_with_multiple_vcpus_feature_snp_only", 4, True, "", 0x1,
     "5061fffb019493a903613d56d54b94912a1a2f9e4502385f5c194616753720a92441310ba6c4933de877c36e23046ad5"),
]  # fmt: skip


@pytest.fixture
def empty_file(tmp_path: Path) -> Path:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    return path


def test_fixture_is_upstreams() -> None:
    assert hashlib.sha256(OVMF.read_bytes()).hexdigest() == OVMF_SHA256


@pytest.mark.parametrize(
    ("name", "vcpus", "with_kernel", "cmdline", "features", "expected"),
    UPSTREAM_VECTORS,
    ids=[vector[0] for vector in UPSTREAM_VECTORS],
)
def test_reproduces_upstream_vector(  # noqa: PLR0917 (one parameter per vector column)
    empty_file: Path,
    name: str,
    vcpus: int,
    with_kernel: bool,
    cmdline: str,
    features: int,
    expected: str,
) -> None:
    image = GuestImage(
        OVMF,
        kernel=empty_file if with_kernel else None,
        initrd=empty_file if with_kernel else None,
        cmdline=cmdline,
    )
    digest = launch_digest(image, vcpus=vcpus, vcpu_type="EPYC-v4", guest_features=features)
    assert digest.hex() == expected


def test_every_input_changes_the_digest(tmp_path: Path, empty_file: Path) -> None:
    kernel = tmp_path / "bzImage"
    kernel.write_bytes(b"kernel")
    base = GuestImage(OVMF, kernel=kernel, initrd=empty_file, cmdline=CMDLINE)
    reference = launch_digest(base, vcpus=2, vcpu_type=Product.MILAN)
    variants = [
        launch_digest(base, vcpus=3, vcpu_type=Product.MILAN),
        launch_digest(base, vcpus=2, vcpu_type=Product.GENOA),
        launch_digest(GuestImage(OVMF, kernel, empty_file, CMDLINE + " x"), vcpus=2,
                      vcpu_type=Product.MILAN),
        launch_digest(GuestImage(OVMF, kernel, kernel, CMDLINE), vcpus=2, vcpu_type=Product.MILAN),
        launch_digest(GuestImage(OVMF, empty_file, empty_file, CMDLINE), vcpus=2,
                      vcpu_type=Product.MILAN),
        launch_digest(base, vcpus=2, vcpu_type=Product.MILAN, guest_features=0x21),
    ]  # fmt: skip
    assert len({reference, *variants}) == len(variants) + 1


def test_products_use_their_qemu_cpu_models() -> None:
    # CPUID(1).EAX: Milan family 0x19 model 0x01 stepping 1, Genoa model 0x11 stepping 0.
    assert vcpu_signature(Product.MILAN) == 0x00A00F11
    assert vcpu_signature(Product.GENOA) == 0x00A10F10
    assert vcpu_signature("EPYC-Milan") == vcpu_signature(Product.MILAN)


def test_launch_digests_cover_products_times_vcpus(empty_file: Path) -> None:
    image = GuestImage(OVMF, kernel=empty_file, initrd=empty_file, cmdline=CMDLINE)
    digests = launch_digests(image, vcpu_counts=(1, 2, 3))
    assert [(d.product, d.vcpus) for d in digests] == [
        (product, vcpus) for product in (Product.MILAN, Product.GENOA) for vcpus in (1, 2, 3)
    ]
    assert len({d.digest for d in digests}) == 6
    milan_2 = launch_digest(image, vcpus=2, vcpu_type=Product.MILAN)
    assert digests[1].digest == milan_2
    assert DEFAULT_GUEST_FEATURES == 0x1


def test_missing_file_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(LaunchDigestError, match="no such file"):
        launch_digest(GuestImage(tmp_path / "nope.fd"), vcpus=1, vcpu_type=Product.MILAN)


@pytest.mark.parametrize(
    "size",
    [8192, 18],  # 18 bytes: no whole page, which sev-snp-measure checks with `assert`
)
def test_firmware_without_sev_metadata_is_a_typed_error(tmp_path: Path, size: int) -> None:
    firmware = tmp_path / "plain.fd"
    firmware.write_bytes(b"\xff" * size)
    with pytest.raises(LaunchDigestError, match="cannot measure"):
        launch_digest(GuestImage(firmware), vcpus=1, vcpu_type=Product.MILAN)


def test_unknown_vcpu_type_and_zero_vcpus_are_refused() -> None:
    with pytest.raises(LaunchDigestError, match="unknown vCPU type"):
        vcpu_signature("Pentium")
    with pytest.raises(LaunchDigestError, match="at least 1"):
        launch_digest(GuestImage(OVMF), vcpus=0, vcpu_type=Product.MILAN)
