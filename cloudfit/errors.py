"""The exception tree. The library raises these; the CLI maps them to one line and an exit code.

Exit codes (see ``cloudfit.cli.main``): ``UsageError`` (bad input) → 2, ``InfeasibleError`` → 3,
``BudgetExceeded`` → 4, any other ``CloudfitError`` → 1.
"""

from __future__ import annotations


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
