"""A named profile of the shared AWS files, read as the AWS tools read it: only where the
environment holds no keys; ``AWS_PROFILE`` (else ``default``); the credentials file over
the config file; a profile that gets keys another way, or one named and absent, refused
saying what to do; the keys never in its ``repr``."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor import errors
from conveyor_server.engine.data.aws_profile import profile_from_files

CREDENTIALS = """
[default]
aws_access_key_id = DEFAULTKEY
aws_secret_access_key = defaultsecret

[reader]
aws_access_key_id = READERKEY
aws_secret_access_key = readersecret
aws_session_token = readertoken
region = from-credentials

[assumed]
role_arn = arn:aws:iam::123456789012:role/reader
source_profile = default
"""

CONFIG = """
[default]
region = eu-west-3

[profile reader]
region = from-config
endpoint_url = http://store.local:8333

[profile onlyconfig]
aws_access_key_id = CONFIGKEY
aws_secret_access_key = configsecret
"""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "credentials").write_text(CREDENTIALS)
    (tmp_path / "config").write_text(CONFIG)
    return {"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
            "AWS_CONFIG_FILE": str(tmp_path / "config"), "HOME": str(tmp_path)}


def test_keys_in_the_environment_come_first(files: dict[str, str]) -> None:
    assert profile_from_files({**files, "AWS_ACCESS_KEY_ID": "ENVKEY",
                               "AWS_PROFILE": "reader"}) is None


def test_the_named_profile_with_its_config(files: dict[str, str]) -> None:
    profile = profile_from_files({**files, "AWS_PROFILE": "reader"})
    assert profile is not None
    assert (profile.access_key_id, profile.secret_access_key, profile.session_token) == \
        ("READERKEY", "readersecret", "readertoken")
    assert profile.region == "from-credentials"  # the credentials file wins
    assert profile.endpoint_url == "http://store.local:8333"
    assert "READERKEY" not in repr(profile) and "readersecret" not in repr(profile)


def test_the_default_profile_without_a_name(files: dict[str, str]) -> None:
    profile = profile_from_files(files)
    assert profile is not None and profile.name == "default"
    assert (profile.access_key_id, profile.region) == ("DEFAULTKEY", "eu-west-3")
    only = profile_from_files({**files, "AWS_PROFILE": "onlyconfig"})
    assert only is not None and only.access_key_id == "CONFIGKEY"


def test_no_files_and_no_name_is_no_profile(tmp_path: Path) -> None:
    assert profile_from_files({"HOME": str(tmp_path)}) is None


def test_a_named_profile_the_files_do_not_hold_is_refused(files: dict[str, str]) -> None:
    with pytest.raises(errors.InvalidArgument) as caught:
        profile_from_files({**files, "AWS_PROFILE": "nobody"})
    message = caught.value.message
    assert "AWS_PROFILE names the profile 'nobody'" in message
    assert files["AWS_SHARED_CREDENTIALS_FILE"] in message and files["AWS_CONFIG_FILE"] in message


def test_a_profile_that_assumes_a_role_is_refused_saying_what_to_use(
        files: dict[str, str]) -> None:
    with pytest.raises(errors.InvalidArgument) as caught:
        profile_from_files({**files, "AWS_PROFILE": "assumed"})
    message = caught.value.message
    assert "the AWS profile 'assumed' gets its credentials by role_arn" in message
    assert "web identity" in message and "AWS_ACCESS_KEY_ID" in message


def test_a_file_that_does_not_parse_is_named(tmp_path: Path) -> None:
    (tmp_path / "credentials").write_text("aws_access_key_id = outside any section\n")
    with pytest.raises(errors.InvalidArgument, match="cannot read the AWS file"):
        profile_from_files({"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
                            "HOME": str(tmp_path)})
