"""The verbs: each reads its arguments, calls the API and prints, and returns the exit code."""

import argparse
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from cpctl import output
from cpctl.client import ApiError, Client

OK, FAILED, USAGE, CANCELLED, API_ERROR, TIMED_OUT = 0, 1, 2, 3, 4, 5
RUN_FINAL = ("succeeded", "failed", "cancelled")

NODE_COLUMNS: list[output.Column] = [
    ("id", lambda n: n["id"]),
    ("hostname", lambda n: n["hostname"]),
    ("cluster", lambda n: n["cluster_name"]),
    ("type", lambda n: n["node_type_name"]),
    ("lifecycle", lambda n: n["lifecycle"]),
    ("liveness", lambda n: n["liveness"]),
    ("gpus", lambda n: n["gpu_count"]),
    ("last_seen", lambda n: n["last_seen_at"]),
]
NODE_FIELDS = ["id", "hostname", "cluster_name", "node_type_name", "rack_name", "rack_position", "serial",
               "management_address", "lifecycle", "lifecycle_changed_at", "liveness", "last_seen_at", "gpu_count",
               "created_at"]  # fmt: skip
FAILURE_COLUMNS: list[output.Column] = [
    ("id", lambda f: f["id"]),
    ("node", lambda f: f["hostname"]),
    ("gpu", lambda f: f["gpu_index"]),
    ("severity", lambda f: f["severity"]),
    ("state", lambda f: f["state"]),
    ("kind", lambda f: f["kind"]),
    ("title", lambda f: f["title"]),
    ("last_seen", lambda f: f["last_seen"]),
]
RUN_FIELDS = ["id", "kind", "title", "state", "actor", "created_at", "started_at", "finished_at", "deadline",
              "reason", "cancelled_by", "node_count", "command_count", "progress"]  # fmt: skip
COMMAND_COLUMNS: list[output.Column] = [
    ("id", lambda c: c["id"]),
    ("node", lambda c: c["node"]["hostname"]),
    ("step", lambda c: c["sequence"]),
    ("check", lambda c: c["check"]),
    ("state", lambda c: c["state"]),
    ("attempts", lambda c: c["attempts"]),
    ("progress", lambda c: f"{c['fraction']:.0%}" if c["fraction"] is not None else None),
    ("reason", lambda c: c["reason"] or c["progress_message"]),
]
BURN_IN_NODE_COLUMNS: list[output.Column] = [
    ("node", lambda b: b["node"]["hostname"]),
    ("state", lambda b: b["state"]),
    ("outcome", lambda b: b["outcome"]),
    ("reason", lambda b: b["reason"]),
]


@dataclass
class Context:
    client: Client
    out: TextIO
    err: TextIO
    json: bool
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def listing(self, resource: str, columns: list[output.Column], limit: int | None, **filters: Any) -> int:
        """What a list verb prints: the first ``limit`` of the resource's rows that match ``filters``, as a
        table, or JSON."""
        rows = first(self.client.every(resource, **filters), limit)
        if self.json:
            output.as_json(self.out, rows)
        else:
            output.table(self.out, rows, columns)
        return OK


def first(rows: Any, limit: int | None) -> list[dict[str, Any]]:
    taken = []
    for row in rows:
        if limit is not None and len(taken) >= limit:
            break
        taken.append(row)
    return taken


def nodes_list(ctx: Context, args: argparse.Namespace) -> int:
    filters = {"cluster_name": args.cluster, "lifecycle": args.lifecycle, "liveness": args.liveness, "q": args.search}
    return ctx.listing("nodes", NODE_COLUMNS, args.limit, **filters, ordering="hostname")


def node(ctx: Context, name: str) -> dict[str, Any]:
    """The node with this hostname or id."""
    try:
        return ctx.client.get(f"nodes/{urllib.parse.quote(name, safe='')}")
    except ApiError as exc:
        if exc.status == 404:
            raise ApiError(f"No node named {name!r}.", status=404) from exc
        raise


def nodes_show(ctx: Context, args: argparse.Namespace) -> int:
    found = node(ctx, args.node)
    if ctx.json:
        output.as_json(ctx.out, found)
    else:
        output.fields(ctx.out, found, NODE_FIELDS)
    return OK


def failures_list(ctx: Context, args: argparse.Namespace) -> int:
    filters = {"hostname": args.node, "state": args.state, "severity": args.severity, "kind": args.kind,
               "open": "true" if args.open else None, "since": args.since}  # fmt: skip
    return ctx.listing("failures", FAILURE_COLUMNS, args.limit, **filters)


def run_commands(ctx: Context, run_id: int) -> list[dict[str, Any]]:
    return list(ctx.client.every("commands", run=run_id, ordering="sequence"))


def runs_show(ctx: Context, args: argparse.Namespace) -> int:
    run = ctx.client.get(f"runs/{args.run}")
    commands = run_commands(ctx, run["id"])
    if ctx.json:
        output.as_json(ctx.out, {**run, "command_list": commands})
        return OK
    output.fields(ctx.out, {**run, "progress": f"{run['progress']:.0%}"}, RUN_FIELDS)
    ctx.out.write(f"commands    {output.counts_text(run['commands']) or '-'}\n\n")
    output.table(ctx.out, commands, COMMAND_COLUMNS)
    return OK


def runs_cancel(ctx: Context, args: argparse.Namespace) -> int:
    run = ctx.client.post(f"runs/{args.run}/cancel", {"reason": args.reason})
    if ctx.json:
        output.as_json(ctx.out, run)
    else:
        ctx.out.write(f"run {run['id']} {run['state']}: {run['reason'] or 'cancelled'}\n")
    return OK


def runs_logs(ctx: Context, args: argparse.Namespace) -> int:
    """The run's log lines; with ``--follow``, new ones as they come until the run is over."""
    after = 0
    while True:
        lines = ctx.client.get(f"runs/{args.run}/logs", after=after, limit=1000)
        for line in lines:
            if ctx.json:
                output.as_json(ctx.out, line)
            else:
                ctx.out.write(f"{line['at']} {line['node']} {line['check']} {line['level']}: {line['message']}\n")
        ctx.out.flush()
        after = lines[-1]["id"] if lines else after
        if len(lines) == 1000:
            continue
        if not args.follow or ctx.client.get(f"runs/{args.run}")["state"] in RUN_FINAL:
            return OK
        ctx.sleep(args.poll)


def run_exit_code(run: dict[str, Any]) -> int:
    """0: every command succeeded; 3: cancelled, or failed only by commands that expired; 1: failed."""
    if run["state"] == "succeeded":
        return OK
    if run["state"] == "cancelled":
        return CANCELLED
    if run["commands"]["failed"] == 0 and run["commands"]["expired"] > 0:
        return CANCELLED
    return FAILED


class WaitTimedOut(Exception):
    """``--timeout`` passed before the run was over."""


def wait_for_run(ctx: Context, run_id: int, *, poll: float, timeout: float | None, label: str) -> dict[str, Any]:
    """Poll the run until it is over, showing its progress."""
    progress = output.Progress(ctx.err if ctx.json else ctx.out)
    started = ctx.clock()
    try:
        while True:
            run = ctx.client.get(f"runs/{run_id}")
            progress.show(label, run)
            if run["state"] in RUN_FINAL:
                return run
            if timeout is not None and ctx.clock() - started >= timeout:
                raise WaitTimedOut(f"{label} is still {run['state']} after {timeout:g} s; it goes on on the server.")
            ctx.sleep(poll)
    finally:
        progress.done()


def runs_wait(ctx: Context, args: argparse.Namespace) -> int:
    run = wait_for_run(ctx, args.run, poll=args.poll, timeout=args.timeout, label=f"run {args.run}")
    if ctx.json:
        output.as_json(ctx.out, run)
    elif run["reason"]:
        ctx.out.write(f"run {run['id']} {run['state']}: {run['reason']}\n")
    return run_exit_code(run)


def node_ids(ctx: Context, names: list[str]) -> list[int]:
    """Ids of the nodes named (by hostname or id), in the order given; an unknown one is an error."""
    return [node(ctx, name)["id"] for name in names]


def burnin_start(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"suite": args.suite, "into_service": args.into_service}
    if args.nodes:
        body["nodes"] = node_ids(ctx, args.nodes)
    else:
        body["cluster"] = args.cluster
    if args.deadline is not None:
        body["deadline_s"] = args.deadline
    if args.idempotency_key:
        body["idempotency_key"] = args.idempotency_key
    burn_in = ctx.client.post("burn-ins", body)
    label = f"burn-in {burn_in['id']} (run {burn_in['run']})"
    if not args.wait:
        if ctx.json:
            output.as_json(ctx.out, burn_in)
        else:
            ctx.out.write(f"{label} started: {burn_in['node_count']} nodes, suite {burn_in['suite']}\n")
        return OK
    if not ctx.json:
        ctx.out.write(f"{label} started: {burn_in['node_count']} nodes, suite {burn_in['suite']}\n")
    run = wait_for_run(ctx, burn_in["run"], poll=args.poll, timeout=args.timeout, label=label)
    burn_in = judged(ctx, burn_in["id"], poll=args.poll)
    verdicts = list(ctx.client.every("burn-in-nodes", burn_in=burn_in["id"]))
    if ctx.json:
        output.as_json(ctx.out, {"burn_in": burn_in, "run": run, "nodes": verdicts})
    else:
        failed = [row for row in verdicts if row["state"] != "passed"]
        output.table(ctx.out, failed or verdicts, BURN_IN_NODE_COLUMNS)
        counts = output.counts_text(burn_in["nodes"])
        ctx.out.write(f"{label} {run['state']}: {counts}\n")
    code = run_exit_code(run)
    if code == OK and any(row["state"] != "passed" for row in verdicts):
        return FAILED
    return code


def judged(ctx: Context, burn_in_id: int, *, poll: float) -> dict[str, Any]:
    """The burn-in once every node is judged (the judging follows the run's end by a moment)."""
    while True:
        burn_in = ctx.client.get(f"burn-ins/{burn_in_id}")
        if not burn_in["nodes"].get("testing"):
            return burn_in
        ctx.sleep(poll)
