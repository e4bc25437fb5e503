from rest_framework import pagination


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    """NetBox-style ``?limit=&offset=`` pages; automation asks for up to 1,000 rows at a time."""

    default_limit = 100
    max_limit = 1000
