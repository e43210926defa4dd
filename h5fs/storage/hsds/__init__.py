"""An HSDS domain (the HDF Group's Highly Scalable Data Service) through its REST API: settings
found as h5pyd finds them, the HTTP transport, the client's calls, the records they answer, and
HSDS's types and binary values as NumPy sees them."""

from .client import HsdsClient, selection, whole
from .records import Attribute, Dataset, Datatype, Domain, Group, Link
from .settings import HsdsSettings, resolve
from .transport import HsdsError
from .types import TypeNotMapped

__all__ = ["Attribute", "Dataset", "Datatype", "Domain", "Group", "HsdsClient", "HsdsError", "HsdsSettings",
           "Link", "TypeNotMapped", "resolve", "selection", "whole"]
