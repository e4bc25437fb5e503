from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "apps.inventory"
    label = "inventory"
    verbose_name = "Fleet inventory"

    def ready(self) -> None:
        from apps.inventory import signals  # noqa: F401  (connects the link-path receivers)
