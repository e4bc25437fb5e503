from apps.dashboard.views.base import DashboardPage


class FailuresPage(DashboardPage):
    nav = "failures"
    template_name = "dashboard/failures.html"
