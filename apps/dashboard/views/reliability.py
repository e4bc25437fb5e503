from typing import Any

from apps.dashboard.views.base import DashboardPage
from apps.failures.reliability import DEFAULT_DAYS, PERIOD_CHOICES, reliability


class ReliabilityPage(DashboardPage):
    """Failures per GPU-year, MTBF per node and the worst nodes over 7, 30, 90 or 365 days
    (``?days=``); the figures and their definitions are apps/failures/reliability.py's."""

    nav = "reliability"
    template_name = "dashboard/reliability.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        asked = self.request.GET.get("days", "")
        days = int(asked) if asked in {str(choice) for choice in PERIOD_CHOICES} else DEFAULT_DAYS
        return super().get_context_data(**kwargs) | {
            "report": reliability(days),
            "days": days,
            "period_choices": PERIOD_CHOICES,
            "period_error": (
                f"“{asked}” is not a period this page offers ({', '.join(map(str, PERIOD_CHOICES))} days); "
                f"showing the last {days} days."
            )
            if asked and str(days) != asked
            else "",
        }
