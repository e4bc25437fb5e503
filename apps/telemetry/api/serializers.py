from rest_framework import serializers

from apps.telemetry.queries import METRICS, WINDOWS


class TelemetryQuerySerializer(serializers.Serializer):
    window = serializers.ChoiceField(choices=sorted(WINDOWS), default="15m")
    metric = serializers.ChoiceField(choices=sorted(METRICS), default="util_gpu")


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
