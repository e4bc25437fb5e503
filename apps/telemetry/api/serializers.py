from rest_framework import serializers

from apps.core.api.serializers import ChoiceField
from apps.telemetry.queries import METRICS, WINDOWS


class TelemetryQuerySerializer(serializers.Serializer):
    window = ChoiceField(choices=sorted(WINDOWS), default="15m")
    metric = ChoiceField(choices=sorted(METRICS), default="util_gpu")


class GpuSeriesSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    points = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField(allow_null=False), min_length=4, max_length=4),
        help_text="[t, min, mean, max]: t in Unix seconds at the start of the point's interval.",
    )


class NodeTelemetrySerializer(serializers.Serializer):
    node = serializers.IntegerField()
    hostname = serializers.CharField()
    window = serializers.ChoiceField(choices=sorted(WINDOWS))
    metric = serializers.ChoiceField(choices=sorted(METRICS))
    unit = serializers.CharField()
    source = serializers.ChoiceField(choices=["raw", "minute", "hour"], help_text="The table the points come from.")
    step_s = serializers.IntegerField(help_text="Seconds covered by each point.")
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    gpus = GpuSeriesSerializer(many=True)


class FleetPointSerializer(serializers.Serializer):
    ts = serializers.IntegerField(help_text="Start of the minute, Unix seconds.")
    gpus = serializers.IntegerField(help_text="GPUs that reported in the minute.")
    util_gpu_mean = serializers.FloatField(allow_null=True, help_text="Mean utilization over every sample, %.")
    power_w_total = serializers.FloatField(allow_null=True, help_text="Sum of the GPUs' mean power draw, W.")


class FleetHistorySerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    step_s = serializers.IntegerField()
    points = FleetPointSerializer(many=True)
