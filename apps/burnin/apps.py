from django.apps import AppConfig


class BurninConfig(AppConfig):
    name = "apps.burnin"
    label = "burnin"
    verbose_name = "Burn-in"

    def ready(self) -> None:
        from django.db.models.signals import post_save

        from apps.burnin import metrics, subscribers
        from apps.burnin.node_action import start_node_burn_in
        from apps.core import events
        from apps.core.metrics import registry
        from apps.inventory.actions import performs
        from apps.inventory.models import Cluster

        events.subscribe(events.CommandsChanged, subscribers.commands_changed)
        events.subscribe(events.NodeChanged, subscribers.node_changed)
        post_save.connect(subscribers.cluster_saved, sender=Cluster, dispatch_uid="burnin.cluster_breaker")
        registry.register(metrics.collect)  # each cluster's quarantine breaker
        performs("start_burn_in", start_node_burn_in)  # the node action starts a real burn-in
