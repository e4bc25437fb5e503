from apps.burnin.models.breaker import BreakerEvent, QuarantineBreaker
from apps.burnin.models.burnins import BurnIn, BurnInCheck, BurnInNode
from apps.burnin.models.suites import Suite
from apps.burnin.models.thresholds import ThresholdVersion

__all__ = ["BreakerEvent", "BurnIn", "BurnInCheck", "BurnInNode", "QuarantineBreaker", "Suite", "ThresholdVersion"]
