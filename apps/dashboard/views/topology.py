from apps.dashboard.views.base import DashboardPage


class TopologyPage(DashboardPage):
    nav = "topology"
    template_name = "dashboard/topology.html"


class RacksPage(DashboardPage):
    nav = "racks"
    template_name = "dashboard/racks.html"
