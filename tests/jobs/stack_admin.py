"""What a fault test does in the stack's own database, as a process of its own (the test's Django is
bound to the test database): ``seed`` the nodes, their credentials and a viewer's token, ``launch`` a
run of stand-in checks. Each prints one JSON line.

    python -m tests.jobs.stack_admin seed --nodes 3
    python -m tests.jobs.stack_admin launch --nodes 1 2 3 --steps 3 --sleep 2 --marker /tmp/runs.txt
"""

import argparse
import json
import os
import sys
from datetime import timedelta


def main(argv: list[str]) -> dict[str, object]:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    seed = commands.add_parser("seed")
    seed.add_argument("--nodes", type=int, required=True)
    launch = commands.add_parser("launch")
    launch.add_argument("--nodes", type=int, nargs="+", required=True)
    launch.add_argument("--steps", type=int, required=True)
    launch.add_argument("--sleep", type=float, required=True)
    launch.add_argument("--marker", required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    return _seed(args.nodes) if args.command == "seed" else _launch(args.nodes, args.steps, args.sleep, args.marker)


def _seed(count: int) -> dict[str, object]:
    from apps.accounts.models import ApiToken, User
    from apps.gateway.models import NodeCredential
    from tests import factories

    cluster, node_type = factories.cluster("faults"), factories.node_type("faults", nics=1, gpus=1)
    nodes = []
    for index in range(count):
        node = factories.node(cluster, node_type, f"fault-{index:03d}")
        nodes.append({"node_id": node.pk, "hostname": node.hostname, "credential": NodeCredential.issue(node)[1]})
    viewer = User.objects.create(username="fault-viewer", role="viewer")
    return {"nodes": nodes, "token": ApiToken.issue(user=viewer, name="faults", role="viewer")[1]}


def _launch(node_ids: list[int], steps: int, sleep_s: float, marker: str) -> dict[str, object]:
    from django.utils import timezone

    from apps.inventory.models import Node
    from apps.jobs.models import Run, Step

    # Alternately invasive and not, the stand-in's parameters (no real check's: past the API's checks).
    checks = ["storage", "health"]
    run = Run.objects.launch(
        nodes=list(Node.objects.filter(pk__in=node_ids)),
        steps=[Step(checks[i % 2], {"sleep_s": sleep_s, "marker": marker}, time_limit_s=120) for i in range(steps)],
        deadline=timezone.now() + timedelta(minutes=10),
        actor="fault-test",
    )
    return {"run": run.pk}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
