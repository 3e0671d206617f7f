"""The emulated runtime on an emulated-tdx node: the pod's quote carries its initdata digest."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from contrast.api import teeendpoint as endpoint
from contrast.api.convert import evidence_from_proto
from contrast.api.evidence_pb2 import Evidence as EvidenceMessage
from contrast.attestation.emulated.tdx import load_roots
from contrast.attestation.tdx.verify import verify_quote_bytes
from tests.emulatedruntime.node import PROBE, REPORT_DATA, Node, app_pod


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    node = Node(tmp_path_factory.mktemp("emulated-tdx-node"), platform="emulated-tdx")
    node.start()
    try:
        yield node
    finally:
        node.stop()


def test_a_pod_on_an_emulated_tdx_node_gets_its_mrconfigid(node: Node) -> None:
    pod = app_pod(node.roots)
    app = "e" * 64
    for container, spec in ((pod.sandbox_id, node.sandbox_spec(pod)),
                            (app, node.container_spec(pod, app))):  # fmt: skip
        started = node.run(container, spec)
        assert started.returncode == 0, started.stderr
    probe = node.exec(app, PROBE)
    assert probe.returncode == 0, probe.stderr
    answer = bytes.fromhex(probe.stdout)
    status, length = struct.unpack(">BI", answer[:5])
    assert status == endpoint.STATUS_EVIDENCE, answer[5:]
    message = EvidenceMessage()
    message.ParseFromString(answer[5 : 5 + length])
    evidence = evidence_from_proto(message)
    roots = load_roots(node.public)  # the exported certificates only
    assert roots is not None
    verified = verify_quote_bytes(evidence.report, now=datetime.now(UTC), roots=roots)
    body = verified.quote.body
    assert body.mr_config_id == hashlib.sha256(pod.policy.initdata_toml).digest() + bytes(16)
    assert body.report_data == REPORT_DATA
