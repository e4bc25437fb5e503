from django.contrib.auth import views as auth_views
from django.urls import path

from apps.accounts.signin import SignInView
from apps.dashboard.views import failures, fleet, nodes, reliability, runs, topology

app_name = "dashboard"

urlpatterns = [
    path("", fleet.FleetPage.as_view(), name="fleet"),
    path("nodes/", nodes.NodesPage.as_view(), name="nodes"),
    path("nodes/<int:pk>/", nodes.NodePage.as_view(), name="node"),
    path("failures/", failures.FailuresPage.as_view(), name="failures"),
    path("runs/", runs.RunsPage.as_view(), name="runs"),
    path("runs/<int:pk>/", runs.RunPage.as_view(), name="run"),
    path("topology/", topology.TopologyPage.as_view(), name="topology"),
    path("racks/", topology.RacksPage.as_view(), name="racks"),
    path("reliability/", reliability.ReliabilityPage.as_view(), name="reliability"),
]

# Outside the namespace: Django's auth views and LOGIN_URL expect these names.
auth_urlpatterns = [
    path("login/", SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
]
