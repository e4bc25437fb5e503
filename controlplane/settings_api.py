"""The REST API's settings (Django REST framework) and its OpenAPI schema's (drf-spectacular): fixed,
nothing read from the environment."""

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["apps.accounts.permissions.RolePermission"],
    "DEFAULT_FILTER_BACKENDS": [
        "apps.core.api.filters.FilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "apps.core.api.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "apps.core.api.exceptions.exception_handler",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Control Plane API",
    # Over 150 operations: the docs open with their tags folded (rendering every operation at once
    # takes seconds on a busy machine), a filter box, and links that open one operation.
    "SWAGGER_UI_SETTINGS": {"docExpansion": "none", "filter": True, "deepLinking": True},
    "DESCRIPTION": (
        "Inventory, lifecycle, price book and audit log of GPU clusters. Authenticate with an API "
        "token: `Authorization: Bearer <token>`."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "ENUM_NAME_OVERRIDES": {
        "LifecycleEnum": "apps.inventory.choices.Lifecycle",
        "PortKindEnum": "apps.inventory.choices.PortKind",
        "FabricKindEnum": "apps.inventory.choices.FabricKind",
        "FailureKindEnum": "apps.failures.choices.FailureKind",
        "LinkStateEnum": "apps.inventory.choices.LinkState",
        "RoleEnum": "apps.accounts.roles.Role",
        "EnrollmentTokenStateEnum": "apps.gateway.choices.EnrollmentTokenState",
        "GatewayErrorCodeEnum": "apps.gateway.choices.CounterCode",
        "RunStateEnum": "apps.jobs.choices.RunState",
        "CommandStateEnum": "apps.jobs.choices.CommandState",
        "CommandOutcomeEnum": "apps.jobs.choices.CommandOutcome",
        "CheckEnum": "apps.jobs.choices.CHECK_CHOICES",
        "BurnInNodeStateEnum": "apps.burnin.choices.NodeState",
        "BurnInOutcomeEnum": "apps.burnin.choices.Outcome",
    },
}
