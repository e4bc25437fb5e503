from apps.dashboard.views.base import DashboardPage


class ReliabilityPage(DashboardPage):
    nav = "reliability"
    template_name = "dashboard/reliability.html"
