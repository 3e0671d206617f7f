"""`contrast policy evaluate` and `contrast policy explain`: agent requests against a policy.

The policy comes from a .rego file, an initdata TOML, or Kubernetes YAML carrying the initdata
annotation; requests from one JSON object (with `--name`) or a sequence of `{"kind", "request"}`
objects (a JSON list, or JSON lines as the agent writes `/tmp/policy.jsonl`; Kata's
`testcases.json` adds `"allowed"`, the expected verdict). The state is kept across the sequence,
exactly as one agent keeps it for the life of a pod.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml.error import YAMLError

from contrast.boundedfile import read_bounded, read_stream_bounded
from contrast.boundedjson import JsonInputError, JsonLimits, NotJson, load
from contrast.cli.errors import CliError
from contrast.errors import ContrastError
from contrast.kuberesource import yamlbounds
from contrast.kuberesource.workloads import Workload, workloads
from contrast.policy.engine import AgentPolicy, Decision, PolicyEvaluationError
from contrast.policy.explain import Explanation, explain
from contrast.policy.initdata import ANNOTATION, Initdata, decode_annotation
from contrast.policy.requests import RequestError, request_names

EXIT_OK = 0
EXIT_NOT_AS_EXPECTED = 3
EXIT_EVALUATION_ERROR = 4
STDIN = "-"
# Request files are read whole before evaluation: bounded in size (a day of an agent's policy log
# fits) and depth (a CreateContainerRequest with its OCI spec nests about 8 levels deep).
REQUEST_LIMITS = JsonLimits(max_bytes=64 << 20, max_depth=64)
# A policy file is Rego, initdata or the YAML of the pods carrying it: a policy is about 100 KiB.
POLICY_MAX_BYTES = 64 << 20

_EXIT_CODES = f"""exit codes:
  {EXIT_OK}  every request allowed, or every verdict as the request's "allowed" expects
  1  the policy or the requests cannot be read or loaded
  2  wrong command-line usage
  {EXIT_NOT_AS_EXPECTED}  some request denied (or, where "allowed" is given, not as expected)
  {EXIT_EVALUATION_ERROR}  some request failed evaluation (the agent would return an internal error)
"""
_REGO_PACKAGE = re.compile(r"^\s*package\s", re.MULTILINE)


class PolicyInputError(CliError):
    """A policy or request file that cannot be used."""


@dataclass(frozen=True)
class RequestCase:
    """One request of a sequence; `expected` is the verdict a test case demands, if any."""

    kind: str
    request: Any
    expected: bool | None = None
    description: str = ""


@dataclass(frozen=True)
class Outcome:
    index: int
    case: RequestCase
    decision: Decision | None
    error: str = ""
    explanation: Explanation | None = None

    @property
    def passed(self) -> bool:
        if self.decision is None:
            return False
        wanted = True if self.case.expected is None else self.case.expected
        return self.decision.allowed == wanted


def register(commands: Any) -> None:
    parser = commands.add_parser("policy", help="evaluate Kata agent requests against a policy")
    sub = parser.add_subparsers(dest="policy_command", metavar="COMMAND", required=True)
    evaluate = sub.add_parser(
        "evaluate",
        help="evaluate agent requests the way the Kata agent does",
        description="Evaluate Kata agent requests against a policy with regorus, as the agent"
        " does: inputs normalised like the agent's JSON, state kept across the sequence.",
        epilog=_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    explain_parser = sub.add_parser(
        "explain",
        help="evaluate requests and say why each denied one is denied",
        description="Evaluate like `policy evaluate`, then for each denied request show the"
        " policy's prints and the fields that differ from the closest policy entry.",
        epilog=_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for command, run in ((evaluate, run_evaluate), (explain_parser, run_explain)):
        command.add_argument(
            "--policy",
            required=True,
            metavar="FILE",
            help="a .rego file, an initdata TOML, or Kubernetes YAML with the initdata"
            f" annotation {ANNOTATION}; - reads stdin",
        )
        command.add_argument(
            "--request",
            required=True,
            metavar="FILE",
            help="one JSON request (needs --name), or a JSON list or JSON lines of"
            ' {"kind", "request"[, "allowed"]} objects; - reads stdin',
        )
        command.add_argument(
            "--name",
            metavar="REQUEST_NAME",
            help="the request's message name for a single request, e.g. CreateContainerRequest",
        )
        command.add_argument(
            "--pod", metavar="NAME", help="the annotated pod to use when the YAML has several"
        )
        command.add_argument("--output", choices=["text", "json"], default="text")
        command.set_defaults(run=run)


def run_evaluate(arguments: argparse.Namespace) -> int:
    return _run(arguments, explaining=False)


def run_explain(arguments: argparse.Namespace) -> int:
    return _run(arguments, explaining=True)


def _run(arguments: argparse.Namespace, *, explaining: bool) -> int:
    if arguments.policy == STDIN and arguments.request == STDIN:
        raise PolicyInputError("only one of --policy and --request can read stdin")
    policy_text = _read(arguments.policy, "policy")
    request_text = _read(arguments.request, "request")  # both read before either is loaded
    policy = AgentPolicy(load_policy_text(policy_text, arguments.pod))
    cases = load_requests(request_text, arguments.name)
    policy_data = policy.query("policy_data") if explaining else None
    outcomes = []
    for index, case in enumerate(cases, start=1):
        state = policy.state
        try:
            decision = policy.evaluate(case.kind, case.request)
        except RequestError as error:
            raise PolicyInputError(f"request {index}: {error}", hint=error.hint) from None
        except PolicyEvaluationError as error:
            outcomes.append(Outcome(index, case, None, error.explain()))
            continue
        explanation = None
        if explaining and not decision.allowed:
            explanation = explain(decision, policy_data, state)
        outcomes.append(Outcome(index, case, decision, explanation=explanation))
    if arguments.output == "json":
        print(json.dumps(_json_report(outcomes, policy), indent=2))
    else:
        for outcome in outcomes:
            for line in _text_lines(outcome):
                print(line)
        print(_summary(outcomes))
    if any(outcome.decision is None for outcome in outcomes):
        return EXIT_EVALUATION_ERROR
    return EXIT_OK if all(outcome.passed for outcome in outcomes) else EXIT_NOT_AS_EXPECTED


def _read(name: str, what: str) -> str:
    """The policy or request file (or stdin), within its bound (`contrast.boundedfile`)."""
    limit = POLICY_MAX_BYTES if what == "policy" else REQUEST_LIMITS.max_bytes
    hint = f"pass the {what} file itself"
    try:
        if name == STDIN:
            data = read_stream_bounded(
                sys.stdin.buffer, limit, name="on stdin", what=f"the {what}", hint=hint
            )
        else:
            data = read_bounded(Path(name), limit, what=f"the {what} file", hint=hint)
        return data.decode()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise PolicyInputError(f"cannot read the {what} file {name}: {reason}") from None


# --- the policy ---------------------------------------------------------------------------------


def load_policy_text(text: str, pod: str | None = None) -> str:
    """The Rego text of a policy given as Rego, initdata TOML or annotated Kubernetes YAML."""
    try:
        initdata = Initdata.from_toml(text.encode())
    except ContrastError:
        pass
    else:
        return _policy_of(initdata, "the initdata document")
    if _REGO_PACKAGE.search(text) and "apiVersion" not in text:
        return text
    return _policy_from_yaml(text, pod)


def _policy_of(initdata: Initdata, where: str) -> str:
    if initdata.policy is None:
        raise PolicyInputError(f"{where} has no policy.rego entry")
    return initdata.policy


def _policy_from_yaml(text: str, pod: str | None) -> str:
    try:
        loaded = yamlbounds.load_all_safe(text, "the policy")
        documents = [document for document in loaded if document is not None]
    except YAMLError as error:
        reason = " ".join(str(error).split())
        raise PolicyInputError(
            f"the policy is neither Rego, initdata TOML nor Kubernetes YAML: {reason}"
        ) from None
    annotated = {
        _workload_name(workload): value
        for workload in workloads(documents)
        if isinstance(value := _annotation(workload), str)
    }
    if not annotated:
        raise PolicyInputError(
            f"no pod or pod template in the YAML carries the annotation {ANNOTATION}",
            hint="run `contrast generate` on it first, or pass the .rego file",
        )
    if pod is not None:
        matches = [name for name in annotated if pod in (name, name.split("/", 1)[1])]
        if len(matches) != 1:
            raise PolicyInputError(
                f"no single annotated pod is called {pod!r}",
                hint="choose one of " + ", ".join(annotated),
            )
        chosen = matches[0]
    elif len(annotated) == 1:
        chosen = next(iter(annotated))
    else:
        raise PolicyInputError(
            f"the YAML has {len(annotated)} annotated pods",
            hint="choose one with --pod: " + ", ".join(annotated),
        )
    toml = decode_annotation(annotated[chosen])
    return _policy_of(Initdata.from_toml(toml), f"the initdata of {chosen}")


def _annotation(workload: Workload) -> Any:
    template = workload.pod_template
    metadata = template.get("metadata") if isinstance(template, dict) else None
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    return annotations.get(ANNOTATION) if isinstance(annotations, dict) else None


def _workload_name(workload: Workload) -> str:
    return f"{workload.kind}/{workload.name or workload.generate_name}"


# --- the requests -------------------------------------------------------------------------------


def load_requests(text: str, name: str | None) -> list[RequestCase]:
    """The request sequence in `text`: one object (with `name`), a JSON list, or JSON lines."""
    try:
        document = load(text, REQUEST_LIMITS, what="the requests")
    except NotJson:
        return [_case(item, i) for i, item in enumerate(_json_lines(text), start=1)]
    except JsonInputError as error:
        raise PolicyInputError(error.message) from None
    if isinstance(document, dict) and name is not None:
        return [RequestCase(name, document)]
    if isinstance(document, dict) and "kind" in document and "request" in document:
        return [_case(document, 1)]
    if isinstance(document, dict):
        raise PolicyInputError(
            "a single request needs --name",
            hint="e.g. --name CreateContainerRequest; known: " + ", ".join(request_names()),
        )
    if not isinstance(document, list):
        raise PolicyInputError("the requests must be a JSON object, a JSON list or JSON lines")
    if name is not None:
        raise PolicyInputError("--name is only for a single request object; sequences name each")
    return [_case(item, i) for i, item in enumerate(document, start=1)]


def _json_lines(text: str) -> Iterator[Any]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield load(line, REQUEST_LIMITS, what=f"line {number} of the requests")
        except JsonInputError as error:
            raise PolicyInputError(error.message) from None


def _case(item: Any, index: int) -> RequestCase:
    if not isinstance(item, dict) or not isinstance(item.get("kind"), str):
        raise PolicyInputError(f'request {index} is not a {{"kind", "request"}} object')
    expected = item.get("allowed")
    if expected is not None and not isinstance(expected, bool):
        raise PolicyInputError(f"request {index}: 'allowed' must be true or false")
    return RequestCase(
        item["kind"], item.get("request", {}), expected, str(item.get("description") or "")
    )


# --- output -------------------------------------------------------------------------------------


def _verdict(decision: Decision) -> str:
    verdict = "allowed" if decision.allowed else "denied"
    return f"{verdict} (AllowRequestsFailingPolicy)" if decision.overridden else verdict


def _text_lines(outcome: Outcome) -> Iterator[str]:
    decision = outcome.decision
    head = f"{outcome.index}: {decision.kind if decision else outcome.case.kind}"
    if outcome.case.description:
        head += f" ({outcome.case.description})"
    if decision is None:
        yield f"{head}: error: {outcome.error}"
        return
    line = f"{head}: {_verdict(decision)}"
    if outcome.case.expected is not None:
        line += ", as expected" if outcome.passed else ", NOT as expected"
    if not decision.allowed and decision.reason and outcome.explanation is None:
        line += f": {decision.reason}"
    yield line
    if outcome.explanation is not None:
        yield from (f"    {text}" for text in outcome.explanation.lines())


def _summary(outcomes: Sequence[Outcome]) -> str:
    allowed = sum(1 for o in outcomes if o.decision is not None and o.decision.allowed)
    errors = sum(1 for o in outcomes if o.decision is None)
    denied = len(outcomes) - allowed - errors
    text = f"{len(outcomes)} requests: {allowed} allowed, {denied} denied"
    if errors:
        text += f", {errors} failed"
    if any(o.case.expected is not None for o in outcomes):
        text += f"; {sum(o.passed for o in outcomes)} of {len(outcomes)} as expected"
    return text


def _json_report(outcomes: Sequence[Outcome], policy: AgentPolicy) -> dict[str, Any]:
    results = []
    for outcome in outcomes:
        kind = outcome.decision.kind if outcome.decision else outcome.case.kind
        entry: dict[str, Any] = {"index": outcome.index, "kind": kind}
        if outcome.case.description:
            entry["description"] = outcome.case.description
        if outcome.case.expected is not None:
            entry["expected"] = outcome.case.expected
        entry["passed"] = outcome.passed
        if outcome.decision is None:
            entry["error"] = outcome.error
        else:
            entry["allowed"] = outcome.decision.allowed
            entry["overridden"] = outcome.decision.overridden
            entry["prints"] = list(outcome.decision.prints)
            entry["ops"] = list(outcome.decision.ops)
        if outcome.explanation is not None:
            entry["explanation"] = outcome.explanation.to_json()
        results.append(entry)
    return {"results": results, "state": policy.state}
