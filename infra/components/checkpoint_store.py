"""CheckpointStore: the S3 bucket training jobs checkpoint into."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.components import TOKEN_PREFIX
from infra.config import CheckpointStore as CheckpointConfig


class CheckpointStore(pulumi.ComponentResource):
    """Versioned, encrypted, private bucket; old versions expire so checkpoints every few
    hundred steps do not pile up forever."""

    def __init__(
        self, name: str, args: CheckpointConfig, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:CheckpointStore", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.bucket = aws.s3.Bucket(f"{name}-bucket", force_destroy=False, opts=child)
        aws.s3.BucketOwnershipControls(
            f"{name}-ownership",
            bucket=self.bucket.id,
            rule={"object_ownership": "BucketOwnerEnforced"},
            opts=child,
        )
        aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access",
            bucket=self.bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-sse",
            bucket=self.bucket.id,
            rules=[
                {
                    "apply_server_side_encryption_by_default": {"sse_algorithm": "aws:kms"},
                    "bucket_key_enabled": True,
                }
            ],
            opts=child,
        )
        versioning = aws.s3.BucketVersioning(
            f"{name}-versioning",
            bucket=self.bucket.id,
            versioning_configuration={"status": "Enabled"},
            opts=child,
        )
        s3 = aws.s3
        rule = s3.BucketLifecycleConfigurationRuleArgs(
            id="expire-old-checkpoints",
            status="Enabled",
            filter=s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
            noncurrent_version_expiration=s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                noncurrent_days=args.noncurrent_version_days
            ),
            abort_incomplete_multipart_upload=s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                days_after_initiation=7
            ),
            expiration=s3.BucketLifecycleConfigurationRuleExpirationArgs(
                days=args.expire_after_days
            )
            if args.expire_after_days
            else None,
        )
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle",
            bucket=self.bucket.id,
            rules=[rule],
            # Lifecycle rules on noncurrent versions need versioning in place first.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[versioning]),
        )
        self.register_outputs({"bucket": self.bucket.bucket, "arn": self.bucket.arn})
