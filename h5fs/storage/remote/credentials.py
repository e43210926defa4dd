"""S3 credentials and region found the way the AWS tools find them: the environment first
(obstore reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, web
identity and instance metadata itself), then a profile of the shared files (~/.aws/credentials
and ~/.aws/config, or AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE; the profile named by the
`profile=` option, else AWS_PROFILE, else "default"). Profiles that run a program or single
sign-on (credential_process, sso_*, role_arn) need boto3, used when it is installed."""

from __future__ import annotations

import configparser
import os
from typing import Any

from ...errors import H5fsError

KEYS = {"aws_access_key_id": "access_key_id", "aws_secret_access_key": "secret_access_key",
        "aws_session_token": "session_token"}
DELEGATED = ("credential_process", "sso_session", "sso_start_url", "role_arn", "web_identity_token_file")


def _section(path: str, name: str) -> dict[str, str]:
    parser = configparser.RawConfigParser()
    try:
        parser.read(path)
    except configparser.Error as e:
        raise H5fsError(f"{path}: cannot be read: {e}") from e
    return dict(parser[name]) if parser.has_section(name) else {}


def profile_config(profile: str | None) -> tuple[dict[str, Any], Any]:
    """(S3Store config entries, a credential provider or None) for `profile`; empty when the
    environment already holds keys and no profile was asked for."""
    if profile is None and os.environ.get("AWS_ACCESS_KEY_ID"):
        return {}, None
    name = profile or os.environ.get("AWS_PROFILE") or "default"
    home = os.path.expanduser("~")
    creds = _section(os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(home, ".aws", "credentials"), name)
    conf = _section(os.environ.get("AWS_CONFIG_FILE") or os.path.join(home, ".aws", "config"),
                    name if name == "default" else f"profile {name}")
    if profile is not None and not creds and not conf:
        raise H5fsError(f"AWS profile {profile!r} is in neither ~/.aws/credentials nor ~/.aws/config")
    config: dict[str, Any] = {}
    if "region" in conf and not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
        config["region"] = conf["region"]
    merged = {**conf, **creds}
    if all(k in merged for k in ("aws_access_key_id", "aws_secret_access_key")):
        config.update({ours: merged[theirs] for theirs, ours in KEYS.items() if theirs in merged})
        return config, None
    if any(k in merged for k in DELEGATED):
        try:   # optional: boto3 resolves profiles, SSO and roles, only when the credentials ask for it
            import boto3
            from obstore.auth.boto3 import Boto3CredentialProvider
        except ImportError as e:
            raise H5fsError(f"AWS profile {name!r} gets its credentials from a program or single sign-on: "
                            f"install boto3 for that, or give keys in the environment") from e
        return config, Boto3CredentialProvider(boto3.Session(profile_name=name))
    return config, None
