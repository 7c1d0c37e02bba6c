"""The suite's speed-ups (tests/unit/conftest.py) leave what they stand in for answering as
it did: DynamoDB transactions with ``_SnapshotOfNamedItems`` store, answer and roll back
what moto's own whole-table snapshot does; EC2 with ``_moto_builtin_images_only`` has every
built-in image and launches from it as before; EC2 reads a resource's tags by its id as
moto's ``describe_tags`` finds them; every botocore session shares one loader; the Pulumi mock
monitor gets the same resources without the SDK's stack traces."""

from __future__ import annotations

import copy
import random
from typing import Any

import boto3
import pulumi
import pulumi.runtime.resource
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb import models as moto_dynamodb_models
from moto.ec2.models import core as moto_ec2_core
from moto.ec2.models import ec2_backends
from moto.utilities.utils import load_resource

AMI = "ami-12c6146b"  # one of moto's built-in images, the one the unit tests launch from


def _transactions(rng: random.Random, ranged: bool) -> list[list[dict[str, Any]]]:
    """Random transactions on two tables: puts, updates, deletes and condition checks, some
    with conditions that fail (so moto rolls the whole transaction back)."""

    def key(table: str) -> dict[str, Any]:
        k: dict[str, Any] = {"pk": {"S": f"p{rng.randrange(3)}"}}
        if ranged:
            k["sk"] = {"S": f"s{rng.randrange(8)}"}
        return {"TableName": table, "Key": k}

    out = []
    for _ in range(60):
        tx, used = [], set()
        for _ in range(rng.randrange(1, 5)):
            op = key(rng.choice(["a", "b"]))
            ident = (op["TableName"], repr(op["Key"]))
            if ident in used:
                continue
            used.add(ident)
            kind = rng.choice(["Put", "Update", "Delete", "ConditionCheck"])
            cond = rng.choice([None, "attribute_exists(pk)", "attribute_not_exists(pk)"])
            if kind == "Put":
                body: dict[str, Any] = {
                    "TableName": op["TableName"],
                    "Item": {**op["Key"], "n": {"N": str(rng.randrange(100))}},
                }
            elif kind == "Update":
                body = {
                    **op,
                    "UpdateExpression": (
                        "SET n = :n, tags = list_append(if_not_exists(tags, :e), :t)"
                    ),
                    "ExpressionAttributeValues": {
                        ":n": {"N": str(rng.randrange(100))},
                        ":e": {"L": []},
                        ":t": {"L": [{"S": "x"}]},
                    },
                }
            elif kind == "ConditionCheck":
                body = {**op, "ConditionExpression": cond or "attribute_exists(pk)"}
            else:
                body = dict(op)
            if cond and kind != "ConditionCheck":
                body["ConditionExpression"] = cond
            tx.append({kind: body})
        out.append(tx)
    return out


def _run(ranged: bool) -> list[Any]:
    """Each transaction's outcome and both tables after it."""
    seen: list[Any] = []
    with mock_aws():
        ddb: Any = boto3.client("dynamodb", region_name="us-east-1")
        schema = [{"AttributeName": "pk", "KeyType": "HASH"}]
        attrs = [{"AttributeName": "pk", "AttributeType": "S"}]
        if ranged:
            schema.append({"AttributeName": "sk", "KeyType": "RANGE"})
            attrs.append({"AttributeName": "sk", "AttributeType": "S"})
        for t in ("a", "b"):
            ddb.create_table(
                TableName=t,
                KeySchema=schema,
                AttributeDefinitions=attrs,
                BillingMode="PAY_PER_REQUEST",
            )
        for tx in _transactions(random.Random(11), ranged):
            try:
                ddb.transact_write_items(TransactItems=tx)
                outcome: Any = "ok"
            except ClientError as exc:
                outcome = (exc.response["Error"]["Code"], exc.response.get("CancellationReasons"))
            tables = {t: sorted(ddb.scan(TableName=t)["Items"], key=repr) for t in ("a", "b")}
            seen.append((outcome, tables))
    return seen


@pytest.mark.parametrize("ranged", [False, True], ids=["hash-key", "hash-and-range-key"])
def test_the_transaction_snapshot_shim_answers_what_moto_answers(
    ranged: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    shimmed = _run(ranged)
    assert {o for o, _ in shimmed if o == "ok"} and any(o != "ok" for o, _ in shimmed)
    monkeypatch.setattr(moto_dynamodb_models, "copy", copy)  # moto's own snapshot
    assert _run(ranged) == shimmed


def _image(img: dict[str, Any]) -> dict[str, Any]:
    """An image as DescribeImages shows it, less what moto draws at random (snapshot ids) or
    takes from the clock (a built-in image without a date is dated when its backend is built)."""
    out = dict(img)
    out.pop("CreationDate", None)
    for bdm in out.get("BlockDeviceMappings", []):
        bdm.get("Ebs", {}).pop("SnapshotId", None)
    return out


def _instance(inst: dict[str, Any]) -> dict[str, Any]:
    random_fields = (
        "InstanceId", "LaunchTime", "PrivateDnsName", "PrivateIpAddress", "PublicDnsName",
        "PublicIpAddress", "NetworkInterfaces", "BlockDeviceMappings", "SubnetId", "VpcId",
        "SecurityGroups", "ClientToken", "UsageOperationUpdateTime",
    )  # fmt: skip
    return {k: v for k, v in inst.items() if k not in random_fields}


def _ec2_view() -> tuple[dict[str, Any], dict[str, Any]]:
    builtin = [a["ami_id"] for a in load_resource("ec2/resources/amis.json")]
    with mock_aws():
        ec2: Any = boto3.client("ec2", region_name="us-east-1")
        images = {i["ImageId"]: _image(i) for i in ec2.describe_images()["Images"]}
        assert set(builtin) <= set(images)
        inst = ec2.run_instances(ImageId=AMI, InstanceType="p5.48xlarge", MinCount=1, MaxCount=1)
        described = ec2.describe_instances()["Reservations"][0]["Instances"][0]
        assert described["InstanceId"] == inst["Instances"][0]["InstanceId"]
        return images, _instance(described)


def test_the_images_shim_keeps_every_builtin_image_and_what_moto_launches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    images, instance = _ec2_view()
    builtin = {a["ami_id"] for a in load_resource("ec2/resources/amis.json")}
    assert set(images) == builtin
    monkeypatch.delenv("MOTO_AMIS_PATH")  # moto's defaults: also each region's own lists
    all_images, moto_instance = _ec2_view()
    regional = {
        a["ami_id"]
        for path in ("latest_amis", "ecs/optimized_amis")
        for a in load_resource(f"ec2/resources/{path}/us-east-1.json")
    }
    assert set(all_images) == builtin | regional
    assert {i: all_images[i] for i in builtin} == images
    assert moto_instance == instance


def test_botocore_sessions_share_one_loader() -> None:
    a, b = boto3.session.Session(), boto3.session.Session()
    assert a._session.get_component("data_loader") is b._session.get_component("data_loader")
    assert (
        a.client("sqs", region_name="us-east-1").meta.service_model.operation_names
        == b.client("sqs", region_name="us-east-1").meta.service_model.operation_names
    )


def test_the_tags_shim_answers_what_moto_answers(
    _moto_tags_by_resource_id: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with mock_aws():
        ec2: Any = boto3.client("ec2", region_name="us-east-1")
        ids = [
            i["InstanceId"]
            for i in ec2.run_instances(
                ImageId=AMI, InstanceType="p5.48xlarge", MinCount=6, MaxCount=6
            )["Instances"]
        ]
        vol = ec2.create_volume(AvailabilityZone="us-east-1a", Size=8)["VolumeId"]
        ec2.create_launch_template(
            LaunchTemplateName="lt",
            LaunchTemplateData={"ImageId": AMI},
            TagSpecifications=[
                {"ResourceType": "launch-template", "Tags": [{"Key": "k", "Value": "lt"}]}
            ],
        )
        for n, iid in enumerate(ids[:4]):
            tags = [{"Key": f"k{j}", "Value": f"{iid}-{j}"} for j in range(n + 1)]
            ec2.create_tags(Resources=[iid, vol] if n == 2 else [iid], Tags=tags)
        ec2.delete_tags(Resources=[ids[3]], Tags=[{"Key": "k1"}])
        ec2.delete_tags(Resources=[ids[0]], Tags=[{"Key": "k0"}])  # an empty tag map is left

        def view() -> Any:
            backend = ec2_backends["123456789012"]["us-east-1"]
            resources: list[Any] = [*backend.all_instances(), *backend.volumes.values()]
            resources += list(backend.launch_templates.values())
            return (
                [(r.id, r.get_tags()) for r in resources],
                ec2.describe_instances(Filters=[{"Name": "tag:k0", "Values": ["*"]}]),
                ec2.describe_volumes()["Volumes"],
                ec2.describe_launch_templates()["LaunchTemplates"],
            )

        shimmed = view()
        assert any(tags for _, tags in shimmed[0]) and any(not t for _, t in shimmed[0])
        monkeypatch.setattr(moto_ec2_core.TaggedEC2Resource, "get_tags", _moto_tags_by_resource_id)
        ours = view()
        for answer in (shimmed, ours):
            answer[1].pop("ResponseMetadata")
        assert ours == shimmed


class _Recorded(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.seen.append((args.typ, args.name, args.inputs, args.provider, args.resource_id))
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], None]:
        return {}, None


def _program(mocks: _Recorded) -> list[Any]:
    pulumi.runtime.set_mocks(mocks, project="shim", stack="s", preview=False)

    class Part(pulumi.ComponentResource):
        def __init__(self, name: str) -> None:
            super().__init__("shim:index:Part", name, None)
            self.leaf = pulumi.CustomResource(
                "shim:index:Leaf", f"{name}-leaf", {"n": 1, "s": name},
                pulumi.ResourceOptions(parent=self),
            )  # fmt: skip
            self.register_outputs({"id": self.leaf.id})

    @pulumi.runtime.test
    def run() -> Any:
        parts = [Part(f"p{i}") for i in range(3)]
        return pulumi.Output.all(*[p.leaf.id for p in parts]).apply(lambda ids: ids)

    run()
    return sorted(mocks.seen, key=repr)


def test_pulumi_mocks_get_the_same_resources_without_stack_traces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shimmed = _program(_Recorded())
    assert sorted(s[1] for s in shimmed) == ["p0", "p0-leaf", "p1", "p1-leaf", "p2", "p2-leaf"]
    unpatched = pulumi.runtime.resource._get_stack_trace.__wrapped__  # type: ignore[attr-defined]
    monkeypatch.setattr(pulumi.runtime.resource, "_get_stack_trace", unpatched)
    assert _program(_Recorded()) == shimmed
