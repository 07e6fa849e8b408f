"""Delta tables on S3-compatible object stores: one location, two file systems.

delta-rs reaches a bucket as ``s3://bucket/prefix`` (``s3a://`` too) with its storage
options (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ... in a dict, or the same names in
the environment). Spark reaches it through Hadoop's S3A file system, which knows only
``s3a://`` and reads ``fs.s3a.*`` settings. :func:`spark_path` maps a location to
Spark's scheme and :func:`s3a_conf` the storage options to S3A settings, so a table
written by one writer is read by the other.

Commits: delta-rs writes each log entry with a conditional put (``If-None-Match: *``),
so racing writers cannot overwrite each other's commits; a store that does not take
conditional writes cannot take commits either (delta-rs 1.x has no other way). Delta
Lake on Spark writes ``s3a://`` logs through ``S3SingleDriverLogStore``, which is safe
within one Spark driver only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

#: Storage options delta-rs takes (upper-case here; delta-rs takes any case) and the
#: S3A settings carrying the same meaning.
_S3A = {
    "AWS_ENDPOINT_URL": "endpoint",
    "AWS_ENDPOINT": "endpoint",
    "AWS_ACCESS_KEY_ID": "access.key",
    "AWS_SECRET_ACCESS_KEY": "secret.key",
    "AWS_SESSION_TOKEN": "session.token",
    "AWS_REGION": "endpoint.region",
    "AWS_DEFAULT_REGION": "endpoint.region",
}


def is_s3(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an ``s3://`` or ``s3a://`` location."""
    return urlsplit(os.fspath(path)).scheme in ("s3", "s3a")


def spark_path(path: str) -> str:
    """``path`` as Spark opens it: ``s3://`` becomes ``s3a://`` (Hadoop's S3A file
    system; Spark has no ``s3://`` file system of its own). Anything else is unchanged."""
    if path.startswith("s3://"):
        return "s3a://" + path[len("s3://") :]
    return path


def s3a_conf(
    storage_options: Mapping[str, str] | None = None,
    *,
    bucket: str | None = None,
    prefix: str = "spark.hadoop.",
) -> dict[str, str]:
    """The S3A settings that reach the store delta-rs reaches with ``storage_options``,
    or, without them, with the environment's ``AWS_*`` variables: endpoint, keys, session
    token, region; path-style requests with a custom endpoint (as delta-rs makes them
    unless ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST`` is true) and no TLS for an ``http://``
    endpoint.

    ``prefix``: ``"spark.hadoop."`` for a session builder's config
    (``pgwire_cdc.spark.session(delta=True, **s3a_conf())``), ``""`` for
    ``spark.conf.set`` on a running session (before it first opens the bucket).
    ``bucket``: settings for that bucket only (``fs.s3a.bucket.<bucket>.*``)."""
    given = storage_options if storage_options is not None else os.environ
    options = {k.upper(): str(v) for k, v in given.items() if k.upper().startswith("AWS_")}
    scope = f"fs.s3a.bucket.{bucket}." if bucket else "fs.s3a."
    conf: dict[str, str] = {}
    for option, setting in _S3A.items():
        if options.get(option) and f"{prefix}{scope}{setting}" not in conf:
            conf[f"{prefix}{scope}{setting}"] = options[option]
    endpoint = options.get("AWS_ENDPOINT_URL") or options.get("AWS_ENDPOINT")
    if endpoint:
        virtual = options.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "").lower() == "true"
        conf[f"{prefix}{scope}path.style.access"] = "false" if virtual else "true"
        if endpoint.startswith("http://"):
            conf[f"{prefix}{scope}connection.ssl.enabled"] = "false"
    if options.get("AWS_SESSION_TOKEN"):
        conf[f"{prefix}{scope}aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        )
    return conf


def bucket_of(path: str) -> str | None:
    """The bucket of an ``s3://`` / ``s3a://`` location, None for anything else."""
    parts = urlsplit(path)
    return (parts.netloc or None) if parts.scheme in ("s3", "s3a") else None
