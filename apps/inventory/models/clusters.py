from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from apps.inventory.choices import PortKind


class Cluster(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=200, blank=True)
    site = models.CharField(max_length=100, blank=True, help_text="Data centre or region.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class NodeType(models.Model):
    """A server model: the figures every node of this type should reach, used as the yardstick
    for burn-in thresholds, MFU and the fabric's theoretical bandwidth."""

    name = models.SlugField(max_length=64, unique=True)
    gpu_model = models.CharField(max_length=64, help_text="As NVML names it, e.g. 'NVIDIA H100 80GB HBM3'.")
    gpus_per_node = models.PositiveSmallIntegerField(validators=[MinValueValidator(1), MaxValueValidator(72)])
    gpu_memory_gb = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    peak_bf16_tflops = models.DecimalField(
        max_digits=8,
        decimal_places=1,
        validators=[MinValueValidator(Decimal("0.1"))],
        help_text="Dense bf16 peak per GPU, TFLOP/s (H100 SXM: 989).",
    )
    hbm_bandwidth_gbs = models.PositiveIntegerField(help_text="HBM bandwidth per GPU, GB/s (H100 SXM: 3350).")
    nvlink_bandwidth_gbs = models.PositiveIntegerField(
        default=0, help_text="Total NVLink bandwidth per GPU, both directions, GB/s (H100 SXM: 900); 0 if none."
    )
    network_gbps_per_gpu = models.PositiveIntegerField(
        help_text="Scale-out network bandwidth per GPU, Gb/s (one 400G NDR HCA per GPU: 400)."
    )
    gpu_power_limit_w = models.PositiveIntegerField(help_text="Default power limit per GPU, W (H100 SXM: 700).")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def nvlink_gbs_per_direction(self) -> float:
        return self.nvlink_bandwidth_gbs / 2


class PortTemplate(models.Model):
    """A network port every node of a type has; instantiated when a node is created
    (NetBox's component templates)."""

    node_type = models.ForeignKey(NodeType, on_delete=models.CASCADE, related_name="port_templates")
    device_name = models.CharField(max_length=32, help_text="e.g. mlx5_0")
    port_num = models.PositiveSmallIntegerField(default=1)
    kind = models.CharField(max_length=16, choices=PortKind.choices)
    rate_gbps = models.PositiveIntegerField()

    class Meta:
        ordering = ["node_type", "device_name", "port_num"]
        constraints = [
            models.UniqueConstraint(fields=["node_type", "device_name", "port_num"], name="port_template_unique")
        ]

    def __str__(self) -> str:
        return f"{self.node_type} {self.device_name}/{self.port_num}"


class Rack(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="racks")
    name = models.CharField(max_length=64)
    location = models.CharField(max_length=100, blank=True, help_text="Row, room or cage.")
    power_budget_kw = models.DecimalField(max_digits=7, decimal_places=2, null=True, blank=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="rack_unique_name_per_cluster")]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"
