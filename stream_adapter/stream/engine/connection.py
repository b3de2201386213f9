"""The Faust app settings that connect the engine's clients like every other client.

`kafka_clients.client_options` says how aiokafka clients connect (security protocol, SASL,
TLS context); Faust takes the same as `broker_credentials`, which it hands to its consumer,
its producers and the admin requests it makes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faust.auth import SASLCredentials, SSLCredentials


def faust_connection(options: Mapping[str, Any], compression_type: str | None) -> dict[str, Any]:
    """Faust settings for aiokafka client `options`, and the producers' compression."""
    out: dict[str, Any] = {"producer_compression_type": compression_type}
    protocol = options.get("security_protocol", "PLAINTEXT")
    if protocol.startswith("SASL_"):
        out["broker_credentials"] = SASLCredentials(
            username=options["sasl_plain_username"],
            password=options["sasl_plain_password"],
            mechanism=options["sasl_mechanism"],
            ssl_context=options.get("ssl_context"),
        )
    elif protocol == "SSL":
        out["broker_credentials"] = SSLCredentials(options["ssl_context"])
    return out
