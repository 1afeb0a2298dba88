"""API endpoints given on the command line: which ones may be talked to anonymously over plain http.

Only a loopback host (a test server on this machine) gets anonymous credentials and plain http; every
other endpoint must be https, so credentials are never sent in the clear.
"""

from __future__ import annotations

import ipaddress
import os
import re
from urllib.parse import urlsplit


def is_loopback_host(host: str | None) -> bool:
    """``localhost`` or a loopback IP address (127.0.0.0/8, ::1)."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback_http(endpoint: str) -> bool:
    """A plain-http URL on a loopback host (``http://127.0.0.1:8080``); a bare host counts as https."""
    u = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    return u.scheme == "http" and is_loopback_host(u.hostname)


ENV_PIP_SPEC = "CLOUDFIT_PIP_SPEC"  # what the VMs pip-install instead of the launcher's own cloudfit
_CRED = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")


def strip_credentials(text: str) -> str:
    """``https://user:token@host/x`` → ``https://host/x`` anywhere in ``text`` (pip specs, URLs)."""
    return _CRED.sub(r"\1", text)


def pip_spec() -> str:
    """What the VMs pip-install: ``$CLOUDFIT_PIP_SPEC`` (credentials stripped: they would land in
    instance metadata) or this very cloudfit version."""
    from cloudfit import __version__

    raw = os.environ.get(ENV_PIP_SPEC)
    if raw:
        return strip_credentials(raw.strip())
    return f"cloudfit=={__version__}"
