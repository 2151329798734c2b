"""Secrets never leave: what the run stores or prints passes through here first.

Credentials ride along in places a cluster evaluation has to read: a wheel index URL with
``user:token@``, a CIFS or FUSE mount with ``password=`` in its options. The report needs none of
them. ``scrub`` blanks them in any text (the run folder's writer and the console both use it);
``mount_options`` keeps only the options the report reads (layout and protocol facts).
Pure: strings in, strings out.
"""

from __future__ import annotations

import re

HIDDEN = "***"

# scheme://userinfo@host: the userinfo (a user, a token, user:password) is dropped whole
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@'\"<>]+@")
# key=value pairs whose value is a credential (mount options, query strings, env-style dumps)
_SECRET_KEYS = ("password", "passwd", "pass", "pwd", "secret", "secretkey", "secret_key", "token", "authtoken",
                "auth_token", "access_token", "apikey", "api_key", "access_key", "accesskey", "key",
                "credentials", "credential", "cred", "creds", "auth", "mount_token", "sas", "sig", "signature")
_SECRET_PAIR = re.compile(r"(?i)(?<![A-Za-z0-9_])(" + "|".join(_SECRET_KEYS) + r")=([^,\s&;'\"]+)")

# The mount options the report and the layout notes read; every other option is dropped.
_KEPT_OPTIONS = frozenset({
    "rw", "ro", "sync", "async", "relatime", "noatime", "nodiratime", "strictatime", "dirsync",
    "nosuid", "nodev", "noexec", "bind", "hard", "soft", "intr", "nointr", "ac", "noac", "sharecache",
    "flock", "localflock", "noflock", "lazystatfs", "user_xattr", "acl", "noacl", "dax", "discard",
    "vers", "nfsvers", "proto", "rsize", "wsize", "timeo", "retrans", "nconnect", "port", "mountproto",
    "mountvers", "namlen", "local_lock", "lookupcache", "actimeo", "acregmin", "acregmax", "acdirmin",
    "acdirmax", "cache", "max_read", "max_write", "size", "nr_inodes", "mode", "inode64", "logbufs",
    "logbsize", "sunit", "swidth", "noquota", "stripe", "data", "errors", "commit", "barrier",
    "checksum", "encrypt", "tag", "default_permissions", "allow_other", "blksize",
})


def scrub(text: str) -> str:
    """``text`` with URL credentials and credential-valued options replaced by ``***``."""
    if not text or ("@" not in text and "=" not in text):
        return text
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{HIDDEN}@", text)
    return _SECRET_PAIR.sub(lambda m: f"{m.group(1)}={HIDDEN}", text)


def scrub_bytes(data: bytes) -> bytes:
    """``scrub`` for text files written as bytes; binary data (a PNG) is left as it is."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    cleaned = scrub(text)
    return data if cleaned == text else cleaned.encode("utf-8")


def mount_options(options: str) -> str:
    """The comma-separated options of one mount, reduced to the ones the report reads."""
    kept = []
    for opt in options.split(","):
        key = opt.split("=", 1)[0].strip().lower()
        if key in _KEPT_OPTIONS:
            kept.append(opt)
    return ",".join(kept)


def mount_table(text: str) -> str:
    """A ``/proc/mounts`` copy with every line's options reduced by ``mount_options``."""
    out = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) == 6 and fields[5].isdigit():
            fields[3] = mount_options(fields[3]) or "-"
            line = " ".join(fields)
        out.append(scrub(line))
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def findmnt_table(text: str) -> str:
    """``findmnt -r`` output (header line first) with its OPTIONS column reduced by ``mount_options``."""
    out, column = [], -1
    for line in text.splitlines():
        words = line.split(" ")
        if column < 0 and "OPTIONS" in words and "TARGET" in words:
            column = words.index("OPTIONS")
        elif column >= 0 and len(words) > column:
            words[column] = mount_options(words[column]) or "-"
            line = " ".join(words)
        out.append(scrub(line))
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")
