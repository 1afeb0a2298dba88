"""The exception tree. The library raises these; the CLI maps them to one line and an exit code.

Exit codes (see ``cloudfit.cli.main``): ``UsageError`` (bad input) → 2, ``InfeasibleError`` → 3,
``BudgetExceeded`` → 4, any other ``CloudfitError`` → 1.
"""

from __future__ import annotations

import re


class CloudfitError(Exception):
    """Base of every error cloudfit raises on purpose. ``str(err)`` is one line a user can act on."""

    exit_code: int = 1


class UsageError(CloudfitError, ValueError):
    """The user's input is wrong (an option, a file, a name)."""

    exit_code = 2


class CatalogError(UsageError):
    """A catalog file is missing, malformed or names something unknown."""


class ProfileError(UsageError):
    """A profile file is missing, malformed, or a model cannot be profiled."""


class UnknownAcceleratorError(UsageError, KeyError):
    """An accelerator name that the hardware table does not know."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class PlanError(UsageError):
    """A plan file is missing, corrupt or from a schema this version does not read."""


class BillingError(CloudfitError):
    """The Cloud Billing Catalog API could not be reached, refused the request, or priced nothing."""


class ModelError(CloudfitError):
    """The performance model cannot be loaded, fitted or asked this question."""


class InfeasibleError(CloudfitError):
    """No configuration meets the limits. ``closest`` holds the nearest candidates, best first."""

    exit_code = 3

    def __init__(self, message: str, closest: tuple = ()) -> None:
        super().__init__(message)
        self.closest = closest


class LaunchError(CloudfitError):
    """A cluster could not be created, reached or torn down."""


class StockoutError(LaunchError):
    """The zone has no capacity for this machine (ZONE_RESOURCE_POOL_EXHAUSTED)."""


class QuotaError(LaunchError):
    """The project lacks quota for this machine or accelerator."""


class BudgetExceeded(CloudfitError):
    """Going on would spend past the budget."""

    exit_code = 4


def one_line(e: BaseException, limit: int = 300) -> str:
    """An exception as one line of at most ``limit`` characters, for a message that names its cause.

    Uses the exception's ``message`` when it has one (google-api errors), drops the request URL the
    REST transport puts in front, puts an HTTP ``code`` first, and falls back to the type's name.
    """
    text = " ".join(str(getattr(e, "message", None) or e).split())
    text = re.sub(r"^(?:GET|POST) \S+: ", "", text)
    code = getattr(e, "code", None)
    if isinstance(code, int) and not text.startswith(str(code)):
        text = f"{code} {text}"
    if not text:
        return type(e).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
