"""A named profile of the shared AWS files, read as the AWS tools read it.

The AWS tools look for credentials in the environment first (``AWS_ACCESS_KEY_ID``), then
in the profile ``AWS_PROFILE`` names (``default`` when it names none) of the shared
credentials file (``AWS_SHARED_CREDENTIALS_FILE``, else ``~/.aws/credentials``) and the
config file (``AWS_CONFIG_FILE``, else ``~/.aws/config``, where a profile's section is
``[profile NAME]``, the default's ``[default]``), then in web identity and the instance's
role. The request client reads the environment and the last two itself; this module is
the step between: a profile's static keys (and session token), and its ``region`` and
``endpoint_url``. A profile that gets its keys some other way (assuming a role, single
sign-on, a credential process) is refused, saying what to use instead; a profile
``AWS_PROFILE`` names that the files do not hold is refused naming the files.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from conveyor.errors import InvalidArgument

#: Settings by which a profile gets credentials other than static keys.
_OTHER_SOURCES = ("role_arn", "credential_source", "credential_process", "sso_session",
                  "sso_start_url", "web_identity_token_file")


@dataclass(frozen=True)
class Profile:
    name: str
    access_key_id: str
    secret_access_key: str
    session_token: str = ""
    region: str = ""
    endpoint_url: str = ""

    def __repr__(self) -> str:  # never the keys
        return f"Profile({self.name!r}, region={self.region!r})"


def _read(path: Path) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(default_section="\0none")
    try:
        parser.read_string(path.read_text())
    except FileNotFoundError:
        pass
    except (OSError, configparser.Error) as exc:
        raise InvalidArgument(f"object storage: cannot read the AWS file {str(path)!r}: "
                              f"{exc}; fix it, or give the keys in AWS_ACCESS_KEY_ID and "
                              "AWS_SECRET_ACCESS_KEY") from None
    return parser


def _section(parser: configparser.RawConfigParser, name: str) -> dict[str, str]:
    return dict(parser.items(name)) if parser.has_section(name) else {}


def profile_from_files(env: Mapping[str, str] | None = None) -> Profile | None:
    """The profile's keys where the environment holds none, else None (no profile named
    and no default one in the files: the client goes on to web identity and the
    instance's role)."""
    env = os.environ if env is None else env
    if env.get("AWS_ACCESS_KEY_ID"):
        return None
    named = env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or ""
    name = named or "default"
    home = Path(env.get("HOME") or Path.home())
    credentials_file = Path(env.get("AWS_SHARED_CREDENTIALS_FILE")
                            or home / ".aws" / "credentials")
    config_file = Path(env.get("AWS_CONFIG_FILE") or home / ".aws" / "config")
    credentials = _section(_read(credentials_file), name)
    config = _section(_read(config_file), name if name == "default" else f"profile {name}")
    if not credentials and not config:
        if named:
            raise InvalidArgument(
                f"object storage: AWS_PROFILE names the profile {name!r}, which neither "
                f"{str(credentials_file)!r} nor {str(config_file)!r} holds: add it, or "
                "name another (AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE say where "
                "the files are)")
        return None
    settings = {**config, **credentials}  # the credentials file wins, as for the tools
    key, secret = settings.get("aws_access_key_id", ""), settings.get("aws_secret_access_key",
                                                                      "")
    if not key or not secret:
        other = [s for s in _OTHER_SOURCES if s in settings]
        how = (f"gets its credentials by {', '.join(other)}, which this server does not do"
               if other else "holds no aws_access_key_id and aws_secret_access_key")
        raise InvalidArgument(
            f"object storage: the AWS profile {name!r} {how}: give it static keys, or "
            "give the server web identity (a Kubernetes service account), an instance "
            "role, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    return Profile(name, key, secret, settings.get("aws_session_token", ""),
                   settings.get("region", ""), settings.get("endpoint_url", ""))
