"""A loopback HTTP proxy in front of moto server that answers, as AWS documents them, the
questions ``coreburst burst check`` asks and moto does not answer:

* **DryRun** of EC2 CreateFleet and RunInstances: ``DryRunOperation`` (HTTP 412) when the
  caller may, ``UnauthorizedOperation`` (HTTP 403) when not (EC2 API reference, "Common
  Errors", https://docs.aws.amazon.com/AWSEC2/latest/APIReference/CommonErrors.html:
  DryRunOperation "The user has the required permissions, so the request would have
  succeeded, but the DryRun parameter was used"; UnauthorizedOperation "You are not
  authorized to perform this operation"; the ``<Response><Errors><Error>`` shape of
  "Example error response"). moto answers DryRunOperation to RunInstances always and runs a
  CreateFleet with DryRun for real.
* **Service Quotas GetServiceQuota** for EC2 quota codes (moto knows only VPC's): the
  ``Quota`` object of the Service Quotas API reference, "GetServiceQuota"
  (https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_GetServiceQuota.html),
  from ``quotas`` (code -> vCPUs); a code not there is ``NoSuchResourceException``.
* **IAM SimulatePrincipalPolicy** (not in moto): one ``EvaluationResults`` member per action
  (IAM API reference, "SimulatePrincipalPolicy",
  https://docs.aws.amazon.com/IAM/latest/APIReference/API_SimulatePrincipalPolicy.html),
  ``allowed`` unless the action is in ``refused`` (then ``implicitDeny``).

And it stands for credentials that may not ask: an action in ``denied`` (IAM names, e.g.
``servicequotas:GetServiceQuota``) is answered with the service's access-denied error
(EC2: ``UnauthorizedOperation``; IAM, STS, CloudWatch: ``AccessDenied`` in the query
``<ErrorResponse>``; JSON services: ``AccessDeniedException``). An action in ``refused`` is
one the credentials may not *do*: a DryRun of it is refused, its simulation denied.

Everything else goes to moto unchanged. Messages and request ids are made up.

    >>> proxy = CheckProxy(moto.url, quotas={"L-417A185B": 1536}).start()  # doctest: +SKIP
    >>> os.environ["AWS_ENDPOINT_URL"] = proxy.url  # doctest: +SKIP
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections import Counter
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from coreburst.sandbox.loopback import LoopbackServer, forward

# Credential scope service -> the IAM prefix of its actions.
_IAM_PREFIX = {
    "ec2": "ec2",
    "iam": "iam",
    "sts": "sts",
    "servicequotas": "servicequotas",
    "events": "events",
    "sqs": "sqs",
    "monitoring": "cloudwatch",
}
_SCOPE = re.compile(r"Credential=[^/]+/\d{8}/[^/]+/([^/]+)/aws4_request")

_EC2_ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
    "<Message>{msg}</Message></Error></Errors><RequestID>{rid}</RequestID></Response>"
)
_QUERY_ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<ErrorResponse><Error><Type>Sender</Type>'
    "<Code>{code}</Code><Message>{msg}</Message></Error><RequestId>{rid}</RequestId>"
    "</ErrorResponse>"
)
_IAM_NS = "https://iam.amazonaws.com/doc/2010-05-08/"
QUOTA_NAMES = {
    "L-417A185B": "Running On-Demand P instances",
    "L-7212CCBC": "All P Spot Instance Requests",
    "L-2C3B7624": "Running On-Demand Trn instances",
    "L-6B0D517C": "All Trn Spot Instance Requests",
}


class CheckProxy:
    """See the module docstring. ``calls`` counts the requests by IAM action name."""

    def __init__(
        self,
        upstream: str,
        *,
        quotas: dict[str, float] | None = None,
        denied: set[str] | None = None,
        refused: set[str] | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.quotas = dict(quotas or {})
        self.denied = set(denied or ())
        self.refused = set(refused or ())
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._server = LoopbackServer(self._handle)
        self.url = self._server.url

    def start(self) -> CheckProxy:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def configure(
        self,
        *,
        quotas: dict[str, float] | None = None,
        denied: set[str] | None = None,
        refused: set[str] | None = None,
    ) -> None:
        """Replace the answers (a test per case on one running proxy)."""
        with self._lock:
            self.quotas = dict(quotas or {})
            self.denied = set(denied or ())
            self.refused = set(refused or ())
            self.calls.clear()

    # -- request handling ------------------------------------------------------------------
    def _handle(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        low = {k.lower(): v for k, v in headers.items()}
        m = _SCOPE.search(low.get("authorization", ""))
        service = m.group(1) if m else ""
        target = low.get("x-amz-target", "")
        form: dict[str, list[str]] = {}
        if target:
            operation = target.rsplit(".", 1)[-1]
        else:
            form = parse_qs(body.decode("utf-8", "replace")) if body else {}
            operation = (form.get("Action") or [""])[0]
        action = f"{_IAM_PREFIX.get(service, service)}:{operation}"
        with self._lock:
            self.calls[action] += 1
            denied = action in self.denied
        if denied:
            return self._access_denied(service, bool(target), action)
        dry_run = (form.get("DryRun") or [""])[0].lower() == "true"
        if service == "ec2" and operation in ("CreateFleet", "RunInstances") and dry_run:
            return self._dry_run(action)
        if service == "servicequotas" and operation == "GetServiceQuota":
            return self._quota(json.loads(body or b"{}"))
        if service == "iam" and operation == "SimulatePrincipalPolicy":
            return self._simulate(form)
        return self._fetch(method, path, headers, body)

    def _access_denied(
        self, service: str, is_json: bool, action: str
    ) -> tuple[int, dict[str, str], bytes]:
        rid = str(uuid.uuid4())
        msg = escape(f"User is not authorized to perform: {action}")
        if service == "ec2":
            doc = _EC2_ERROR.format(code="UnauthorizedOperation", msg=msg, rid=rid)
            return 403, {"Content-Type": "text/xml;charset=UTF-8"}, doc.encode()
        if is_json:
            body = json.dumps({"__type": "AccessDeniedException", "message": msg})
            return 400, {"Content-Type": "application/x-amz-json-1.1"}, body.encode()
        doc = _QUERY_ERROR.format(code="AccessDenied", msg=msg, rid=rid)
        return 403, {"Content-Type": "text/xml"}, doc.encode()

    def _dry_run(self, action: str) -> tuple[int, dict[str, str], bytes]:
        xml = {"Content-Type": "text/xml;charset=UTF-8"}
        rid = str(uuid.uuid4())
        with self._lock:
            refused = action in self.refused
        if refused:
            msg = "You are not authorized to perform this operation. Encoded authorization "
            msg += "failure message: made-up-by-checkproxy"
            return (
                403,
                xml,
                _EC2_ERROR.format(code="UnauthorizedOperation", msg=msg, rid=rid).encode(),
            )
        msg = "Request would have succeeded, but DryRun flag is set."
        return 412, xml, _EC2_ERROR.format(code="DryRunOperation", msg=msg, rid=rid).encode()

    def _quota(self, req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        head = {"Content-Type": "application/x-amz-json-1.1"}
        code = str(req.get("QuotaCode", ""))
        service = str(req.get("ServiceCode", ""))
        with self._lock:
            value = self.quotas.get(code) if service == "ec2" else None
        if value is None:
            body = {
                "__type": "NoSuchResourceException",
                "message": f"The request failed because the specified quota {code} does not exist.",
            }
            return 400, head, json.dumps(body).encode()
        quota = {
            "ServiceCode": "ec2",
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:us-east-1::ec2/{code}",
            "QuotaCode": code,
            "QuotaName": QUOTA_NAMES.get(code, code),
            "Value": float(value),
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
        }
        return 200, head, json.dumps({"Quota": quota}).encode()

    def _simulate(self, form: dict[str, list[str]]) -> tuple[int, dict[str, str], bytes]:
        def members(name: str) -> list[str]:
            keys = sorted(
                (k for k in form if k.startswith(f"{name}.member.")),
                key=lambda k: int(k.rsplit(".", 1)[-1]),
            )
            return [form[k][0] for k in keys]

        actions = members("ActionNames")
        resources = members("ResourceArns") or ["*"]
        results = []
        with self._lock:
            refused = set(self.refused)
        for a in actions:
            for r in resources:
                decision = "implicitDeny" if a in refused else "allowed"
                results.append(
                    "<member>"
                    f"<EvalActionName>{escape(a)}</EvalActionName>"
                    f"<EvalResourceName>{escape(r)}</EvalResourceName>"
                    f"<EvalDecision>{decision}</EvalDecision>"
                    "<MatchedStatements/><MissingContextValues/>"
                    "</member>"
                )
        doc = (
            f'<SimulatePrincipalPolicyResponse xmlns="{_IAM_NS}"><SimulatePrincipalPolicyResult>'
            f"<IsTruncated>false</IsTruncated><EvaluationResults>{''.join(results)}"
            "</EvaluationResults></SimulatePrincipalPolicyResult><ResponseMetadata>"
            f"<RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
            "</SimulatePrincipalPolicyResponse>"
        )
        return 200, {"Content-Type": "text/xml"}, doc.encode()

    def _fetch(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        return forward(self.upstream, method, path, headers, body)
