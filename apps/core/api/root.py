from functools import cache

from drf_spectacular.generators import EndpointEnumerator
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView


@cache
def collections(prefix: str) -> tuple[str, ...]:
    """The paths under ``prefix`` that take no parameter (the collections and reports), as the
    schema generator finds them: a new endpoint is listed by itself."""
    paths = {path for path, _, _, _ in EndpointEnumerator().get_api_endpoints()}
    return tuple(sorted(p for p in paths if p.startswith(prefix) and p != prefix and "{" not in p))


class ApiRootSerializer(serializers.Serializer):
    schema = serializers.URLField(help_text="The OpenAPI schema.")
    docs = serializers.URLField(help_text="The schema, readable (Swagger UI).")
    endpoints = serializers.DictField(child=serializers.URLField(), help_text="Each collection's name and URL.")


class ApiRootView(APIView):
    """The API's entry point: where its schema and docs are, and the URL of every collection."""

    prefix = "/api/v1/"

    @extend_schema(
        summary="The API root: the schema, the docs and every collection",
        responses=ApiRootSerializer,
    )
    def get(self, request: Request) -> Response:
        endpoints = {
            path.removeprefix(self.prefix): request.build_absolute_uri(path) for path in collections(self.prefix)
        }
        return Response(
            {
                "schema": reverse("schema", request=request),
                "docs": reverse("api-docs", request=request),
                "endpoints": endpoints,
            }
        )
