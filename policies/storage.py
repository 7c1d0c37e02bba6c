"""Storage policies: EBS, FSx for Lustre and S3 encrypted; S3 public access blocked.

S3 settings live in separate resources (ownership, public access block, SSE configuration),
so a resource policy checks each setting and a stack policy checks every bucket has them.
"""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from policies.common import (
    BUCKET,
    BUCKET_V2,
    INSTANCE,
    LAUNCH_TEMPLATE,
    LUSTRE,
    deps,
    get,
    of_type,
    schema,
    settings,
    truthy,
)

SSE_TYPES = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
)
PAB_TYPE = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
PAB_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
SSE_ALGORITHMS = ("aws:kms", "aws:kms:dsse", "AES256")
PUBLIC_ACLS = ("public-read", "public-read-write", "authenticated-read")
EBS_VOLUME = "aws:ebs/volume:Volume"

FSX_SCHEMA = schema(
    requireCustomerManagedKey={
        "type": "boolean",
        "default": False,
        "description": "Require kmsKeyId (a customer managed key) on persistent file systems",
    },
)


def ebs_encrypted(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """EBS volumes, launch-template block devices and instance root volumes are encrypted.

    >>> # "... dev-lt block device /dev/sda1 is not encrypted: set ebs.encrypted to true"
    """
    label = f"{args.resource_type} {args.name}"
    if args.resource_type == EBS_VOLUME and not truthy(args.props.get("encrypted")):
        report_violation(f"{label} is not encrypted: set encrypted to true", None)
    if args.resource_type in (LAUNCH_TEMPLATE, INSTANCE):
        for bdm in args.props.get("blockDeviceMappings") or []:
            ebs = bdm.get("ebs")
            if ebs is not None and not truthy(ebs.get("encrypted")):
                report_violation(
                    f"{label} block device {bdm.get('deviceName')} is not encrypted: "
                    "set ebs.encrypted to true",
                    None,
                )
    if args.resource_type == INSTANCE:
        root = args.props.get("rootBlockDevice")
        if root is not None and not truthy(root.get("encrypted")):
            report_violation(f"{label} root volume is not encrypted", None)


def fsx_lustre_encrypted(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """FSx for Lustre: at rest FSx always encrypts; in transit needs a deployment type newer
    than SCRATCH_1; optionally a customer managed key.

    >>> # "... lustre-fs uses SCRATCH_1, which does not encrypt data in transit; ..."
    """
    if args.resource_type != LUSTRE:
        return
    cfg = settings(args, FSX_SCHEMA)
    deployment = args.props.get("deploymentType", "SCRATCH_1")
    label = f"{LUSTRE} {args.name}"
    if deployment == "SCRATCH_1":
        report_violation(
            f"{label} uses SCRATCH_1, which does not encrypt data in transit; "
            "use SCRATCH_2 or PERSISTENT_2",
            None,
        )
    if (
        cfg["requireCustomerManagedKey"]
        and str(deployment).startswith("PERSISTENT")
        and not args.props.get("kmsKeyId")
    ):
        report_violation(f"{label} has no kmsKeyId: a customer managed key is required", None)


def s3_encrypted(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """SSE configurations use KMS or AES256 on every rule.

    >>> # "... checkpoints-sse has no default encryption rule (sseAlgorithm aws:kms or AES256)"
    """
    if args.resource_type not in SSE_TYPES:
        return
    algorithms = [
        get(rule, "applyServerSideEncryptionByDefault.sseAlgorithm")
        for rule in args.props.get("rules") or []
    ]
    if not algorithms or any(a not in SSE_ALGORITHMS for a in algorithms):
        report_violation(
            f"{args.resource_type} {args.name} has no default encryption rule "
            f"(sseAlgorithm {' or '.join(SSE_ALGORITHMS)})",
            None,
        )


def s3_public_access_blocked(
    args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Public access blocks set all four flags; buckets have no public canned ACL.

    >>> # "... checkpoints-public-access leaves public access open: blockPublicPolicy"
    """
    if args.resource_type == PAB_TYPE:
        open_flags = [f for f in PAB_FLAGS if not truthy(args.props.get(f))]
        if open_flags:
            report_violation(
                f"{PAB_TYPE} {args.name} leaves public access open: {', '.join(open_flags)}",
                None,
            )
    elif args.resource_type in (BUCKET, BUCKET_V2) and args.props.get("acl") in PUBLIC_ACLS:
        report_violation(
            f"{args.resource_type} {args.name} has public ACL {args.props['acl']}", None
        )


def s3_bucket_guarded(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """Every bucket in the stack has a public access block and a default encryption rule.

    >>> # "aws:s3/bucket:Bucket logs has no BucketPublicAccessBlock; add one with all four flags"
    """
    guarded: dict[str, set[str]] = {}
    for r in of_type(args.resources, PAB_TYPE, *SSE_TYPES):
        kind = "pab" if r.resource_type == PAB_TYPE else "sse"
        for b in deps(r, "bucket"):
            guarded.setdefault(b.urn, set()).add(kind)
    for bucket in of_type(args.resources, BUCKET, BUCKET_V2):
        has = guarded.get(bucket.urn, set())
        if bucket.props.get("serverSideEncryptionConfiguration"):
            has.add("sse")
        if "pab" not in has:
            report_violation(
                f"{bucket.resource_type} {bucket.name} has no BucketPublicAccessBlock; "
                "add one with all four flags",
                bucket.urn,
            )
        if "sse" not in has:
            report_violation(
                f"{bucket.resource_type} {bucket.name} has no server-side encryption configuration",
                bucket.urn,
            )


POLICIES = [
    ResourceValidationPolicy(
        name="ebs-encrypted",
        description="EBS volumes and launch-template block devices are encrypted.",
        validate=ebs_encrypted,
        enforcement_level=EnforcementLevel.MANDATORY,
        remediation_steps='Set encrypted="true" on every ebs block device mapping.',
    ),
    ResourceValidationPolicy(
        name="fsx-lustre-encrypted",
        description="FSx for Lustre encrypts in transit (not SCRATCH_1) and, if required, "
        "uses a customer managed key.",
        validate=fsx_lustre_encrypted,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=FSX_SCHEMA,
        remediation_steps="Use PERSISTENT_2 (or SCRATCH_2); set kms_key_id when required.",
    ),
    ResourceValidationPolicy(
        name="s3-encrypted",
        description="S3 default encryption uses aws:kms or AES256.",
        validate=s3_encrypted,
        enforcement_level=EnforcementLevel.MANDATORY,
        remediation_steps="Add a BucketServerSideEncryptionConfiguration rule with aws:kms.",
    ),
    ResourceValidationPolicy(
        name="s3-public-access-blocked",
        description="S3 public access blocks set all four flags and buckets have no public ACL.",
        validate=s3_public_access_blocked,
        enforcement_level=EnforcementLevel.MANDATORY,
        remediation_steps=(
            "Set block_public_acls, block_public_policy, ignore_public_acls and "
            "restrict_public_buckets to true; drop public ACLs."
        ),
    ),
    StackValidationPolicy(
        name="s3-bucket-guarded",
        description="Every S3 bucket has a public access block and server-side encryption.",
        validate=s3_bucket_guarded,
        enforcement_level=EnforcementLevel.MANDATORY,
        remediation_steps="Declare buckets through the CheckpointStore component.",
    ),
]
