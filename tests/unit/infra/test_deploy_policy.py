"""The deploy role's policies (infra/deploy_iam.py, `coreburst gitops deploy-policy`, the files in
.github/iam/): linted by parliament like the project's other policies, and covering every AWS
resource the program declares for the example stacks, on that resource.

AWS pages the checks follow: the Service Authorization Reference ("Actions, resources, and
condition keys for <service>", https://docs.aws.amazon.com/service-authorization/latest/
reference/reference_policies_actions-resources-contextkeys.html): each service's IAM prefix,
which resource types each action authorizes on (none: only "*"), and its dependent actions.
parliament's iam_definition.json is built from it. IAM User Guide, "IAM and AWS STS quotas":
a managed policy holds at most 6,144 characters, white space not counted.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import re
from pathlib import Path
from typing import Any

import pulumi_aws
import pytest
from parliament import analyze_policy_string, iam_definition

from infra.deploy_iam import (
    ACTIONS,
    DATA_BUCKET_ACTIONS,
    GROUPS,
    INSTANCE_PROFILES,
    MANAGED_POLICIES,
    MAX_POLICY_CHARS,
    ROLES,
    SCOPES,
    UNSCOPED,
    DeployScope,
    deploy_policies,
    deploy_scope,
    needed_actions,
    policy_chars,
    render,
)
from infra.offline import FAKE_ACCOUNT, Evaluation, Resource, evaluate_config, load_stack_yaml

ROOT = Path(__file__).resolve().parents[3]
IAM_DIR = ROOT / ".github" / "iam"
STACKS = ("burst", "dev", "prod")
SERVICES = {s["prefix"]: s for s in iam_definition}
# What Pulumi's autonaming appends to a logical name (a dash and 7 random characters).
SUFFIX = "-a1b2c3d"


@pytest.fixture(scope="module")
def evaluations() -> dict[str, Evaluation]:
    """The example stacks under Pulumi's mocks, and prod with a transit VIF (a transit gateway
    instead of a virtual private gateway), which no example stack declares."""
    out = {s: evaluate_config(s, load_stack_yaml(s, ROOT)) for s in STACKS}
    transit = copy.deepcopy(load_stack_yaml("prod", ROOT))
    transit["coreburst:hybridLink"].update(vifType="transit", mtu=8500)
    out["prod-transit"] = evaluate_config("prod", transit)
    return out


@pytest.fixture(scope="module")
def docs() -> dict[str, dict[str, Any]]:
    """The policies for the repository's stacks, as committed."""
    return {g: json.loads((IAM_DIR / f"deploy-{g}.json").read_text()) for g in GROUPS}


def _union(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """All six as one document: what the role is allowed, every policy attached together."""
    return {
        "Version": "2012-10-17",
        "Statement": [s for d in docs.values() for s in d["Statement"]],
    }


def _list(value: str | list[str]) -> list[str]:
    return value if isinstance(value, list) else [value]


def allows(doc: dict[str, Any], action: str, resource: str) -> bool:
    """An Allow statement names the action and a resource pattern matching ``resource``
    (conditions are checked by the tests that are about them)."""
    return any(
        s["Effect"] == "Allow"
        and any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in _list(s["Action"]))
        and any(fnmatch.fnmatchcase(resource, r) for r in _list(s["Resource"]))
        for s in doc["Statement"]
    )


def _privilege(action: str) -> dict[str, Any]:
    service, _, name = action.partition(":")
    return next(p for p in SERVICES[service]["privileges"] if p["privilege"] == name)


def _expand(action: str) -> set[str]:
    """``s3:Get*`` -> every s3 action it names, from parliament's database."""
    service, _, name = action.partition(":")
    return {
        f"{service}:{p['privilege']}"
        for p in SERVICES[service]["privileges"]
        if fnmatch.fnmatchcase(p["privilege"].lower(), name.lower())
    }


# -- the files in the repository are the generated ones --------------------------------------
def test_the_committed_policies_are_what_the_stacks_need(
    evaluations: dict[str, Evaluation],
) -> None:
    """.github/iam/ is what `coreburst gitops deploy-policy --out .github/iam` writes for the
    stack files here: a new region or linked bucket, or a new resource type in the program,
    fails this test until the files are regenerated (and the role updated)."""
    configs = [evaluations[s].config for s in STACKS]
    scope = deploy_scope(configs)
    assert scope == DeployScope(("us-east-1", "us-east-2"), ("fm-v3-datasets",), ())
    expected = {f"deploy-{g}.json": render(d) for g, d in deploy_policies(scope).items()}
    found = {p.name: p.read_text() for p in IAM_DIR.glob("*.json")}
    assert sorted(found) == sorted(expected)
    for name, text in expected.items():
        assert found[name] == text, f"{name}: run coreburst gitops deploy-policy --out .github/iam"


def test_each_fits_a_managed_policy(docs: dict[str, dict[str, Any]]) -> None:
    for group, doc in docs.items():
        assert policy_chars(doc) <= MAX_POLICY_CHARS, group
    # Four regions still fit (each region adds one ARN per scoped statement).
    many = DeployScope(("us-east-1", "us-east-2", "us-west-2", "eu-west-1"), ("a", "b"), ("/x",))
    assert all(policy_chars(d) <= MAX_POLICY_CHARS for d in deploy_policies(many).values())


# -- parliament, the linter the project's other policies pass ---------------------------------
# Findings we accept, each for a stated reason; anything else fails the test.
KNOWN_FINDINGS = {
    # What `up` of these stacks does: create IAM roles and their policies, a topic policy
    # (budgets publish), queue policies (SNS and EventBridge send), a bucket's public access
    # block.
    "PERMISSIONS_MANAGEMENT_ACTIONS",
    # iam:PassRole (the node roles, to EC2 only) with ec2:RunInstances: Auto Scaling checks the
    # caller's RunInstances on the launch template; lambda:UpdateFunctionCode on the one
    # function the program deploys, guardrails-daemon, with its role.
    "PRIVILEGE_ESCALATION",
    # s3:PutLifecycleConfiguration on the checkpoint buckets without s3:DeleteObject: the
    # lifecycle rule the program declares (old checkpoint versions expire).
    "RESOURCE_POLICY_PRIVILEGE_ESCALATION",
}


def _findings(doc: dict[str, Any]) -> list[Any]:
    return analyze_policy_string(json.dumps(doc), include_community_auditors=True).findings


@pytest.mark.parametrize("group", [*GROUPS, "all together"])
def test_policies_pass_parliament(docs: dict[str, dict[str, Any]], group: str) -> None:
    """parliament (https://github.com/duo-labs/parliament), community auditors on: real actions,
    resources of a type each action authorizes on, no Resource "*" where the action takes a
    resource type, known condition keys and operators. Each document, and all of them as one
    (the escalation auditors look at combinations)."""
    doc = _union(docs) if group == "all together" else docs[group]
    unexpected = []
    for f in _findings(doc):
        if f.issue in KNOWN_FINDINGS:
            continue
        if f.issue == "RESOURCE_MISMATCH" and _only_s3_wildcard_expansions(f.detail):
            continue
        unexpected.append((f.issue, f.detail))
    assert unexpected == []


def _only_s3_wildcard_expansions(detail: list[dict[str, str]]) -> bool:
    """The s3:Get* and s3:List* FSx asks for on a linked bucket also name actions on access
    points, Storage Lens, jobs...: those grant nothing on a bucket ARN, which is what parliament
    reports. True when every action it reports comes from those two wildcards."""
    wild = set().union(*(_expand(a) for a in DATA_BUCKET_ACTIONS if "*" in a))
    return bool(detail) and all(d["action"] in wild for d in detail)


def test_parliament_is_live(docs: dict[str, dict[str, Any]]) -> None:
    """The lint catches what this policy could get wrong: a scoped action on "*" (RESOURCE_STAR)
    and a resource of the wrong type (RESOURCE_MISMATCH)."""
    doc = copy.deepcopy(docs["network"])
    doc["Statement"][0]["Action"].append("ec2:CreateVpc")
    assert "RESOURCE_STAR" in {f.issue for f in _findings(doc)}
    doc = copy.deepcopy(docs["guardrails"])
    table = next(s for s in doc["Statement"] if s["Sid"] == "DynamodbStackResources")
    table["Resource"] = [r.replace(":dynamodb:", ":sqs:") for r in table["Resource"]]
    assert "RESOURCE_MISMATCH" in {f.issue for f in _findings(doc)}


def test_unscoped_is_exactly_what_aws_authorizes_on_star_only() -> None:
    """UNSCOPED holds the actions with no required resource type in the Service Authorization
    Reference (the "*"-only ones, and CreateConnection, whose one type, a LAG, the program never
    gives); every other action names at least one resource type, so it can be scoped."""
    for action in sorted(needed_actions(ACTIONS)):
        if "*" in action:
            continue
        types = [t["resource_type"] for t in _privilege(action)["resource_types"]]
        required = [t for t in types if t.endswith("*")]
        if action in UNSCOPED:
            assert not required, (action, required)
        else:
            assert any(types), action


def test_every_dependent_action_is_granted() -> None:
    """The Service Authorization Reference's "Dependent actions" of every granted action are
    granted too, but for two the program never triggers."""
    waived = {
        # Only for a launch template or RunInstances that names its AMI as resolve:ssm:<param>;
        # the program resolves the parameter itself (aws.ssm.get_parameter_output).
        "ssm:GetParameters",
        # DeleteFileSystem's final backup: the provider skips it for Lustre unless
        # skipFinalBackup is false, which the program never sets.
        "fsx:CreateBackup",
    }
    granted = set().union(*(_expand(a) for a in needed_actions(ACTIONS)))
    missing = {
        (dep, action)
        for action in needed_actions(ACTIONS)
        if "*" not in action
        for t in _privilege(action)["resource_types"]
        for dep in t["dependent_actions"]
        if dep not in granted and dep not in waived
    }
    assert sorted(missing) == []
    assert {"iam:PassRole", "ec2:CreateTags", "fsx:TagResource"} <= granted


# -- every resource the program declares is covered, on its own ARN ---------------------------
# The IAM service prefix of each Pulumi module (the Service Authorization Reference names each
# service's prefix on its page): the module's own name, but for these.
MODULE_PREFIX = {
    "vpc": "ec2",  # aws.vpc.SecurityGroupIngressRule: EC2 API calls
    "ec2transitgateway": "ec2",
    "cloudwatch/eventRule": "events",  # aws.cloudwatch.EventRule: Amazon EventBridge
    "cloudwatch/eventTarget": "events",
    "cloudwatch/logGroup": "logs",  # CloudWatch Logs
}
# Resources the program names (or Pulumi autonames from the logical name): their ARN, in the
# format of the Service Authorization Reference's "Resource types" table.
OWN_ARN = {
    "aws:iam/role:Role": "arn:aws:iam::{a}:role/{n}",
    "aws:iam/instanceProfile:InstanceProfile": "arn:aws:iam::{a}:instance-profile/{n}",
    "aws:s3/bucket:Bucket": "arn:aws:s3:::{n}",
    "aws:sns/topic:Topic": "arn:aws:sns:{r}:{a}:{n}",
    "aws:sqs/queue:Queue": "arn:aws:sqs:{r}:{a}:{n}",
    "aws:dynamodb/table:Table": "arn:aws:dynamodb:{r}:{a}:table/{n}",
    "aws:secretsmanager/secret:Secret": "arn:aws:secretsmanager:{r}:{a}:secret:{n}-AbCdEf",
    "aws:ssm/parameter:Parameter": "arn:aws:ssm:{r}:{a}:parameter{n}",
    "aws:lambda/function:Function": "arn:aws:lambda:{r}:{a}:function:{n}",
    "aws:cloudwatch/logGroup:LogGroup": "arn:aws:logs:{r}:{a}:log-group:{n}",
    "aws:cloudwatch/eventRule:EventRule": "arn:aws:events:{r}:{a}:rule/{n}",
    "aws:scheduler/schedule:Schedule": "arn:aws:scheduler:{r}:{a}:schedule/default/{n}",
    "aws:autoscaling/group:Group": (
        "arn:aws:autoscaling:{r}:{a}:autoScalingGroup:6d3f0c1e-0000-4000-8000-000000000000:"
        "autoScalingGroupName/{n}"
    ),
    "aws:budgets/budget:Budget": "arn:aws:budgets::{a}:budget/{n}",
}
# Resources that are settings of another: the provider's calls act on that one.
PARENT = {
    "aws:iam/rolePolicy:RolePolicy": "aws:iam/role:Role",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": "aws:iam/role:Role",
    "aws:sns/topicPolicy:TopicPolicy": "aws:sns/topic:Topic",
    "aws:sns/topicSubscription:TopicSubscription": "aws:sns/topic:Topic",
    "aws:sqs/queuePolicy:QueuePolicy": "aws:sqs/queue:Queue",
    "aws:cloudwatch/eventTarget:EventTarget": "aws:cloudwatch/eventRule:EventRule",
    **{
        t: "aws:s3/bucket:Bucket"
        for t in ACTIONS
        if t.startswith("aws:s3/bucket") and t != "aws:s3/bucket:Bucket"
    },
}
# Resources AWS names by an id: any one in the stack's region (and account) is theirs.
ID_ARN = {
    "ec2": "arn:aws:ec2:{r}:{a}:vpc/vpc-0123456789abcdef0",
    "fsx": "arn:aws:fsx:{r}:{a}:file-system/fs-0123456789abcdef0",
    "directconnect": "arn:aws:directconnect:{r}:{a}:dxcon/dxcon-ffabc123",
}
DX_GATEWAY_ARN = "arn:aws:directconnect::{a}:dx-gateway/5f3a0c1e-0000-4000-8000-000000000000"


def prefix_of(token: str) -> str:
    """``aws:ec2/vpc:Vpc`` -> ``ec2``: the IAM service prefix of a Pulumi AWS type."""
    module = token.split(":")[1]
    return (
        MODULE_PREFIX.get(module) or MODULE_PREFIX.get(module.split("/")[0]) or module.split("/")[0]
    )


def physical_name(r: Resource) -> str:
    """The name AWS will see: the one the program gives, else Pulumi's autoname."""
    return str(r.inputs.get("name") or f"{r.name}{SUFFIX}")


def _arns(ev: Evaluation, token: str) -> list[str]:
    region = ev.config.region
    if token in PARENT:
        token = PARENT[token]
    if token in OWN_ARN:
        return [
            OWN_ARN[token].format(r=region, a=FAKE_ACCOUNT, n=physical_name(r))
            for r in ev.of_type(token)
        ]
    if token.startswith("aws:directconnect/gateway"):
        return [DX_GATEWAY_ARN.format(a=FAKE_ACCOUNT)]
    return [ID_ARN[prefix_of(token)].format(r=region, a=FAKE_ACCOUNT)]


def _declared(evaluations: dict[str, Evaluation]) -> set[str]:
    return {r.typ for ev in evaluations.values() for r in ev.resources if r.typ.startswith("aws:")}


def test_the_evaluations_declare_what_the_issue_names(evaluations: dict[str, Evaluation]) -> None:
    """EC2, VPC, FSx, Direct Connect and VPN, IAM roles, Budgets, Lambda, SQS, EventBridge,
    CloudWatch Logs, S3: the check below is over all of them."""
    prefixes = {prefix_of(t) for t in _declared(evaluations)}
    assert {
        "ec2", "fsx", "directconnect", "iam", "budgets", "lambda", "sqs", "events", "logs", "s3",
        "autoscaling", "dynamodb", "scheduler", "secretsmanager", "sns", "ssm",
    } == prefixes  # fmt: skip
    assert "aws:ec2transitgateway/transitGateway:TransitGateway" in _declared(evaluations)
    assert "aws:ec2/vpnConnection:VpnConnection" in _declared(evaluations)


def test_every_declared_resource_is_granted_on_its_arn(
    evaluations: dict[str, Evaluation], docs: dict[str, dict[str, Any]]
) -> None:
    """For every AWS resource the example stacks declare: its type has actions, one of them in
    the service its Pulumi module names, and each of that service's actions is granted on the
    resource's ARN (its name, as Pulumi will make it, or any id in the stack's region)."""
    union = _union(docs)
    missing = []
    for name, ev in evaluations.items():
        for token in sorted({r.typ for r in ev.resources if r.typ.startswith("aws:")}):
            assert token in ACTIONS, f"{token}: no entry in infra/deploy_iam.py ACTIONS"
            prefix = prefix_of(token)
            assert prefix in SERVICES, (token, prefix)
            own = [a for a in ACTIONS[token] if a.split(":")[0] == prefix]
            assert own, f"{token}: no {prefix}: action"
            # PassRole acts on the role passed, not on the resource: the next test's subject.
            for action in (a for a in own if a != "iam:PassRole"):
                arns = ["*"] if action in UNSCOPED else _arns(ev, token)
                assert arns, (name, token)
                missing += [(name, action, arn) for arn in arns if not allows(union, action, arn)]
    assert missing == []


def test_the_arns_are_not_vacuous(evaluations: dict[str, Evaluation]) -> None:
    """The names checked are the program's: an ARN of another name or region is refused."""
    docs = deploy_policies(DeployScope(("us-east-1", "us-east-2")))
    union = _union(docs)
    prod = evaluations["prod"]
    (table,) = _arns(prod, "aws:dynamodb/table:Table")
    assert table.endswith(":table/guardrails-state-a1b2c3d")
    assert allows(union, "dynamodb:DeleteTable", table)
    assert not allows(union, "dynamodb:DeleteTable", table.replace("guardrails-state", "orders"))
    assert not allows(union, "ec2:DeleteVpc", ID_ARN["ec2"].format(r="eu-west-1", a="1"))
    assert not allows(union, "sqs:DeleteQueue", "arn:aws:sqs:us-east-2:1:orders")
    assert not allows(union, "lambda:UpdateFunctionCode", "arn:aws:lambda:us-east-2:1:function:x")


def test_every_type_the_program_can_declare_has_actions() -> None:
    """Read from the program's source: every pulumi_aws resource class infra/ names has an
    entry (a type only some config declares, such as the transit gateway, included), and every
    entry is a type the program names."""
    named: set[str] = set()
    for path in (ROOT / "infra").rglob("*.py"):
        for module, cls in re.findall(r"\baws\.(\w+)\.([A-Z]\w*)\b", path.read_text()):
            obj = getattr(getattr(pulumi_aws, module), cls)
            token = getattr(obj, "pulumi_type", None)
            if isinstance(obj, type) and not cls.endswith("Args") and token:
                named.add(token)
    assert "aws:directconnect/transitVirtualInterface:TransitVirtualInterface" in named
    assert named == set(ACTIONS)


def test_roles_are_passed_only_to_the_service_that_trusts_them(
    evaluations: dict[str, Evaluation], docs: dict[str, dict[str, Any]]
) -> None:
    """Each role the stacks declare has exactly one name pattern, whose PassRole condition names
    the service its trust policy names; instance profiles and managed policies likewise."""
    identity = docs["identity"]
    passes = {
        s["Resource"]: s["Condition"] for s in identity["Statement"] if s["Sid"].startswith("Pass")
    }
    roles = [r for ev in evaluations.values() for r in ev.of_type("aws:iam/role:Role")]
    assert len(roles) >= 5
    for role in roles:
        name = physical_name(role)
        trust = json.loads(role.inputs["assumeRolePolicy"])
        (service,) = {s["Principal"]["Service"] for s in trust["Statement"]}
        (pattern,) = [p for p in ROLES if fnmatch.fnmatchcase(name, p)]
        assert ROLES[pattern] == service
        (condition,) = passes[f"arn:aws:iam::*:role/{pattern}"].values()
        assert condition == {"iam:PassedToService": service}
    profiles = [
        physical_name(r) for ev in evaluations.values() for r in ev.of_type(
            "aws:iam/instanceProfile:InstanceProfile"
        )
    ]  # fmt: skip
    assert profiles and all(
        any(fnmatch.fnmatchcase(n, p) for p in INSTANCE_PROFILES) for n in profiles
    )
    attached = {
        r.inputs["policyArn"]
        for ev in evaluations.values()
        for r in ev.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    }
    assert attached == {f"arn:aws:iam::aws:policy/{n}" for n in MANAGED_POLICIES}
    attach = next(
        s for s in identity["Statement"] if s["Sid"] == "StackRolesOnlyTheNodeManagedPolicies"
    )
    assert set(attach["Condition"]["ArnEquals"]["iam:PolicyARN"]) == attached


def test_no_iam_on_star_and_no_secret_reads(docs: dict[str, dict[str, Any]]) -> None:
    """The escalation path gets names and conditions, never "*"; the deploy role never reads a
    secret's value (the Slack webhook, the munge key) or writes a policy outside its roles."""
    for s in _union(docs)["Statement"]:
        actions = _list(s["Action"])
        if any(a.startswith("iam:") for a in actions):
            assert s["Resource"] != "*" and all(":iam::" in r for r in _list(s["Resource"]))
        assert not any(fnmatch.fnmatchcase("secretsmanager:GetSecretValue", a) for a in actions)
        assert not any(a.endswith(":*") for a in actions)
    union = _union(docs)
    assert not allows(union, "iam:PutRolePolicy", "arn:aws:iam::1:role/github-deploy")
    assert not allows(union, "iam:CreatePolicy", "arn:aws:iam::1:policy/x")
    slr = next(s for s in union["Statement"] if s["Sid"] == "ServiceLinkedRoles")
    assert "iam:AWSServiceName" in slr["Condition"]["StringEquals"]


def test_scopes_follow_the_stacks(evaluations: dict[str, Evaluation]) -> None:
    """The regions, the linked buckets and a cluster's own AMI parameter come from the stacks;
    the account narrows every ARN that has one."""
    prod = evaluations["prod"].config
    scope = deploy_scope([prod])
    assert scope == DeployScope(("us-east-2",), ("fm-v3-datasets",), ())
    cluster = prod.clusters[0].model_copy(update={"ami_ssm_parameter": "/images/p5en/latest"})
    custom = prod.model_copy(update={"clusters": [cluster, *prod.clusters[1:]]})
    assert deploy_scope([custom]).ami_parameters == ("/images/p5en/latest",)
    docs = deploy_policies(deploy_scope([custom]), account="210987654321")
    union = _union(docs)
    assert allows(
        union, "ssm:GetParameter", "arn:aws:ssm:us-east-2:210987654321:parameter/images/p5en/latest"
    )
    assert allows(union, "s3:GetObject", "arn:aws:s3:::fm-v3-datasets/tokenized/part-0")
    assert not allows(union, "s3:GetObject", "arn:aws:s3:::someone-elses/x")
    assert not allows(union, "ec2:DeleteVpc", ID_ARN["ec2"].format(r="us-east-2", a="123456789012"))
    assert allows(union, "ec2:DeleteVpc", ID_ARN["ec2"].format(r="us-east-2", a="210987654321"))
    # Every service with scoped actions has a scope (IAM has statements of its own).
    scoped = {a.split(":")[0] for a in needed_actions(ACTIONS) - UNSCOPED} - {"iam"}
    assert scoped <= set(SCOPES)


@pytest.mark.parametrize(
    ("scope", "account", "message"),
    [
        (DeployScope(("us-east-1",)), "1234", "'1234' is not a 12-digit AWS account id (or *)"),
        (DeployScope(()), "*", "no region: the policy is for the regions of at least one stack"),
        (
            DeployScope(("us-east-1", "cn-north-1")),
            "*",
            "regions us-east-1, cn-north-1 span partitions aws, aws-cn: one role cannot deploy "
            "them; give each partition its own policy",
        ),
    ],
)
def test_bad_input_is_one_line(scope: DeployScope, account: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        deploy_policies(scope, account=account)
    assert str(err.value) == message


def test_other_partitions_get_their_arns() -> None:
    docs = deploy_policies(DeployScope(("us-gov-west-1",)))
    text = json.dumps(docs)
    assert "arn:aws-us-gov:ec2:us-gov-west-1:*:*" in text and "arn:aws:" not in text
