from pathlib import Path
from typing import Any

import msgspec
from django.core.management.base import BaseCommand, CommandParser

from controlplane.demo_seed import seed_demo


class Command(BaseCommand):
    help = (
        "Prepare the demo (make demo runs it): migrate, collect static files, import and price the example "
        "inventory into an empty database, reset the admin account, issue the simulated fleet's credentials. "
        "Progress goes to stderr; stdout gets one JSON document: the admin's password and API token, and how "
        "many fleet nodes have a credential."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--agent-ws-url",
            required=True,
            help="The demo's agent gateway (ws://.../ws/agent), for the fleet's agents.",
        )
        parser.add_argument(
            "--fleet-credentials-file", required=True, type=Path, help="Where to write the fleet's credentials (0600)."
        )

    def handle(self, *args: Any, agent_ws_url: str, fleet_credentials_file: Path, **options: Any) -> None:
        seeded = seed_demo(
            agent_ws_url=agent_ws_url, fleet_credentials_file=fleet_credentials_file, say=self.stderr.write
        )
        self.stdout.write(msgspec.json.encode(seeded).decode())
