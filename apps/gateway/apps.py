from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "apps.gateway"
    label = "gateway"
    verbose_name = "Agent gateway"
