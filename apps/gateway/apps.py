from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "apps.gateway"
    label = "gateway"
    verbose_name = "Agent gateway"

    def ready(self) -> None:
        from apps.core import events
        from apps.core.metrics import registry
        from apps.core.process import process
        from apps.gateway import metrics
        from apps.gateway.bookkeeping import bookkeepers, bookkeeping_thread
        from apps.gateway.consumers import inventory_thread
        from apps.gateway.push import deliver_commands

        # What the gateway holds while a server process runs (apps/core/process.py): the bookkeepers
        # write what they noted, then their thread and the inventory thread close their connections.
        process.add(bookkeepers)
        process.add(bookkeeping_thread)
        process.add(inventory_thread)
        # Commands and cancels for agents (apps/jobs), once committed, to their nodes' sockets.
        events.subscribe(events.CommandsDispatched, deliver_commands)
        registry.register(metrics.collect)  # what the gateway refused, and the agents' buffers, in /metrics
        registry.register(metrics.collect_before_a_node, scope="control_plane")
