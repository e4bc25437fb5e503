from django.contrib.admin.apps import AdminConfig as DjangoAdminConfig


class AdminConfig(DjangoAdminConfig):
    """django.contrib.admin with the site whose sign-in is throttled and audited (apps/accounts/signin.py)."""

    default_site = "apps.accounts.signin.AdminSite"
