"""Settings from the environment: production defaults pass Django's deployment checklist, a bad value
stops the process with an error naming the variable, secrets can come from files, and every variable
is documented."""

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from controlplane.celery import app as celery_app

BASE_DIR = Path(__file__).resolve().parent.parent
# settings.py and the parts it calls (settings_database.py, settings_celery.py, ...), and the readers.
SETTINGS_FILES = [*sorted((BASE_DIR / "controlplane").glob("settings*.py")), BASE_DIR / "controlplane" / "env.py"]
PRODUCTION_SECRET_KEY = "Zq3vW8-production-like-secret-key-with-enough-length-and-variety-x7Tb2"


def variables_read_by_settings() -> set[str]:
    """Every NAME passed to an env_* reader (or os.environ) in the settings modules."""
    pattern = re.compile(r"""(?:env_(?:raw|str|bool|int|list)\(|os\.environ\.get\()\s*"([A-Z][A-Z0-9_]*)\"""")
    return {name for path in SETTINGS_FILES for name in pattern.findall(path.read_text(encoding="utf-8"))}


@pytest.fixture
def environment(monkeypatch, tmp_path) -> pytest.MonkeyPatch:
    """A production environment: a secret key and nothing else the settings read (tests add to it)."""
    for name in variables_read_by_settings():
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)
    monkeypatch.setenv("CONTROLPLANE_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("SECRET_KEY", PRODUCTION_SECRET_KEY)
    return monkeypatch


def load_settings() -> dict[str, Any]:
    return runpy.run_path(str(BASE_DIR / "controlplane" / "settings.py"))


def test_it_finds_the_variables_it_documents():
    # Guards the scanner below: if the settings stopped using the env_* readers it would find nothing,
    # and it must read the parts settings.py calls too (the database's and Celery's).
    expected = {"SECRET_KEY", "DEBUG", "DATABASE_URL", "REDIS_URL", "ALLOWED_HOSTS"}
    assert expected | {"DATABASE_CONN_MAX_AGE", "CELERY_VISIBILITY_TIMEOUT_S"} <= variables_read_by_settings()


def test_it_documents_every_environment_variable_in_the_readme():
    readme = (BASE_DIR / "README.md").read_text(encoding="utf-8")
    undocumented = {name for name in variables_read_by_settings() if f"`{name}`" not in readme}
    assert not undocumented, f"add these to the configuration table in README.md: {sorted(undocumented)}"


def test_it_passes_the_deployment_checklist_with_production_settings(tmp_path):
    clean_environment = {
        "PATH": os.environ["PATH"],
        "CONTROLPLANE_VAR_DIR": str(tmp_path),
        "SECRET_KEY": PRODUCTION_SECRET_KEY,
        "ALLOWED_HOSTS": "controlplane.example.com",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=BASE_DIR,
        env=clean_environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_it_defaults_to_production_behaviour(environment):
    loaded = load_settings()
    assert loaded["DEBUG"] is False
    assert loaded["SECURE_SSL_REDIRECT"] is True
    assert loaded["SESSION_COOKIE_SECURE"] is True
    assert loaded["CSRF_COOKIE_SECURE"] is True
    assert loaded["SECURE_HSTS_SECONDS"] == 31_536_000


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DEBUG", "maybe"),
        ("SECURE_COOKIES", "sometimes"),
        ("DATABASE_CONN_MAX_AGE", "-1"),
        ("DATABASE_CONN_MAX_AGE", "forever"),
        ("SECURE_HSTS_SECONDS", "1.5"),
        ("AUDIT_LOG_RETENTION_DAYS", "0"),
        ("DATA_UPLOAD_MAX_MEMORY_SIZE", "10"),
        ("DATABASE_URL", "mysql-ish://nowhere"),
    ],
)
def test_it_refuses_a_bad_value_naming_the_variable(environment, name, value):
    environment.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=name):
        load_settings()


def test_it_refuses_to_start_without_a_secret_key_unless_debugging(environment):
    environment.delenv("SECRET_KEY")
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY"):
        load_settings()
    environment.setenv("DEBUG", "true")
    assert load_settings()["SECRET_KEY"]


def test_it_refuses_an_unreadable_secret_file_naming_the_variable(environment, tmp_path):
    environment.setenv("SECRET_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY_FILE"):
        load_settings()


def test_it_reads_secrets_from_files(environment, tmp_path):
    (tmp_path / "secret_key").write_text("key-from-a-file\n")
    (tmp_path / "database_url").write_text("postgres://cp:s3cret@db.internal:5432/controlplane\n")
    environment.setenv("SECRET_KEY_FILE", str(tmp_path / "secret_key"))
    environment.setenv("DATABASE_URL_FILE", str(tmp_path / "database_url"))
    loaded = load_settings()
    assert loaded["SECRET_KEY"] == "key-from-a-file"
    assert loaded["DATABASES"]["default"]["HOST"] == "db.internal"
    assert loaded["DATABASES"]["default"]["PASSWORD"] == "s3cret"


def test_it_turns_the_sqlite_database_into_one_that_several_processes_can_share(environment, tmp_path):
    database = load_settings()["DATABASES"]["default"]
    assert database["NAME"] == str(tmp_path / "controlplane.sqlite3")
    assert "journal_mode=WAL" in database["OPTIONS"]["init_command"]
    assert database["CONN_MAX_AGE"] == 0


def test_postgresql_connections_come_from_a_pool_unless_told_otherwise(environment):
    environment.setenv("DATABASE_URL", "postgres://cp@db.internal:5432/cp")
    database = load_settings()["DATABASES"]["default"]
    assert database["OPTIONS"]["pool"] == {"min_size": 2, "max_size": 20, "timeout": 10}
    assert database["CONN_MAX_AGE"] == 0  # a pooled connection goes back when Django closes it

    environment.setenv("DATABASE_POOL_MAX_SIZE", "1")
    assert load_settings()["DATABASES"]["default"]["OPTIONS"]["pool"]["min_size"] == 1

    environment.setenv("DATABASE_POOL", "false")
    environment.setenv("DATABASE_CONN_MAX_AGE", "30")
    database = load_settings()["DATABASES"]["default"]
    assert "pool" not in database.get("OPTIONS", {})
    assert database["CONN_MAX_AGE"] == 30


def test_it_declares_the_queue_of_every_task():
    celery_app.loader.import_default_modules()
    declared = {queue.name for queue in settings.CELERY_TASK_QUEUES}
    assert settings.CELERY_TASK_DEFAULT_QUEUE in declared
    undeclared = {}
    for name, task in celery_app.tasks.items():
        if name.startswith("celery."):
            continue
        queue = celery_app.amqp.router.route({}, name, task_type=task)["queue"].name
        if queue not in declared:
            undeclared[name] = queue
    assert not undeclared, f"declare these queues in CELERY_TASK_QUEUES: {undeclared}"


@pytest.mark.django_db
def test_it_has_a_migration_for_every_model_change():
    try:
        call_command("makemigrations", "--check", "--dry-run", verbosity=0)
    except SystemExit as exit_:
        pytest.fail(f"models changed without a migration (makemigrations --check exited {exit_.code})")
