"""The stock S3 way to empty and remove a bucket, as a command for `rgwkeeper verify
--maintenance-cmd`: list 1,000 keys, DeleteObjects them, one request at a time (what
``aws s3 rm --recursive`` does), then DeleteBucket.

    .venv/bin/python -m bench.s3_one_batch --endpoint URL --credentials FILE BUCKET
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--credentials", type=Path, required=True, help="the harness's 0600 credentials file")
    p.add_argument("bucket")
    args = p.parse_args()
    empty_and_remove(client(args.endpoint, args.credentials), args.bucket)


def client(endpoint: str, credentials: Path) -> Any:
    """A plain boto3 S3 client for the harness's RGW (path-style, the credentials file's keys)."""
    import boto3
    from botocore.config import Config

    from rgwkeeper.access import load_credentials

    creds = load_credentials(credentials)
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=creds.access_key,
                        aws_secret_access_key=creds.secret_key, region_name="default",
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5}))


def empty_and_remove(s3: Any, bucket: str) -> None:
    """List 1,000 keys, delete them in one DeleteObjects, repeat; then DeleteBucket."""
    token: dict[str, Any] = {}
    while True:
        page = s3.list_objects_v2(Bucket=bucket, MaxKeys=1000, **token)
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        if not page.get("IsTruncated"):
            break
        token = {"ContinuationToken": page["NextContinuationToken"]}
    s3.delete_bucket(Bucket=bucket)


if __name__ == "__main__":
    main()
