"""The HSDS engine: one domain of an HSDS service shown as the mount shows a local file
(domain.py HsdsDomain; objects.py and dataset.py its objects; blocks.py data reads; metadata.py
what is kept of the service's answers, and for how long; datatypes.py and elements.py HSDS
types and values as the local engine's)."""

from .domain import HsdsDomain

__all__ = ["HsdsDomain"]
