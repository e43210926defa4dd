"""The object every group, dataset and named datatype is: a header, its messages, attributes.

Objects are handles: a file, a header address, a path (for messages), the generation of the
address when the handle was made, and the ObjectState it last used. The header and everything
derived from it (decoded messages, link and attribute tables, a dataset's source...) live in
that state, one entry of the file's metadata cache under the header's address, so any number
of handles of one object see one state, making a handle costs nothing, and
`H5File.invalidate(address)` makes every handle read again. Handles are made per request (the
FUSE layer's inodes hold addresses): a handle pins a state only while it is in use. A handle
made before its address was invalidated checks, when used, that an object of its kind still
lives there.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Hashable

from ..errors import FormatError, H5fsError, NotFound
from ..format import object_header
from ..format.codec import Reader
from ..format.messages import shared
from . import messages as M
from .attributes import Attribute, read_attributes, table_nbytes
from .cache_size import approx_size
from .dtypes import describe
from .safety_net import UNEXPECTED, guarded, internal_error

if TYPE_CHECKING:
    from .file import H5File

MAX_SHARED_DEPTH = 8


class ObjectState:
    """One object's entry in the file's metadata cache: its header and what was derived from it
    (kind -> value: decoded messages under their type number, tables, sources...). One entry
    per object keeps the cache's bookkeeping to one record per object and a derived value one
    dict lookup away; the entry's size grows with each value added (H5File.remember). A state
    is current while the address's generation is the one it was read at and no invalidation
    forgot it (`valid`): handles holding another fetch anew, even if it was evicted meanwhile."""

    __slots__ = ("header", "generation", "values", "valid")

    def __init__(self, header: object_header.ObjectHeader, generation: int):
        self.header = header
        self.generation = generation
        self.values: dict[Hashable, Any] = {}
        self.valid = True


_MISSING = object()


class derived:
    """`@derived(nbytes)` over a method: a read-only property computed by the method (guarded)
    and kept in the object's state, the property's name as its kind. `nbytes`: the value's
    size, or a function of the value giving it."""

    def __init__(self, nbytes: int | Callable[[Any], int] = approx_size):
        self.nbytes = nbytes

    def __call__(self, compute: Callable[[Any], Any]) -> derived:
        self.compute = guarded(compute)
        self.__doc__ = compute.__doc__
        return self

    def __set_name__(self, owner: type, name: str) -> None:
        self.kind = name

    def __get__(self, obj: H5Object | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj.state().values.get(self.kind, _MISSING)
        if value is _MISSING:  # computed from the state's header: the state is fetched once
            value = obj.cached(self.kind, partial(self.compute, obj), self.nbytes)
        return value


class H5Object:
    __slots__ = ("file", "address", "path", "generation", "_state")
    kind = "object"
    # its header is bytes of a file here: what it alone answers may be asked on the event loop's
    # thread (an HSDS object's answers come over a network: model/hsds)
    headers_local = True

    def __init__(self, file: H5File, address: int, path: str, generation: int = 0,
                 state: ObjectState | None = None):
        self.file = file
        self.address = address
        self.path = path
        self.generation = generation
        self._state = state   # the cached state this handle last used (fetched again once invalid)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path} @{self.address}>"

    def detached(self) -> H5Object:
        """The same handle without its state: for records cached inside that state (attribute
        tables, views), which must not hold it in a reference cycle."""
        return type(self)(self.file, self.address, self.path, self.generation)

    # -- the file's caches ------------------------------------------------------------------
    def state(self) -> ObjectState:
        """The object's cached state. When the address was invalidated since this handle was
        made, an object of the handle's kind must still live there; otherwise it is gone."""
        st, file = self._state, self.file
        if st is None or not st.valid or st.generation != file.generation(self.address):
            if file.generation(self.address) != self.generation:
                cls = file.object_class(self.address, self.path)
                if cls is not type(self):
                    raise NotFound(f"{self.path}: the {self.kind} at address {self.address} is gone "
                                   f"(a {cls.kind} lives there now)")
            st = self._state = file.state(self.address, self.path)
        return st

    def cached(self, kind: Hashable, compute: Callable[[], Any], nbytes: int | Callable[[Any], int]) -> Any:
        """A value derived from this object, kept in its state (`nbytes`: its size, or a
        function of the value giving it)."""
        st = self.state()
        value = st.values.get(kind, _MISSING)
        if value is _MISSING:
            value = compute()
            self.file.remember(self.address, st, kind, value, nbytes(value) if callable(nbytes) else nbytes)
        return value

    def has(self, kind: Hashable) -> bool:
        """Whether a value of `kind` is cached (no I/O: an evicted state is not read again)."""
        st = self.file.peek_state(self.address)
        return st is not None and kind in st.values

    @property
    def header(self) -> object_header.ObjectHeader:
        return self.state().header

    # -- messages ---------------------------------------------------------------------------
    def decode(self, raw: object_header.RawMessage, depth: int = 0) -> Any:
        """Decode one message, following a shared-message reference to where the body lives."""
        name = M.NAMES.get(raw.type, f"type {raw.type:#x}")
        what = f"{self.path}: {name} message"
        if raw.shared:
            if depth >= MAX_SHARED_DEPTH:
                raise FormatError(f"{what}: shared message chain too deep")
            try:
                ref = shared.decode(Reader(raw.data, 0, self.file.sizes, what))
                body = self.file.shared_message_body(ref, raw.type, what)
            except UNEXPECTED as e:
                raise internal_error(what, e) from e
            return self.decode(body, depth + 1)
        decoder = M.DECODERS.get(raw.type)
        if decoder is None:
            raise FormatError(f"{what}: no decoder")
        try:
            return decoder(Reader(raw.data, 0, self.file.sizes, what))
        except H5fsError as e:
            if str(e).startswith(self.path):
                raise
            raise type(e)(f"{what}: {e}") from None
        except UNEXPECTED as e:
            raise internal_error(what, e) from e

    def message(self, mtype: int) -> Any:
        """The first message of type `mtype` decoded (cached under the type number), or None.
        A decoded message record takes about 60 bytes and twice its stored size (measured with
        tracemalloc on libhdf5's headers), a datatype up to eight times (compound members)."""
        st = self.state()
        value = st.values.get(mtype, _MISSING)
        if value is _MISSING:
            raw = st.header.first(mtype)
            value = None if raw is None else self.decode(raw)
            self.file.remember(self.address, st, mtype, value, 0 if raw is None else 60 + (8 if mtype == M.DATATYPE else 2) * len(raw.data))
        return value

    # -- common facts (from the cached header and messages: no decoding on a hit) -----------
    @property
    @guarded
    def nlink(self) -> int:
        """Its hard links, less those whose removal waits to land (storage/pending_links.py)."""
        header = self.header
        count = header.refcount if header.version == 1 else self.message(M.REFCOUNT) or 1
        return max(1, count - self.file.pending.unrefs_of(self.address))

    @property
    @guarded
    def mtime(self) -> float | None:
        header = self.header
        for mtype in (M.MTIME, M.MTIME_OLD):
            if header.first(mtype) is not None:
                try:
                    return self.message(mtype)
                except H5fsError:
                    return None
        return float(header.times[1]) if header.times else None

    @property
    @guarded
    def ctime(self) -> float | None:
        """The change time a version 2 header keeps among its times (no message holds one)."""
        times = self.header.times
        return float(times[2]) if times else None

    @property
    @guarded
    def comment(self) -> str | None:
        return self.message(M.COMMENT)

    @property
    @guarded
    def dense_attributes(self) -> bool:
        """Attributes kept in a fractal heap (reading them is I/O), not all in the header."""
        info = self.message(M.ATTRIBUTE_INFO)
        return info is not None and info.heap_address is not None

    facts_from_header = True  # `facts()` needs nothing beyond the parsed header (no I/O)

    def attributes(self) -> list[Attribute]:
        return list(self._attributes)

    @derived(table_nbytes)
    def _attributes(self) -> tuple[Attribute, ...]:
        return read_attributes(self)

    def facts(self) -> dict[str, str]:
        """Readable facts about the object (a copy of the cached ones: callers may add theirs)."""
        return dict(self._facts)

    @derived(lambda facts: 250 + sum(120 + len(k) + len(v) for k, v in facts.items()))
    def _facts(self) -> dict[str, str]:
        return self._compute_facts()

    def _compute_facts(self) -> dict[str, str]:
        out = {"kind": self.kind, "address": str(self.address)}
        if self.comment:
            out["comment"] = self.comment
        return out


class NamedDatatype(H5Object):
    __slots__ = ()
    kind = "datatype"

    @property
    def datatype(self):
        return self.message(M.DATATYPE)

    def _compute_facts(self) -> dict[str, str]:
        out = super()._compute_facts()
        out["dtype"] = describe(self.datatype)
        return out
