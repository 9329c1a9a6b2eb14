"""Secrets out of messages: what a log line, a banner or a report may say about a location.

Storage errors quote URLs and server replies, which can hold credentials: a user name and
password in a URL, a signed URL's query string, an access key id, a session token, the
value of a secret variable the process was started with. `redact` replaces each with
``…`` (keeping what tells the user where: the scheme, the host, the bucket, the path).
"""

from __future__ import annotations

import os
import re

__all__ = ["redact", "SECRET_VARIABLES"]

#: Environment variables whose values are secrets (or name one) in any message.
SECRET_VARIABLES = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
    "AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_SECRET", "GOOGLE_OAUTH_ACCESS_TOKEN",
    "HADOOP_TOKEN", "KRB5CCNAME",
)

_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*://)[^/\s@'\"]*@")
_QUERY = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*://[^\s?'\"]*)\?[^\s'\"]*")
_KEY_VALUE = re.compile(
    r"(?i)\b(x-amz-[a-z\-]*|signature|sig|se|sp|sv|credential|awsaccesskeyid|access_?token|"
    r"refresh_?token|id_?token|token|secret|password|passwd|key|accountkey|sharedaccesssignature)"
    r"(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s&;,'\"]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9\-._~+/]+=*")
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{12,}\b")
_GOOGLE_TOKEN = re.compile(r"\bya29\.[A-Za-z0-9\-._~+/]+")
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)", re.S)


def redact(text) -> str:
    """`text` with anything that may be a credential replaced by ``…``."""
    text = str(text)
    for name in SECRET_VARIABLES:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "…")
    text = _PRIVATE_KEY.sub("…", text)
    text = _USERINFO.sub(r"\1…@", text)
    text = _QUERY.sub(r"\1?…", text)
    text = _KEY_VALUE.sub(r"\1\2…", text)
    text = _BEARER.sub(r"\1 …", text)
    text = _AWS_KEY_ID.sub("…", text)
    text = _GOOGLE_TOKEN.sub("…", text)
    return text
