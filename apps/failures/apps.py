from django.apps import AppConfig


class FailuresConfig(AppConfig):
    name = "apps.failures"
    label = "failures"
    verbose_name = "Failures and stragglers"
