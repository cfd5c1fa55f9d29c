"""The only code that speaks HTTP to the API server: config, requests, informers."""

from lessor.gateway.client import ApiError, Gateway
from lessor.gateway.informer import Informer, WatchEvent
from lessor.gateway.resources import LESSOR_RESOURCES, Resource

__all__ = ["ApiError", "Gateway", "Informer", "LESSOR_RESOURCES", "Resource", "WatchEvent"]
