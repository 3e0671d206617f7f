"""SNP launch digests against sev-snp-measure's own published vectors.

The expected digests are copied from virtee/sev-snp-measure 0.0.13 `tests/test_guest.py` (the
version we depend on); the firmware is that project's `ovmf_AmdSev_suffix.bin` fixture (see
fixtures/README.md). Upstream passes `/dev/null` as kernel and initrd; an empty file has the same
content, and our front refuses anything that is not a regular file.

`launch_digests` measures the image once and continues the chain per vCPU count; its digests are
pinned from the code that called sev-snp-measure's `calc_launch_digest` once per digest, and
compared with that function for every combination `runtime reference-values` produces.
"""

from __future__ import annotations

import hashlib
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sevsnpmeasure import guest
from sevsnpmeasure.sev_mode import SevMode
from sevsnpmeasure.vmm_types import VMMType

from contrast.attestation.snp.launch import (
    DEFAULT_GUEST_FEATURES,
    DEFAULT_VCPU_COUNTS,
    VCPU_TYPES,
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


# The default entries (Milan, then Genoa, 1..8 vCPUs) of an image with a 6-byte kernel "kernel",
# initrd "initrd" and CMDLINE, as the code before the image was measured once computed them.
PINNED_DEFAULTS = [
    "4bc6aa511d58306104c3f0e0a4d534dfe660c24a05ba1c9bf302ef634a6d7bec9fe97f0b24ed6f6dc478b3822cfcdb36",
    "157989308636c0604de40d261bd18948392faefd59164ab4caa6968d98723b850d4303d0acb5255f3badc5ed5a9f77bb",
    "70a9f03db7a3126d3ec084bd46ca27ddcc9a56751b473b81ee9fe64708f081d5c11f848a4c41b53f8328e15edf9d6089",
    "f62ef5a803b05850100e488d001dd4b737a901ae02e16cdb43d5de4786bc75ce77ec9197cfb4d1b08d13d02039eb4477",
    "d8451e43861bcd881b3c3c2fd136e75bc7e793d81d4de003dad9068fc66a3a4ae06ee37c5a469b9a4393e58cd78f0f0c",
    "fabd4d7229fab7a82b6e211dd84296664b4cd6319b31182abd2d4de0ff5c6bda0535e446e6b824c564425645c6a86f35",
    "d71480e10f9c71fd227fa3c9f232e81dad5ce1a88df3774196656dc347aab96b88335b686f450a467de4826c65f13ca9",
    "290451bb92c18400ec3227bbd08334bf7c3136dc25b26fdb42d3187bbb65815097192dcdb8f812b7dc3fe8fcf2786559",
    "13532ead01798720f47424c4a880b015aaebf968b6ee315b8bb8f2b05e0fa79daa4b8be1a85004ddf286f4a6eeef6bf6",
    "7dfaff2f8e4a3c00802eda0ca95d0364cf873f01a3a7308660979f6401f874f5407545f1e86945859bbef74a149f0810",
    "6931c12aefcf9dbe1081e4ae75afac55153f1a256331cf67a528588c3b05037bc54707c925d09822811a95e3ddc2164a",
    "b356544e88afde1e88272440448518703206155a0ae223d342c32dd95d84d754e01e764cd1ee9eff232815827b60cb40",
    "36ce236e74a8d119612d65bbbcca5359c89f3300e0850bf030da05a95bc70f5bd95c4d96c40b23fdbbed24845a1f04b1",
    "e8b83948f6661f7159c7dc9ac4985d897b296b28ec84ff1bdecc464d45f7c16670949f36e7143986705dcd2fe9dd998b",
    "d6a2466eafc640cfc30dcbf5dd75e2587686f447d3a1692fb43652c6d4b5a7875e789b829cddf82124dbc8152ba2f960",
    "cd219dc5d2bc8db23b091a0158afb57e7d217b1ec56e94b5c6dc4f20fd7a72ef9169d44e3d1c0668498aa2c0a32822c4",
]  # fmt: skip
# The same code's digests of the firmware alone (no kernel): Milan 1, 2, Genoa 1, 2 vCPUs.
PINNED_FIRMWARE_ONLY = [
    "93f767a2bff8fc050ed48cfe6e2dc9bb4c45b2313c48df0159a6b22fdc5633307f93a7ec31cf6fc92a61a2ace3cb9679",
    "7ebc88066ce54aed30ae5dfadbb298613a046effdf58fbba3581cb752d7731f03805fb0154bbbe534fa30ac5bd661299",
    "454918270eabb57fe9588d00df1c3935f71fde1e4ab922981376247b5a3be1eb6faf5cc74c9274c2f54286f09c001698",
    "3919b210f6562c034f07a3f6177c84e96bca4dc357b80186f0adf1fea3a198d64d3d52e1ac9fd85a67fd3c0f09df026a",
]  # fmt: skip


@pytest.fixture
def image_files(tmp_path: Path) -> tuple[Path, Path]:
    kernel, initrd = tmp_path / "bzImage", tmp_path / "initrd"
    kernel.write_bytes(b"kernel")
    initrd.write_bytes(b"initrd")
    return kernel, initrd


def test_default_digests_are_the_pinned_ones(image_files: tuple[Path, Path]) -> None:
    kernel, initrd = image_files
    digests = launch_digests(GuestImage(OVMF, kernel, initrd, CMDLINE))
    assert [(d.product, d.vcpus) for d in digests] == [
        (product, vcpus) for product in (Product.MILAN, Product.GENOA) for vcpus in range(1, 9)
    ]
    assert [d.digest.hex() for d in digests] == PINNED_DEFAULTS
    firmware_only = launch_digests(GuestImage(OVMF), vcpu_counts=(1, 2))
    assert [d.digest.hex() for d in firmware_only] == PINNED_FIRMWARE_ONLY


def _calc_launch_digest(image: GuestImage, vcpus: int, product: Product, features: int) -> bytes:
    """sev-snp-measure's whole computation for one digest, as the original calls it."""
    return bytes(
        guest.calc_launch_digest(
            SevMode.SEV_SNP,
            vcpus,
            vcpu_signature(product),
            str(image.ovmf),
            None if image.kernel is None else str(image.kernel),
            None if image.initrd is None else str(image.initrd),
            image.cmdline if image.kernel is not None else None,
            features,
            vmm_type=VMMType.QEMU,
        )
    )


def test_every_combination_is_sev_snp_measures(
    image_files: tuple[Path, Path], empty_file: Path
) -> None:
    # What `runtime reference-values` / `runtime build` can ask for: every product, 1..8 vCPUs
    # (and a gap: --max-vcpus only ever asks 1..N, the API any subset), firmware-only or direct
    # boot with or without initrd (empty or not) and command line, both SEV_FEATURES values.
    kernel, initrd = image_files
    images = [
        GuestImage(OVMF),
        GuestImage(OVMF, kernel),
        GuestImage(OVMF, kernel, cmdline=CMDLINE),
        GuestImage(OVMF, kernel, initrd),
        GuestImage(OVMF, kernel, initrd, CMDLINE),
        GuestImage(OVMF, kernel, empty_file, CMDLINE),
    ]
    products = tuple(VCPU_TYPES)
    compared = 0
    for image in images:
        for features in (DEFAULT_GUEST_FEATURES, 0x21):
            for counts in (DEFAULT_VCPU_COUNTS, (3, 1, 7)):
                digests = launch_digests(
                    image, products=products, vcpu_counts=counts, guest_features=features
                )
                assert [(d.product, d.vcpus) for d in digests] == [
                    (product, vcpus) for product in products for vcpus in counts
                ]
                for d in digests:
                    assert d.digest == _calc_launch_digest(image, d.vcpus, d.product, features)
                    compared += 1
    assert compared == len(images) * 2 * len(products) * (8 + 3)


# Files opened while `_OPENED` is a Counter (an audit hook sees every `open`; hooks cannot be
# removed, so one is added per process and does nothing outside the test).
_OPENED: list[Counter[str]] = []


def _count_opens(event: str, arguments: tuple[object, ...]) -> None:
    if event == "open" and _OPENED and isinstance(arguments[0], str):
        _OPENED[-1][arguments[0]] += 1


@pytest.fixture
def opened() -> Iterator[Counter[str]]:
    if not getattr(sys, "_contrast_launch_audit", False):
        sys.addaudithook(_count_opens)
        sys._contrast_launch_audit = True  # type: ignore[attr-defined]
    counter: Counter[str] = Counter()
    _OPENED.append(counter)
    yield counter
    _OPENED.remove(counter)


def test_each_input_is_read_once(image_files: tuple[Path, Path], opened: Counter[str]) -> None:
    kernel, initrd = image_files
    image = GuestImage(OVMF, kernel, initrd, CMDLINE)
    digests = launch_digests(image, products=tuple(VCPU_TYPES), vcpu_counts=range(1, 17))
    assert len(digests) == 48
    assert opened == Counter({str(OVMF): 1, str(kernel): 1, str(initrd): 1})
    # The counter sees sev-snp-measure's reads: one digest the old way opens each input once.
    opened.clear()
    _calc_launch_digest(image, 2, Product.MILAN, DEFAULT_GUEST_FEATURES)
    assert opened == Counter({str(OVMF): 1, str(kernel): 1, str(initrd): 1})
