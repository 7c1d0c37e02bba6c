"""Lustre: FSx for Lustre in the cluster's subnet, with S3 data repository associations."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.components import TOKEN_PREFIX
from infra.config import Lustre as LustreConfig


@dataclass
class LustreArgs:
    config: LustreConfig
    subnet_id: pulumi.Input[str]
    security_group_ids: list[pulumi.Input[str]]
    checkpoint_bucket: pulumi.Input[str]


class Lustre(pulumi.ComponentResource):
    """PERSISTENT_2 (or SCRATCH_2) Lustre 2.15 with LZ4 compression.

    S3 is linked through data repository associations: on PERSISTENT_2 the file system's own
    import/export paths do not work.
    """

    def __init__(
        self, name: str, args: LustreArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:Lustre", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cfg = args.config
        persistent = cfg.deployment_type == "PERSISTENT_2"
        metadata = None
        if persistent and cfg.metadata is not None:
            metadata = aws.fsx.LustreFileSystemMetadataConfigurationArgs(
                mode=cfg.metadata.mode, iops=cfg.metadata.iops
            )
        self.file_system = aws.fsx.LustreFileSystem(
            f"{name}-fs",
            storage_capacity=cfg.storage_capacity_gib,
            storage_type="SSD",
            deployment_type=cfg.deployment_type,
            per_unit_storage_throughput=cfg.per_unit_storage_throughput,
            subnet_ids=args.subnet_id,
            security_group_ids=args.security_group_ids,
            data_compression_type="LZ4",
            file_system_type_version="2.15",
            metadata_configuration=metadata,
            efa_enabled=cfg.efa_enabled if persistent else None,
            opts=child,
        )
        self.associations: list[aws.fsx.DataRepositoryAssociation] = []
        for dra in cfg.data_repository_associations:
            if dra.data_repository_path == "checkpoints":
                repo: pulumi.Input[str] = pulumi.Output.concat("s3://", args.checkpoint_bucket)
            else:
                repo = dra.data_repository_path
            # Keyed by the mount path, which is unique per file system and stable.
            key = dra.file_system_path.strip("/").replace("/", "-") or "root"
            fsx = aws.fsx
            s3 = fsx.DataRepositoryAssociationS3Args(
                auto_import_policy=fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(
                    events=list(dra.events)
                ),
                auto_export_policy=fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(
                    events=list(dra.events)
                )
                if dra.export
                else None,
            )
            self.associations.append(
                aws.fsx.DataRepositoryAssociation(
                    f"{name}-dra-{key}",
                    file_system_id=self.file_system.id,
                    file_system_path=dra.file_system_path,
                    data_repository_path=repo,
                    batch_import_meta_data_on_create=True,
                    s3=s3,
                    opts=child,
                )
            )
        self.register_outputs(
            {
                "dns_name": self.file_system.dns_name,
                "mount_name": self.file_system.mount_name,
                "file_system_id": self.file_system.id,
            }
        )
