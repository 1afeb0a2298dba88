"""The size of data in a bucket, read from the storage listing when credentials allow.

``gs://``: the Cloud Storage JSON API's ``objects.list`` (``GET /storage/v1/b/BUCKET/o?prefix=…``, the sizes of
every object under the prefix, page by page) through google-auth's ``AuthorizedSession`` — no storage client
library is needed. Tried only when application-default credentials are configured (``GOOGLE_APPLICATION_CREDENTIALS``
or gcloud's ADC file), so a machine without them answers at once instead of probing the metadata server.
``CLOUDFIT_STORAGE_ENDPOINT`` points it elsewhere (a plain-http loopback server in tests, anonymously).
``s3://``: not read (no AWS client is installed). None means "not read": the caller asks for ``--data-size``.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

from cloudfit.errors import UsageError

ENV_ENDPOINT = "CLOUDFIT_STORAGE_ENDPOINT"
_SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"


def _adc_configured() -> bool:
    if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return True
    base = Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud")
    return (base / "application_default_credentials.json").is_file()


def _session(endpoint: str):
    """A requests session for ``endpoint``: anonymous for a loopback http test server, else authorised
    with the application-default credentials (None when there are none)."""
    from cloudfit.endpoints import is_loopback_http

    if is_loopback_http(endpoint):
        import requests

        return requests.Session()
    if endpoint.startswith("http://"):
        raise UsageError(f"refusing to send credentials over plain http to {endpoint}; use https")
    if not _adc_configured():
        return None
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError
    from google.auth.transport.requests import AuthorizedSession

    try:
        creds, _ = google.auth.default(scopes=[_SCOPE])
    except DefaultCredentialsError:
        return None
    return AuthorizedSession(creds)


def gcs_size_gb(url: str, endpoint: str | None = None, timeout_s: float = 20.0) -> float | None:
    """GB under ``gs://BUCKET/PREFIX`` from the listing; None when it cannot be read (no credentials, no
    permission, the network); ``UsageError`` when the bucket or the prefix holds nothing."""
    endpoint = (endpoint or os.environ.get(ENV_ENDPOINT) or "https://storage.googleapis.com").rstrip("/")
    bucket, _, prefix = url.split("://", 1)[1].partition("/")
    session = _session(endpoint)
    if session is None:
        return None
    import requests

    total, n, token = 0, 0, None
    while True:
        params = {"prefix": prefix, "fields": "items(size),nextPageToken", "maxResults": 1000}
        if token:
            params["pageToken"] = token
        try:
            r = session.get(f"{endpoint}/storage/v1/b/{quote(bucket, safe='')}/o", params=params, timeout=timeout_s)
        except requests.RequestException:
            return None
        if r.status_code == 404:
            raise UsageError(f"--data {url}: no such bucket")
        if r.status_code != 200:
            return None  # 401/403 (no permission), 5xx: not read
        try:
            page = r.json()
            items = page.get("items", [])
            total += sum(int(i["size"]) for i in items)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        n += len(items)
        token = page.get("nextPageToken")
        if not token:
            break
    if n == 0:
        raise UsageError(f"--data {url}: no objects under this path")
    return total / 1e9
