"""Compute Engine clients, retries and error classification for the GCP backend.

* ``make_clients``: Instances + ZoneOperations clients on the REST transport sharing one endpoint
  and credentials (application-default credentials, or anonymous ones for a plain-http loopback
  test server).
* ``Retry``: ``google.api_core.retry.Retry`` with a predicate that retries only *transient*
  failures (429, 5xx, dropped connections) — never a capacity error, even when it arrives as
  HTTP 503 (Compute Engine refuses GPU VMs synchronously with ``ZONE_RESOURCE_POOL_EXHAUSTED``).
* ``capacity_error``: the one place that decides whether an error (an HTTP exception or an
  operation's error) means "this offering cannot be had here now" — a stockout, a quota, or an
  accelerator / machine type the zone does not offer — so the launch moves on to the plan's next
  alternative at once.
* ``wait``: waits for a zone operation with our own ``ZoneOperationsClient`` (the client's
  ``op.result()`` polls through a hidden client that ignores a custom endpoint).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlparse

from cloudfit.endpoints import is_loopback_http
from cloudfit.errors import LaunchError, QuotaError, StockoutError, UsageError

ENV_ENDPOINT = "CLOUDFIT_COMPUTE_ENDPOINT"

#: Reasons (HTTP ``errors[].reason``, ErrorInfo reason or operation error code) meaning "no capacity here".
STOCKOUT_CODES = ("ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                  "RESOURCE_POOL_EXHAUSTED", "RESOURCE_NOT_AVAILABLE", "resourcePoolExhausted")
QUOTA_CODES = ("QUOTA_EXCEEDED", "QUOTA_LIMIT", "quotaExceeded", "rateLimitExceeded:quota")
NOT_OFFERED_CODES = ("RESOURCE_NOT_FOUND", "notFound", "invalid", "INVALID_FIELD_VALUE")


class NotOfferedError(LaunchError):
    """The zone does not offer this machine type or accelerator (RESOURCE_NOT_FOUND on the insert)."""


@dataclass
class Clients:
    project: str
    instances: Any
    zone_operations: Any
    endpoint: str | None


def make_clients(project: str | None, endpoint: str | None) -> Clients:
    """Instances + ZoneOperations clients on the REST transport, sharing one endpoint and credentials."""
    from google.cloud import compute_v1

    endpoint = endpoint or os.environ.get(ENV_ENDPOINT) or None
    project, kw = client_kwargs(project, endpoint)
    return Clients(project, compute_v1.InstancesClient(**kw), compute_v1.ZoneOperationsClient(**kw), endpoint)


def client_kwargs(project: str | None, endpoint: str | None) -> tuple[str, dict]:
    """(project, keyword arguments of any compute_v1 client): the REST transport on ``endpoint`` (default
    ``$CLOUDFIT_COMPUTE_ENDPOINT``), anonymous credentials for a loopback http test server, else the
    application-default ones (``LaunchError`` without them)."""
    from google.api_core.client_options import ClientOptions

    endpoint = endpoint or os.environ.get(ENV_ENDPOINT) or None
    if endpoint and (urlparse(endpoint).username or urlparse(endpoint).password):
        raise UsageError("the compute endpoint must not embed credentials (it is recorded in the state store)")
    opts = ClientOptions(api_endpoint=endpoint) if endpoint else None
    if endpoint and is_loopback_http(endpoint):
        from google.auth.credentials import AnonymousCredentials

        creds = AnonymousCredentials()
        project = project or "cloudfit-test"
    else:
        if endpoint and urlparse(endpoint).scheme == "http":
            raise UsageError(f"refusing to send credentials over plain http to {endpoint}; use https")
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            creds, default_project = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        except DefaultCredentialsError:
            raise LaunchError("no Google Cloud credentials: run `gcloud auth application-default login` "
                              "or set GOOGLE_APPLICATION_CREDENTIALS") from None
        project = project or default_project or os.environ.get("GOOGLE_CLOUD_PROJECT")
    if not project:
        raise UsageError("no Google Cloud project: pass --project or set GOOGLE_CLOUD_PROJECT")
    return project, {"transport": "rest", "client_options": opts, "credentials": creds}


# ------------------------------------------------------------------------------ error classification

def one_line(e: BaseException) -> str:
    msg = getattr(e, "message", None) or str(e)
    return " ".join(str(msg).split())[:300]


def _reasons(e: BaseException) -> list[str]:
    out: list[str] = []
    for item in getattr(e, "errors", None) or ():
        if isinstance(item, dict):
            out += [str(item.get(k)) for k in ("reason", "code") if item.get(k)]
    reason = getattr(e, "reason", None)
    if reason:
        out.append(str(reason))
    return out


def capacity_error(codes: list[str], message: str, *, status: int | None = None) -> str | None:
    """``"stockout"``, ``"quota"``, ``"not-offered"`` or None for an error's reasons/codes and message."""
    text = message.lower()
    if any(c.startswith(s) for c in codes for s in STOCKOUT_CODES) or "does not have enough resources" in text:
        return "stockout"
    if any(c in QUOTA_CODES for c in codes) or ("quota" in text and "exceeded" in text):
        return "quota"
    if ("acceleratortypes/" in text or "machinetypes/" in text) and (
            any(c in NOT_OFFERED_CODES for c in codes) or status in (400, 404) or "not found" in text
            or "was not found" in text or "not available" in text):
        return "not-offered"
    return None


def classify(e: BaseException) -> str | None:
    """Capacity class of a google-api-core exception (HTTP error of a call), or None."""
    return capacity_error(_reasons(e), one_line(e), status=getattr(e, "code", None))


def capacity_exception(kind: str, where: str, detail: str) -> LaunchError:
    if kind == "stockout":
        return StockoutError(f"stockout in {where} ({detail})")
    if kind == "quota":
        return QuotaError(f"quota exceeded in {where}: {detail}")
    return NotOfferedError(f"not offered in {where}: {detail}")


def op_error(op) -> tuple[str, str] | None:
    errs = list(op.error.errors) if op.error else []
    if not errs:
        return None
    return errs[0].code, errs[0].message


# ------------------------------------------------------------------------------ retries

def transient(e: BaseException) -> bool:
    """True for errors worth retrying: 429, 5xx and dropped connections — not capacity errors."""
    from google.api_core import exceptions as ex
    import requests

    kinds = (ex.TooManyRequests, ex.ServiceUnavailable, ex.InternalServerError, ex.BadGateway, ex.GatewayTimeout,
             ex.DeadlineExceeded, requests.ConnectionError, requests.Timeout)
    return isinstance(e, kinds) and classify(e) is None


@dataclass
class Retry:
    """``google.api_core.retry.Retry`` (exponential backoff with jitter) over ``transient`` errors,
    at most ``attempts`` tries; capacity errors and every other error pass straight through."""

    attempts: int = 7
    base_s: float = 1.0
    cap_s: float = 32.0
    total_s: float = 600.0
    retried: int = 0

    def call(self, what: str, fn: Callable, *args, **kw):
        from google.api_core import retry as gretry

        tries = {"n": 0}

        def predicate(e: Exception) -> bool:
            if not transient(e):
                return False
            tries["n"] += 1
            if tries["n"] >= self.attempts:
                return False
            self.retried += 1
            return True

        policy = gretry.Retry(predicate=predicate, initial=self.base_s, maximum=self.cap_s, multiplier=2.0,
                              timeout=self.total_s)
        try:
            return policy(fn)(*args, retry=None, timeout=120, **kw)
        except Exception as e:
            if transient(e):
                raise LaunchError(f"{what}: {one_line(e)} (gave up after {max(tries['n'], 1)} attempts)") from None
            raise


def wait(clients: Clients, retry: Retry, zone: str, op_name: str, what: str, timeout_s: float = 1800.0):
    """Wait for a zone operation with our own ZoneOperationsClient (same endpoint and credentials)."""
    from google.cloud import compute_v1

    deadline = time.monotonic() + timeout_s
    while True:
        op = retry.call(what, clients.zone_operations.wait, project=clients.project, zone=zone, operation=op_name)
        if op.status == compute_v1.Operation.Status.DONE:
            return op
        if time.monotonic() > deadline:
            raise LaunchError(f"{what}: operation {op_name} still not done after {timeout_s:.0f} s")
