"""Reading /metrics in tests: the registry's exposition, parsed as Prometheus parses it."""

from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from apps.core.metrics import Scrape, registry


def exposition(*clusters: str) -> str:
    """What /metrics answers now (limited to ``clusters``, if any)."""
    return registry.render(Scrape(timezone.now(), frozenset(clusters)))


def families(text: str) -> dict:
    """By name, and a counter under its samples' ``_total`` name too (the parser drops the suffix)."""
    parsed = {family.name: family for family in text_string_to_metric_families(text)}
    return parsed | {s.name: family for family in parsed.values() for s in family.samples}


def scrape(*clusters: str) -> dict:
    return families(exposition(*clusters))


def series(parsed: dict, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    """Family ``name``'s samples by the values of the labels ``keys``."""
    return {tuple(s.labels.get(key, "") for key in keys): s.value for s in parsed[name].samples if s.name == name}
