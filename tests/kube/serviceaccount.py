"""The Coordinator's own identity on the test cluster, as a Pod of it would have it.

`contrast coordinator-resources` emits a ServiceAccount, a Role and a RoleBinding; `grant` applies
exactly those documents (optionally with one verb taken out of the Role) into a namespace and
returns a kubeconfig that authenticates with a token of that ServiceAccount (`kubectl create
token`, what the kubelet mounts into the Pod), not with the cluster's admin credentials.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from contrast.cli.main import main
from tests.kube.cluster import Cluster

# What a Coordinator Pod gets besides its StatefulSet and Services.
ACCESS_KINDS = ("ServiceAccount", "Role", "RoleBinding")
# How long RBAC may take to see a new RoleBinding: a bound on waiting, not a measured property.
GRANTED_WITHIN = 30.0


def cli_output(*argv: str) -> str:
    """What `contrast ARGV` prints on stdout (in this process; it must succeed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0, argv
    return out.getvalue()


def coordinator_access(namespace: str) -> list[dict[str, Any]]:
    """The ServiceAccount, Role and RoleBinding of `coordinator-resources --namespace NAMESPACE`."""
    text = cli_output(
        "coordinator-resources", "--platform", "emulated-snp", "--namespace", namespace
    )
    documents = [d for d in YAML(typ="safe").load_all(text) if d]
    return [d for d in documents if d["kind"] in ACCESS_KINDS]


def role_verbs(namespace: str = "default") -> list[str]:
    """The verbs the Coordinator's Role grants on configmaps, as the CLI emits it."""
    (role,) = [d for d in coordinator_access(namespace) if d["kind"] == "Role"]
    (rule,) = role["rules"]
    assert rule["resources"] == ["configmaps"], rule
    verbs: list[str] = rule["verbs"]
    return verbs


def service_account_user(namespace: str, name: str = "coordinator") -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def grant(cluster: Cluster, namespace: str, *, without: str | None = None) -> Path:
    """Apply the Coordinator's access into `namespace` (its Role lacking the verb `without`, if
    given); a kubeconfig of its ServiceAccount's token, once RBAC has seen the binding."""
    documents = coordinator_access(namespace)
    (account,) = [d for d in documents if d["kind"] == "ServiceAccount"]
    (role,) = [d for d in documents if d["kind"] == "Role"]
    verbs = role["rules"][0]["verbs"]
    if without is not None:
        assert without in verbs, (without, verbs)
        verbs.remove(without)
    stream = "\n---\n".join(json.dumps(document) for document in documents)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=stream.encode())
    name = account["metadata"]["name"]
    _wait_until_granted(cluster, namespace, name, verbs)
    token = cluster.kubectl("create", "token", name, "-n", namespace, "--duration", "2h")
    return write_token_kubeconfig(
        cluster,
        cluster.directory / f"kubeconfig-{namespace}-{name}",
        namespace=namespace,
        user=service_account_user(namespace, name),
        token=token.stdout.decode().strip(),
    )


def write_token_kubeconfig(
    cluster: Cluster, path: Path, *, namespace: str, user: str, token: str
) -> Path:
    """A kubeconfig for the cluster's API server (its address and CA from the admin's) whose only
    credential is `token`; readable by its owner only, since the token is a credential."""
    admin = json.loads(
        cluster.kubectl("config", "view", "--raw", "--minify", "--flatten", "-o", "json").stdout
    )
    (entry,) = admin["clusters"]
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": entry["cluster"]}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": user, "context": {"cluster": "test", "user": user, "namespace": namespace}}
        ],
        "current-context": user,
    }
    path.touch(mode=0o600)
    path.write_text(json.dumps(document))
    return path


def _wait_until_granted(cluster: Cluster, namespace: str, name: str, verbs: list[str]) -> None:
    """The authorizer learns of a new RoleBinding from a watch: a moment after the apply."""
    if not verbs:
        return
    as_user = f"--as={service_account_user(namespace, name)}"
    deadline = time.monotonic() + GRANTED_WITHIN
    while True:
        answer = cluster.kubectl(
            "auth", "can-i", verbs[0], "configmaps", "-n", namespace, as_user, check=False
        )
        if answer.returncode == 0:
            return
        assert time.monotonic() < deadline, f"RBAC never granted {verbs[0]}: {answer.stdout!r}"
        time.sleep(0.2)
