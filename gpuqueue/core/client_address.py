"""The client's address, as the proxies the operator configured report it.

Throttles and the sign-in lockout count by this address, so it must be one the client cannot
choose. Without configuration it is the peer of the connection (REMOTE_ADDR) and no header is
read: anyone may send `X-Forwarded-For`. Behind GPUQUEUE_TRUSTED_PROXY_HOPS proxies that each
append the address they received from to `X-Forwarded-For`, the client is the entry that
many places from the right: what the outermost trusted proxy saw. Entries further left were
written by the client and are ignored.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from django.conf import settings


def client_address(request: Any) -> str:
    """The address to count `request` by (axes calls this through AXES_CLIENT_IP_CALLABLE)."""
    peer = str(request.META.get("REMOTE_ADDR") or "")
    hops = int(getattr(settings, "GPUQUEUE_TRUSTED_PROXY_HOPS", 0))
    if hops <= 0:
        return peer
    forwarded = [
        entry.strip()
        for entry in str(request.META.get("HTTP_X_FORWARDED_FOR") or "").split(",")
        if entry.strip()
    ]
    if len(forwarded) < hops:
        # Fewer entries than trusted proxies: the request did not come through all of them,
        # so nothing in the header is vouched for.
        return peer
    candidate = forwarded[-hops]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:  # a proxy that writes something else is misconfigured; count the peer
        return peer
