"""Settings, all read from the environment (see the configuration table in README.md).

Defaults are safe for production: DEBUG off, secure cookies when served over HTTPS, and no secret
key unless one is given. The one-command demo (``make demo``) supplies its own development values.
"""

from datetime import timedelta
from pathlib import Path

from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from controlplane import settings_api, settings_celery, settings_database
from controlplane.env import env_bool, env_int, env_list, env_raw, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("CONTROLPLANE_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)

SECRET_KEY = env_raw("SECRET_KEY") or ""
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set SECRET_KEY (or SECRET_KEY_FILE), or DEBUG=true for development."
        )
    SECRET_KEY = "insecure-development-key-never-use-in-production"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "controlplane.admin_site.AdminConfig",  # django.contrib.admin with the throttled sign-in
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served from our static files: no CDN at run time
    "django_celery_beat",
    "csp",
    "channels",
    "apps.accounts",
    "apps.inventory",
    "apps.costs",
    "apps.failures",
    "apps.telemetry",
    "apps.jobs",
    "apps.burnin",
    "apps.dashboard",
    "apps.gateway",
    "controlplane",  # the project's own management commands: seed_demo, which make demo runs
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "controlplane.csp.ContentSecurityPolicyMiddleware",
    "controlplane.http.StaticFiles",  # servestatic's files, on the request's thread (controlplane/http.py)
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "apps.accounts.middleware.AuditLogMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "apps.core.api.middleware.release_rendered_api_responses",
]

ROOT_URLCONF = "controlplane.urls"
ASGI_APPLICATION = "controlplane.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# SQLite is the embedded default for the one-command demo; PostgreSQL in production and CI
# (controlplane/settings_database.py: the connection's age, SQLite's WAL mode, the test database).
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'controlplane.sqlite3'}")
DATABASES = settings_database.databases(DATABASE_URL, VAR_DIR)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_USER_MODEL = "accounts.User"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "servestatic.storage.CompressedManifestStaticFilesStorage"},
}
SERVESTATIC_USE_FINDERS = DEBUG

# Redis: channel layer and Celery broker. The demo starts a local one when none is configured.
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
# No socket timeout on the channel layer's connections: redis-py 8 defaults it to 5 s, the length of
# channels_redis's blocking BZPOPMIN, so every idle consumer died with "Timeout reading" every ~5 s;
# and with any timeout redis-py sends through asyncio.wait_for, which on Python 3.11 can swallow the
# cancellation of a closing consumer, leaving it looping forever. Keepalive finds a dead Redis instead.
# controlplane/channel_layers.py: channels_redis's layer with a pool that waits for a free connection.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "controlplane.channel_layers.RedisChannelLayer",
        "CONFIG": {
            "hosts": [{"address": REDIS_URL, "socket_timeout": None, "socket_keepalive": True}],
            "prefix": env_str("CHANNEL_LAYER_PREFIX", "controlplane"),
            # channels_redis drops messages past a channel's capacity (default 100): one server
            # process holds a thousand agent sockets and the browsers' streams.
            "capacity": 1000,
            # Every consumer's channel of a process ("specific.<process>!<consumer>") is one Redis key,
            # whose capacity is for all of them together: one command to a thousand agents on one
            # process filled it, and past it channels_redis dropped the rest (a group_send) or refused
            # them (a send). Messages still expire after a minute unread (channels_redis's expiry).
            "channel_capacity": {"specific.*": 50_000},
        },
    }
}

# Node agents (apps/gateway). A silent node is marked unreachable within AGENT_UNREACHABLE_AFTER_S
# by a sweep every AGENT_LIVENESS_SWEEP_S (apps/gateway/liveness.py explains the arithmetic).
AGENT_ENROLLMENT_TOKEN_TTL = timedelta(hours=env_int("AGENT_ENROLLMENT_TOKEN_TTL_H", 24, minimum=1))
AGENT_TELEMETRY_INTERVAL_S = env_int("AGENT_TELEMETRY_INTERVAL_S", 1, minimum=1)
AGENT_WS_URL = env_str("AGENT_WS_URL", "")  # what enrollment tells agents; default: this server's /ws/agent
AGENT_UNREACHABLE_AFTER_S = env_int("AGENT_UNREACHABLE_AFTER_S", 15, minimum=5)
AGENT_LIVENESS_SWEEP_S = env_int("AGENT_LIVENESS_SWEEP_S", 5, minimum=1)
# An agent socket that earns AGENT_ERROR_LIMIT error replies within AGENT_ERROR_WINDOW_S is closed
# (apps/gateway/guards.py).
AGENT_ERROR_LIMIT = env_int("AGENT_ERROR_LIMIT", 100, minimum=1)
AGENT_ERROR_WINDOW_S = env_int("AGENT_ERROR_WINDOW_S", 10, minimum=1)
# Samples and events stamped further ahead of the server's clock than this are refused, and the node
# gets a clock-skew failure (apps/gateway/guards.py).
AGENT_MAX_CLOCK_SKEW_S = env_int("AGENT_MAX_CLOCK_SKEW_S", 300, minimum=1)
if AGENT_UNREACHABLE_AFTER_S - AGENT_LIVENESS_SWEEP_S < 4:
    raise ImproperlyConfigured("AGENT_UNREACHABLE_AFTER_S must exceed AGENT_LIVENESS_SWEEP_S by at least 4 s.")

# Runs and commands (apps/jobs): a command unanswered for JOBS_ACK_TIMEOUT_S is sent again; the sweep
# that does whatever a lost task left undone runs every JOBS_SWEEP_S (apps/jobs/dispatch.py).
JOBS_ACK_TIMEOUT_S = env_int("JOBS_ACK_TIMEOUT_S", 10, minimum=1)
JOBS_SWEEP_S = env_int("JOBS_SWEEP_S", 5, minimum=1)

# Burn-ins (apps/burnin, docs/burn-in.md): automation quarantines at most QUARANTINE_BREAKER_PERCENT of a
# cluster's nodes within QUARANTINE_BREAKER_WINDOW_S before its circuit breaker opens and a person decides;
# BURNIN_ON_ENROLLMENT names the suite a new node runs when its agent first comes online (empty: none).
QUARANTINE_BREAKER_PERCENT = env_int("QUARANTINE_BREAKER_PERCENT", 10, minimum=1)
QUARANTINE_BREAKER_WINDOW_S = env_int("QUARANTINE_BREAKER_WINDOW_S", 86400, minimum=60)
BURNIN_ON_ENROLLMENT = env_str("BURNIN_ON_ENROLLMENT", "")
BURNIN_SWEEP_S = env_int("BURNIN_SWEEP_S", 30, minimum=5)

# Celery: the broker on Redis, a queue for each app's tasks, beat's schedule (controlplane/settings_celery.py).
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_BROKER_TRANSPORT = settings_celery.broker_transport(CELERY_BROKER_URL)
CELERY_BROKER_TRANSPORT_OPTIONS = settings_celery.broker_transport_options()
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_QUEUES = settings_celery.TASK_QUEUES
CELERY_TASK_ROUTES = settings_celery.TASK_ROUTES
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Each worker process reserves one message at a time: with acks_late, a message reserved by a busy
# process waits for it (and is lost to the others until the visibility timeout if the worker dies).
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = 300
CELERY_TASK_TIME_LIMIT = 360
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_SCHEDULE = settings_celery.beat_schedule(
    liveness_sweep_s=AGENT_LIVENESS_SWEEP_S, jobs_sweep_s=JOBS_SWEEP_S, burnin_sweep_s=BURNIN_SWEEP_S
)
CELERY_TIMEZONE = TIME_ZONE

# The REST API and its OpenAPI schema (controlplane/settings_api.py).
REST_FRAMEWORK = settings_api.REST_FRAMEWORK
SPECTACULAR_SETTINGS = settings_api.SPECTACULAR_SETTINGS

# Production hardening; all on by default, each can be turned off behind a TLS-terminating proxy
# that already does it.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("TRUST_X_FORWARDED_PROTO", False) else None
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^metrics$"]
TRUST_X_FORWARDED_FOR = env_bool("TRUST_X_FORWARDED_FOR", False)
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = False
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Every response's Content-Security-Policy (controlplane/csp.py adds the page's own WebSocket origin to
# connect-src): everything from this origin only, no inline script or style, no eval, no framing.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [NONE],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],  # the API docs' icons are data: SVGs in their stylesheet
        "font-src": [SELF],
        "connect-src": [SELF],
        "worker-src": [SELF],
        "manifest-src": [SELF],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
        "object-src": [NONE],
    }
}
SILENCED_SYSTEM_CHECKS = ["security.W021"]  # HSTS preload is a decision for each site's domain.

DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 20 * 1024 * 1024, minimum=1024)

AUDIT_LOG_RETENTION_DAYS = env_int("AUDIT_LOG_RETENTION_DAYS", 400, minimum=1)
# Repeated refusals of anonymous callers share one audit row per address, action, status and window.
AUDIT_REFUSAL_WINDOW_S = env_int("AUDIT_REFUSAL_WINDOW_S", 600, minimum=1)
# Throttles on failed attempts (apps/accounts/throttle.py): this many failures within the lockout's
# length lock the account, or the address, out for that long.
SIGNIN_FAILURES_PER_ACCOUNT = env_int("SIGNIN_FAILURES_PER_ACCOUNT", 5, minimum=1)
SIGNIN_FAILURES_PER_ADDRESS = env_int("SIGNIN_FAILURES_PER_ADDRESS", 20, minimum=1)
SIGNIN_LOCKOUT = timedelta(minutes=env_int("SIGNIN_LOCKOUT_MINUTES", 15, minimum=1))
ENROLLMENT_FAILURES_PER_ADDRESS = env_int("ENROLLMENT_FAILURES_PER_ADDRESS", 10, minimum=1)
ENROLLMENT_LOCKOUT = timedelta(minutes=env_int("ENROLLMENT_LOCKOUT_MINUTES", 15, minimum=1))
API_TOKEN_LAST_USED_RESOLUTION_S = 60

# Telemetry storage (apps/telemetry): retention, ingest batching, /metrics freshness.
TELEMETRY_RAW_RETENTION_HOURS = env_int("TELEMETRY_RAW_RETENTION_HOURS", 48, minimum=1)
TELEMETRY_MINUTE_RETENTION_DAYS = env_int("TELEMETRY_MINUTE_RETENTION_DAYS", 90, minimum=1)
TELEMETRY_FLUSH_INTERVAL_MS = env_int("TELEMETRY_FLUSH_INTERVAL_MS", 250, minimum=10)
TELEMETRY_FLUSH_MAX_ROWS = env_int("TELEMETRY_FLUSH_MAX_ROWS", 20_000, minimum=1)
TELEMETRY_METRICS_MAX_AGE_S = env_int("TELEMETRY_METRICS_MAX_AGE_S", 60, minimum=1)

LOG_LEVEL = env_str("LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
