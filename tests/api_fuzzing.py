"""Schema-driven fuzzing of the REST API with schemathesis, against a server that answers over HTTP.

Every operation of the server's own OpenAPI schema is called with a bounded number of examples
Hypothesis draws from it, half of them valid and half breaking the schema on purpose, some on the
real rows the path parameters name (found by the caller), the rest on whatever id it draws. Each
answer is checked: no 5xx, the body matches what the schema declares for its status, and an error
is JSON. The findings are counted, not raised, so one run reports everything it saw.

tests/test_api_fuzz.py runs it in the suite against a live test server with data, as each role. Run
it by hand against a running installation (``make demo``) with a token of each role:

    python -m tests.api_fuzzing --server http://127.0.0.1:8000 --token cpt_... [--examples 25]

The token's user and the token itself are never the ones its writes name (a fuzzing admin would
otherwise revoke its own token or demote itself half-way); DELETEs run last.
"""

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import response_schema_conformance

# Operations whose path names an account: always called on the row path_values gives (never the
# fuzzer's own), not on a drawn id.
PINNED = frozenset({"/api/v1/users/{id}", "/api/v1/tokens/{id}", "/api/v1/tokens/{id}/revoke"})
METHOD_ORDER = {"get": 0, "head": 0, "options": 0, "post": 1, "put": 2, "patch": 2, "delete": 3}


@dataclass
class Finding:
    kind: str  # "server error", "schema violation", "not JSON"
    operation: str
    request: str
    status: int
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.operation} -> {self.status}\n  {self.request}\n  {self.detail}"


@dataclass
class Report:
    label: str
    operations: set[str] = field(default_factory=set)
    requests: int = 0
    statuses: Counter = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(1 for f in self.findings if f.kind == kind)

    def summary(self) -> dict[str, Any]:
        return {
            "as": self.label,
            "operations": len(self.operations),
            "requests": self.requests,
            "server_errors": self.count("server error"),
            "schema_violations": self.count("schema violation"),
            "not_json_errors": self.count("not JSON"),
            "statuses": dict(sorted(self.statuses.items())),
        }

    def details(self, limit: int = 20) -> str:
        seen: dict[tuple[str, str], Finding] = {}
        for finding in self.findings:  # one of each kind per operation
            seen.setdefault((finding.kind, finding.operation), finding)
        shown = list(seen.values())[:limit]
        return "\n".join(str(f) for f in shown) + (f"\n... and {len(seen) - limit} more" if len(seen) > limit else "")


def load_schema(server: str, session: requests.Session) -> Any:
    response = session.get(f"{server}/api/schema/", headers={"Accept": "application/vnd.oai.openapi+json"})
    response.raise_for_status()
    return schemathesis.openapi.from_dict(response.json())


def operations(schema: Any) -> list[Any]:
    found = [result.ok() for result in schema.get_all_operations()]
    return sorted(found, key=lambda op: (METHOD_ORDER.get(op.method.lower(), 1), op.path, op.method))


def strategy_for(operation: Any, real: dict[str, str]) -> st.SearchStrategy | None:
    """Valid and invalid requests, on the real rows the path names and (unless pinned) on drawn ids;
    None for a pinned operation with no row to call it on."""
    drawn = [operation.as_strategy(mode) for mode in GenerationMode]
    if "{" not in operation.path:
        return st.one_of(drawn)
    on_real_rows = [operation.as_strategy(mode, path_parameters=real) for mode in GenerationMode] if real else []
    if operation.path in PINNED:
        return st.one_of(on_real_rows) if on_real_rows else None
    return st.one_of(*on_real_rows, *drawn)


def _describe(case: Any, response: Any) -> str:
    request = response.request
    body = request.body if isinstance(request.body, str | type(None)) else request.body[:300].decode(errors="replace")
    return f"{request.method} {request.url} {(body or '')[:300]}"


def check(case: Any, response: Any, operation: str, report: Report) -> None:
    report.requests += 1
    report.statuses[response.status_code] += 1
    where = _describe(case, response)
    for kind, function in (("server error", not_a_server_error), ("schema violation", response_schema_conformance)):
        try:
            case.validate_response(response, checks=[function])
        except FailureGroup as failures:
            detail = "; ".join(
                f"{f.title}: {f.message.splitlines()[0] if f.message else ''}" for f in failures.exceptions
            )
            body = response.content[:300].decode(errors="replace")
            report.findings.append(Finding(kind, operation, where, response.status_code, f"{detail} {body}"))
    content_type = response.headers.get("content-type", [""])[0]
    if response.status_code >= 400 and not content_type.startswith("application/json"):
        report.findings.append(Finding("not JSON", operation, where, response.status_code, content_type))


def run_examples(
    operation: Any,
    strategy: st.SearchStrategy,
    *,
    server: str,
    session: requests.Session,
    examples: int,
    report: Report,
) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,  # the same requests every run: a finding in CI is reproducible
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def call(case: Any) -> None:
        response = case.call(base_url=server, session=session, timeout=60)
        check(case, response, operation.label, report)

    call()


def fuzz(
    server: str,
    token: str,
    *,
    examples: int,
    path_values: Callable[[str], dict[str, str]],
    label: str,
) -> Report:
    """Fuzz every operation of the server's schema as the token's role."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    schema = load_schema(server, session)
    report = Report(label)
    chosen = operations(schema)
    real = {operation.path: path_values(operation.path) for operation in chosen}  # before any write
    for operation in chosen:
        strategy = strategy_for(operation, real[operation.path])
        if strategy is None:
            continue
        report.operations.add(operation.label)

        run_examples(operation, strategy, server=server, session=session, examples=examples, report=report)
    return report


def discovered_path_values(server: str, session: requests.Session) -> Callable[[str], dict[str, str]]:
    """For a running installation: the first row of each collection (GET), never the caller's own
    account or token."""
    me = session.get(f"{server}/api/v1/me").json()
    cache: dict[str, Any] = {}

    def first(collection: str, keys: tuple[str, ...]) -> str | None:
        if collection not in cache:
            response = session.get(f"{server}{collection}")
            body = response.json() if response.ok else []
            cache[collection] = body.get("results", []) if isinstance(body, dict) else body
        rows = [row for row in cache[collection] if not _is_own(row, collection, me, session)]
        found = [row[key] for row in rows[:1] for key in keys if key in row]
        return str(found[0]) if found else None

    def values(path: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for name in ("id", "node", "code"):
            if f"{{{name}}}" not in path:
                continue
            collection = path.split(f"/{{{name}}}")[0]
            if collection.count("/") > 3:  # /api/v1/costs/clusters/{id}: the resource named last
                collection = "/api/v1/" + collection.rsplit("/", 1)[1]
            value = first(collection, ("id", name))
            if value is not None:
                found[name] = value
        return found

    return values


def _is_own(row: dict[str, Any], collection: str, me: dict[str, Any], session: requests.Session) -> bool:
    if collection.endswith("/users"):
        return row.get("id") == me.get("id")
    if collection.endswith("/tokens"):
        presented = session.headers["Authorization"].removeprefix("Bearer ")
        return presented.startswith(str(row.get("key_prefix")))
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description="Fuzz a running control plane's API with schemathesis.")
    parser.add_argument("--server", default="http://127.0.0.1:8000")
    parser.add_argument("--token", action="append", required=True, help="An API token; repeat for each role.")
    parser.add_argument("--examples", type=int, default=25, help="Examples per operation (default 25).")
    arguments = parser.parse_args()
    failed = False
    for token in arguments.token:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {token}"
        role = session.get(f"{arguments.server}/api/v1/me").json().get("effective_role", "?")
        values = discovered_path_values(arguments.server, session)
        report = fuzz(arguments.server, token, examples=arguments.examples, path_values=values, label=role)
        print(json.dumps(report.summary()))
        if report.findings:
            print(report.details(), file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
