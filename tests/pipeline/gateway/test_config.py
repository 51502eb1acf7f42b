"""deltaguard.gateway.config: the request limits as one value, from the flat settings."""

from __future__ import annotations

from deltaguard.bounds import RequestLimits
from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.config_file import effective


def test_request_limits_default_to_the_value_objects_defaults():
    assert GatewayConfig().request_limits == RequestLimits()


def test_request_limits_carry_the_settings_from_file_and_environment(tmp_path):
    path = tmp_path / "deltaguard.toml"
    path.write_text("max_json_depth = 12\nmax_request_bytes = 4096\n")
    config, _ = effective(path, {"max_items_per_request": 7}, {"DELTAGUARD_MAX_ID_LENGTH": "64"})
    assert config.request_limits == RequestLimits(
        max_request_bytes=4096, max_json_depth=12, max_items_per_request=7, max_id_length=64
    )
