from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "apps.inventory"
    label = "inventory"
    verbose_name = "Fleet inventory"

    def ready(self) -> None:
        from apps.core.metrics import registry
        from apps.inventory import (
            metrics,
            signals,  # noqa: F401  (connects the link-path receivers)
        )

        registry.register(metrics.collect)
