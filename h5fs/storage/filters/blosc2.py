from ...errors import Unsupported
def decode(data, spec, limit, info):
    raise Unsupported("todo")
