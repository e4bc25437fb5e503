"""The shipped suites (apps/burnin/defaults.py): quick, standard and extended; and a closed quarantine
breaker for every cluster that exists (new clusters get theirs when they are created)."""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from apps.burnin.defaults import SUITES


def add_suites_and_breakers(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    suite = apps.get_model("burnin", "Suite")
    for name, fields in SUITES.items():
        suite.objects.update_or_create(name=name, defaults={**fields, "builtin": True})
    breaker = apps.get_model("burnin", "QuarantineBreaker")
    for cluster in apps.get_model("inventory", "Cluster").objects.all():
        breaker.objects.get_or_create(cluster=cluster)


class Migration(migrations.Migration):
    dependencies = [("burnin", "0001_initial")]

    operations = [migrations.RunPython(add_suites_and_breakers, migrations.RunPython.noop)]
