"""The only code that speaks HTTP to the API server: config, requests, informers."""

from lessor.gateway.client import ApiError, FencePaused, Gateway, admitted
from lessor.gateway.informer import Informer, WatchEvent
from lessor.gateway.resources import LESSOR_RESOURCES, Resource

__all__ = ["ApiError", "FencePaused", "Gateway", "admitted", "Informer", "LESSOR_RESOURCES", "Resource", "WatchEvent"]
