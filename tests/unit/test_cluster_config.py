"""The deployment configs are valid for the Ray that Cairn pins.

ray_cluster.yaml is checked against the cluster-launcher JSON schema shipped in
the installed ray package (the one `ray up` validates with), and
configs/serve.yaml against Ray Serve's own pydantic schema. No Ray is started.
"""

from __future__ import annotations

import copy
import importlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import pytest
import ray.autoscaler
import yaml
from ray.serve.schema import ServeDeploySchema

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_YAML = ROOT / "ray_cluster.yaml"
SERVE_YAML = ROOT / "configs" / "serve.yaml"
RAY_SCHEMA = Path(ray.autoscaler.__file__).parent / "ray-schema.json"


def _load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path} is not a YAML mapping"
    return data


def _cluster() -> dict[str, Any]:
    return _load_yaml(CLUSTER_YAML)


def _ray_schema() -> dict[str, Any]:
    assert RAY_SCHEMA.is_file(), f"ray ships no cluster schema at {RAY_SCHEMA}"
    schema: dict[str, Any] = json.loads(RAY_SCHEMA.read_text())
    return schema


def _worker_types(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    head = config["head_node_type"]
    return {k: v for k, v in config["available_node_types"].items() if k != head}


def test_cluster_config_matches_ray_schema() -> None:
    jsonschema.validate(_cluster(), _ray_schema())


def test_cluster_config_passes_ray_launcher_checks() -> None:
    # What `ray up` does before it touches AWS: fill in the provider defaults,
    # merge the setup commands, then validate (schema plus cross-field checks).
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(_cluster())
    validate_config(prepared)
    assert prepared["cluster_name"] == "cairn"
    assert prepared["provider"]["type"] == "aws"


def test_cluster_config_has_head_cpu_and_gpu_node_types() -> None:
    config = _cluster()
    assert config["cluster_name"] == "cairn"
    provider = config["provider"]
    assert provider["type"] == "aws"
    assert provider["region"]
    assert provider["availability_zone"].startswith(provider["region"])
    assert config["auth"]["ssh_user"] == "ubuntu"

    head = config["head_node_type"]
    assert head in config["available_node_types"]
    head_type = config["available_node_types"][head]
    assert head_type["resources"].get("GPU", 0) == 0
    assert head_type.get("max_workers", 0) == 0

    workers = _worker_types(config)
    gpu = [name for name, t in workers.items() if t["resources"].get("GPU", 0) >= 1]
    cpu = [
        name
        for name, t in workers.items()
        if t["resources"].get("GPU", 0) == 0 and t["resources"].get("CPU", 0) >= 1
    ]
    assert gpu, "no worker node type with GPU resources (for the Embedder replicas)"
    assert cpu, "no CPU-only worker node type (for the Api replicas)"
    for name in gpu:
        assert workers[name]["node_config"]["InstanceType"].startswith(("g", "p")), name


def test_cluster_config_worker_counts_are_consistent() -> None:
    config = _cluster()
    total_max = config["max_workers"]
    workers = _worker_types(config)
    for name, node_type in workers.items():
        lo, hi = node_type.get("min_workers", 0), node_type["max_workers"]
        assert 0 <= lo <= hi <= total_max, (name, lo, hi, total_max)
    # The launcher refuses a global cap below the sum of the minimums; a cap
    # above the sum of the per-type maximums could never be reached.
    assert sum(t.get("min_workers", 0) for t in workers.values()) <= total_max
    assert total_max <= sum(t["max_workers"] for t in workers.values())


def test_cluster_config_start_commands() -> None:
    config = _cluster()
    head_start = " ".join(config["head_start_ray_commands"])
    assert "ray start --head" in head_start
    assert "--port=6379" in head_start
    assert "--autoscaling-config=~/ray_bootstrap_config.yaml" in head_start
    worker_start = " ".join(config["worker_start_ray_commands"])
    assert "--address=$RAY_HEAD_IP:6379" in worker_start
    setup = " ".join(config["setup_commands"])
    assert "torch==2.13.0" in setup
    assert "configs/constraints.txt" in setup
    # Every local path in file_mounts exists, relative to the repository root.
    for local in config["file_mounts"].values():
        assert (ROOT / local).exists(), local


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("max_workers",), "lots"),
        (("available_node_types", "gpu", "resources", "GPU"), 0.5),
        (("auth", "ssh_password"), "hunter2"),
        (("head_start_ray_commands",), "ray start --head"),
    ],
)
def test_ray_schema_rejects_a_broken_cluster_config(path: tuple[str, ...], value: object) -> None:
    config = copy.deepcopy(_cluster())
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError) as excinfo:
        jsonschema.validate(config, _ray_schema())
    # It fails at the field that was broken, not somewhere else.
    assert tuple(excinfo.value.absolute_path)[: len(path)] in (path, path[:-1])


def test_serve_config_matches_serve_schema() -> None:
    schema = ServeDeploySchema.model_validate(_load_yaml(SERVE_YAML))
    assert [app.name for app in schema.applications] == ["cairn"]
    app = schema.applications[0]
    assert app.import_path == "serve_app.launch.deployments:build_app"
    assert app.route_prefix == "/"

    module_name, _, attr = app.import_path.partition(":")
    builder = getattr(importlib.import_module(module_name), attr)
    assert callable(builder)


def test_serve_schema_rejects_a_broken_serve_config() -> None:
    config = _load_yaml(SERVE_YAML)
    config["applications"][0]["deployments"][0]["num_replicas"] = "lots"
    with pytest.raises(pydantic.ValidationError, match="num_replicas"):
        ServeDeploySchema.model_validate(config)
