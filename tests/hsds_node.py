"""One HSDS node (service or data node) bound to 127.0.0.1, as tests/hsds_server.py starts it:
`python3 tests/hsds_node.py --node_type=sn|dn ...` with HSDS's own options, which HSDS reads from
sys.argv itself. HSDS's run_app call names no host, so its site would listen on every interface."""

import aiohttp.web

_run_app = aiohttp.web.run_app


def _loopback_run_app(app, **kwargs):
    # a stop (SIGTERM) waits at most 1 s for requests in flight, not aiohttp's 60 s
    return _run_app(app, host="127.0.0.1", shutdown_timeout=1.0, **kwargs)


if __name__ == "__main__":
    aiohttp.web.run_app = _loopback_run_app     # before HSDS's modules import it by name
    from hsds.node_runner import main
    main()
