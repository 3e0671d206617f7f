"""`generate` refuses a Contrast annotation it does not accept, in one line, writing nothing."""

from __future__ import annotations

import pytest

from tests.generate.conftest import GenerateWorkspace
from tests.generate.test_generate import EMULATED, prepared

INGRESS = "contrast.edgeless.systems/servicemesh-ingress"


@pytest.mark.parametrize(
    ("replacement", "said"),
    [
        (
            "contrast.edgeless.systems/servicemesh-ingres",
            "/resources/app.yml: Deployment/default/web: unknown annotation"
            " contrast.edgeless.systems/servicemesh-ingres (did you mean"
            f" {INGRESS}?)",
        ),
        (
            "contrast.edgeless.systems/image-store-size: '5 Gi'\n        " + INGRESS,
            "image-store-size='5 Gi' is not a Kubernetes quantity (accepted: 0, or a size such"
            " as 250Gi (a quantity))",
        ),
    ],
    ids=["misspelt", "malformed"],
)
def test_an_annotation_not_accepted_fails_in_one_line_and_writes_nothing(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str], replacement: str, said: str
) -> None:
    prepared(workspace)
    app = workspace.resources / "app.yml"
    app.write_text(app.read_text().replace(INGRESS, replacement, 1))
    before = workspace.snapshot()
    capsys.readouterr()
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 1
    err = capsys.readouterr().err
    assert err.startswith("contrast: "), err
    assert err.count("\n") == 1, err
    assert said in err
    assert "Traceback" not in err
    assert workspace.snapshot() == before
