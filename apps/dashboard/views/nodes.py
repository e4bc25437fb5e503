from apps.dashboard.views.base import DashboardPage


class NodesPage(DashboardPage):
    nav = "nodes"
    template_name = "dashboard/nodes.html"


class NodePage(DashboardPage):
    nav = "nodes"
    template_name = "dashboard/node.html"
