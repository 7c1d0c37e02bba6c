"""Fakes for running a burst node's user data off EC2 (tests/unit/infra/test_userdata_burst.py,
tests/integration/burst/test_node_boot.py), and that user data rendered from a stack file as
GpuCluster renders it, without Pulumi (the Slurm chroots have no Pulumi).

Every fake here is MADE UP BY US and says which document it follows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from coreburst.common.catalog import load_catalog
from infra.config import parse_stack_config
from infra.userdata import render_user_data, slurm_join_for

FAKE_CURL = r"""#!/bin/bash
# MADE UP BY US: IMDSv2 as "Retrieve instance metadata" and "View tags ... using instance
# metadata" document it (token by PUT, reads with the token header, 404 for a missing tag).
echo "curl $*" >> "$FAKE_LOG"
method=GET; url=""; token=""
while [ $# -gt 0 ]; do
  case "$1" in
    -X) method=$2; shift ;;
    -H) case "$2" in "X-aws-ec2-metadata-token: "*) token=${2#*: } ;; esac; shift ;;
    http*) url=$1 ;;
  esac
  shift
done
base=http://169.254.169.254/latest
if [ "$url" = "$base/api/token" ]; then
  [ "$method" = PUT ] || exit 22
  echo -n "$FAKE_TOKEN"; exit 0
fi
[ "$token" = "$FAKE_TOKEN" ] || { echo "curl: (22) 401" >&2; exit 22; }
case "$url" in
  "$base/meta-data/instance-id") echo -n "$FAKE_IID" ;;
  "$base/meta-data/instance-type") echo -n p5.48xlarge ;;
  "$base/meta-data/tags/instance/$FAKE_TAG_KEY")
    n=$(( $(cat "$FAKE_DIR/polls" 2>/dev/null || echo 0) + 1 )); echo $n > "$FAKE_DIR/polls"
    # The tag lands after the instance boots (the resume program tags after CreateFleet).
    if [ -n "$FAKE_NODE" ] && [ "$n" -gt "${FAKE_TAG_AFTER:-2}" ]; then echo -n "$FAKE_NODE"; else
      echo "curl: (22) The requested URL returned error: 404" >&2; exit 22; fi ;;
  *) exit 22 ;;
esac
"""

FAKE_AWS = r"""#!/bin/bash
# MADE UP BY US: the AWS CLI's answers for GetSecretValue (SecretBinary, base64 with
# --output text) and GetParameter (Parameter.Value); AccessDenied when FAKE_DENY names the call.
echo "aws $*" >> "$FAKE_LOG"
case "$1 $2" in
  "secretsmanager get-secret-value")
    if [ "$FAKE_DENY" = secret ]; then
      echo "An error occurred (AccessDeniedException) when calling the GetSecretValue operation" >&2
      exit 254
    fi
    cat "$FAKE_DIR/secret.b64" ;;
  "ssm get-parameter")
    if [ "$FAKE_DENY" = parameter ]; then
      echo "An error occurred (ParameterNotFound) when calling the GetParameter operation" >&2
      exit 254
    fi
    printf '%s\n' "$FAKE_PARAM" ;;
  *) exit 252 ;;
esac
"""

RECORDER = (
    '#!/bin/sh\n# MADE UP BY US: records the call.\necho "$(basename "$0") $*" >> "$FAKE_LOG"\n'
)
# MADE UP BY US: "installs" slurmd and munged (recorders) next to itself.
FAKE_APT = RECORDER + (
    'for t in slurmd munged; do printf \'%s\' "$(cat "$0.recorder")" > "$(dirname "$0")/$t"; '
    'chmod 755 "$(dirname "$0")/$t"; done\n'
)


HEALTH = Path(__file__).resolve().parents[1] / "fixtures/health"
# MADE UP BY US: nvidia-smi, dcgmi and fi_info answering from a node-check replay directory
# (tests/fixtures/health, whose README gives each output's source): <probe>.out, .rc.
FAKE_PROBE = RECORDER + (
    'f="$FAKE_HEALTH/$FAKE_PROBE_NAME"\n'
    '[ -e "$f.out" ] || { echo "$0: not found" >&2; exit 127; }\n'
    'cat "$f.out"; [ ! -e "$f.err" ] || cat "$f.err" >&2\n'
    'exit "$(cat "$f.rc" 2>/dev/null || echo 0)"\n'
)
PROBES = {"nvidia-smi": "nvidia-smi", "dcgmi": "dcgmi-diag", "fi_info": "fi_info"}


def stack_config_map(stack_file: Path) -> dict[str, Any]:
    """A Pulumi.<stack>.yaml's ``coreburst:*`` keys and ``aws:region``, as the program reads
    them (infra/program.py read_stack_config)."""
    config = yaml.safe_load(stack_file.read_text())["config"]
    raw = {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith("coreburst:")}
    raw.setdefault("region", config.get("aws:region"))
    return raw


def burst_user_data(stack_file: Path, cluster: str, secret_arn: str, param_arn: str) -> str:
    """The user data GpuCluster renders for ``cluster``'s nodes (a burst stack without
    Lustre), given the munge key secret's and the Slurm parameter's ARNs."""
    catalog = load_catalog()
    cfg = parse_stack_config(stack_config_map(stack_file), catalog)
    c = next(c for c in cfg.clusters if c.name == cluster)
    assert cfg.burst is not None and cfg.burst.node is not None and cfg.lustre is None
    kind = catalog.instance(c.instance_type).accelerator.kind
    join = slurm_join_for(
        cfg.burst.node,
        c,
        catalog,
        region=cfg.region,
        node_tag_key=cfg.burst.node_tag_key,
        munge_key_secret_arn=secret_arn,
        slurm_conf_parameter_arn=param_arn,
    )
    return render_user_data(kind, slurm_join=join, per_device_metrics=c.per_device_metrics)
