"""The bottom layer of the Django apps: what every app may use and none of them owns, namely the
API's error shape and pagination, the model serializer that runs ``clean()``, and the secrets of
tokens and credentials. It imports no other app of the project (tests/core/test_layering.py), so
anything that needs roles or the audit log (the base API viewset) lives in apps/accounts instead.
"""
