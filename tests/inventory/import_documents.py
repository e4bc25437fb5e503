"""Inventory documents for the import tests."""

UUIDS = [f"GPU-0000000{i}-1111-4222-8333-444455556666" for i in range(6)]


def gpu_node(hostname: str, first_gpu: int) -> dict:
    return {
        "hostname": hostname,
        "cluster": "c1",
        "node_type": "hgx-2g",
        "rack": "r01",
        "gpus": [
            {"index": i, "uuid": UUIDS[first_gpu + i], "serial": f"165232200{first_gpu + i}", "state": "healthy"}
            for i in range(2)
        ],
        "ports": [{"device_name": "mlx5_0", "guid": f"0xa088c20300{first_gpu:06x}", "link_state": "active"}],
    }


def small_document() -> dict:
    """Two 2-GPU nodes, each with two HCAs cabled to one leaf, and NVLink between their GPUs."""
    return {
        "version": 1,
        "clusters": [{"name": "c1", "site": "lab"}],
        "node_types": [
            {
                "name": "hgx-2g",
                "gpu_model": "NVIDIA H100 80GB HBM3",
                "gpus_per_node": 2,
                "gpu_memory_gb": 80,
                "peak_bf16_tflops": 989.4,
                "hbm_bandwidth_gbs": 3350,
                "nvlink_bandwidth_gbs": 900,
                "network_gbps_per_gpu": 400,
                "gpu_power_limit_w": 700,
                "port_templates": [
                    {"device_name": f"mlx5_{i}", "kind": "infiniband", "rate_gbps": 400} for i in range(2)
                ],
            }
        ],
        "racks": [{"cluster": "c1", "name": "r01"}],
        "fabrics": [{"name": "ib", "cluster": "c1", "kind": "infiniband", "topology": "fat_tree"}],
        "switches": [{"name": "leaf-01", "fabric": "ib", "tier": "leaf", "port_rate_gbps": 400}],
        "nodes": [gpu_node("gpu-a", 0), gpu_node("gpu-b", 2)],
        "links": [
            {"a": {"node": host, "port": f"mlx5_{i}"}, "b": {"switch": "leaf-01", "port": f"p{2 * n + i + 1}"}}
            for n, host in enumerate(["gpu-a", "gpu-b"])
            for i in range(2)
        ],
        "nvlinks": [
            {"node": "gpu-a", "gpus": [0, 1], "lanes": 18, "bandwidth_gbs": 900},
            {"node": "gpu-b", "mesh": True, "lanes": 18, "bandwidth_gbs": 900},
        ],
    }
