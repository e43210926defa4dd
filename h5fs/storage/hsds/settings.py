"""Where an HSDS service is and who asks, found as h5pyd finds it, and how requests behave.

Each of the endpoint, user name and password comes from the first place that has it: what the
caller gives (mount options), the environment (HS_ENDPOINT, HS_USERNAME, HS_PASSWORD), then the
config file (`~/.hscfg`, or the one named; h5pyd's format: `hs_endpoint = URL` lines, `#`
comments). A password file (its content, without a final newline, is the password) stands for an
explicit password, so a password need not appear in the process table or in fstab.
h5pyd also reads a `.hscfg` in the working directory first; a daemon's working directory is
no place for credentials, so that one is not read here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ...errors import H5fsError

MiB = 1 << 20


class SettingsError(H5fsError):
    """Settings that cannot work (no endpoint, a URL that is no http(s) URL, an unreadable file)."""


@dataclass(frozen=True)
class HsdsSettings:
    endpoint: str                      # http(s)://HOST:PORT, no trailing slash
    username: str | None = None        # None: anonymous requests
    password: str | None = field(default=None, repr=False)
    timeout: float = 30.0              # seconds for a connection, and for each read of an answer
    retries: int = 3                   # attempts after the first, for GET, PUT and DELETE only
    backoff: float = 0.1               # seconds before the first retry; doubled each time
    max_backoff: float = 2.0
    connections: int = 16              # pooled connections kept open (threads asking at once)
    max_json: int = 64 * MiB           # the largest JSON answer taken
    max_value: int = 128 * MiB         # the largest variable-length value taken (its size is unknown
                                       # before it arrives; fixed-size ones are checked by size)
    verify_tls: bool = True


def read_config_file(path: str) -> dict[str, str]:
    """The `key = value` lines of an h5pyd config file (`#` comments, blank lines; a value may
    hold '=': h5pyd cuts it at the second '=', here only the first separates)."""
    values: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                text = line.strip()
                if not text or text.startswith("#") or "=" not in text:
                    continue
                key, _, value = text.partition("=")
                values[key.strip()] = value.strip()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        raise SettingsError(f"HSDS config file {path}: {e}") from e
    return values


def read_password_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise SettingsError(f"HSDS password file {path}: {e}") from e
    return text[:-1] if text.endswith("\n") else text


def check_endpoint(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SettingsError(f"HSDS endpoint {url!r}: not an http:// or https:// URL")
    if parts.query or parts.fragment:
        raise SettingsError(f"HSDS endpoint {url!r}: a query or fragment has no place in it")
    return url.strip().rstrip("/")


def resolve(endpoint: str | None = None, username: str | None = None, password: str | None = None,
            password_file: str | None = None, config_file: str | None = None,
            environ: dict[str, str] | None = None, **options) -> HsdsSettings:
    """HsdsSettings from the caller's values, the environment and the config file, in that order
    (see the module's docstring); `options` are HsdsSettings' other fields."""
    if password is not None and password_file is not None:
        raise SettingsError("give an HSDS password or a password file, not both")
    env = os.environ if environ is None else environ
    path = config_file or os.path.join(os.path.expanduser("~"), ".hscfg")
    conf = read_config_file(path)
    if config_file and not os.path.exists(config_file):
        raise SettingsError(f"HSDS config file {config_file}: no such file")
    if password_file is not None:
        password = read_password_file(password_file)

    def pick(given: str | None, key: str) -> str | None:
        for value in (given, env.get(key.upper()), conf.get(key)):
            if value:     # h5pyd treats an empty value as none given
                return value
        return None

    url = pick(endpoint, "hs_endpoint")
    if url is None:
        raise SettingsError(f"no HSDS endpoint: give one, set HS_ENDPOINT, or put hs_endpoint in {path}")
    user = pick(username, "hs_username")
    secret = pick(password, "hs_password")
    if secret is not None and user is None:
        raise SettingsError("an HSDS password without a user name")
    return HsdsSettings(endpoint=check_endpoint(url), username=user, password=secret, **options)


SCHEME = "hsds://"


def is_domain_url(name: str) -> bool:
    """Whether `name` names an HSDS domain (hsds://[HOST[:PORT]]/DOMAIN) rather than a file."""
    return name.lower().startswith(SCHEME)


def split_domain_url(url: str) -> tuple[str | None, str]:
    """(the endpoint the URL names, http://HOST[:PORT], or None; the domain, an absolute path)
    of hsds://[HOST[:PORT]]/DOMAIN."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "hsds" or parts.query or parts.fragment or "@" in parts.netloc:
        raise SettingsError(f"{url}: an HSDS domain is named hsds://[HOST[:PORT]]/DOMAIN (no user, query or fragment)")
    if not parts.path.startswith("/") or parts.path.rstrip("/") == "":
        raise SettingsError(f"{url}: no domain path (hsds:///home/USER/FILE.h5)")
    return (f"http://{parts.netloc}" if parts.netloc else None), parts.path
