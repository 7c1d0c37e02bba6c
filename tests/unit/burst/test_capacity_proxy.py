"""The lab's out-of-capacity CreateFleet answer (coreburst/sandbox/slurmlab.py ``_ICE_RESPONSE``,
made up
there in the shape of the EC2 API reference's CreateFleet response) is what botocore's own EC2
model and parser read as an instant fleet with no instance and one InsufficientInstanceCapacity
error, the case coreburst/burst/power.py handles without an exception."""

from __future__ import annotations

import botocore.session
from botocore.parsers import create_parser

from coreburst.sandbox.slurmlab import _ICE_RESPONSE


def test_ice_answer_parses_as_a_fleet_error_in_botocores_model() -> None:
    model = botocore.session.get_session().get_service_model("ec2")
    op = model.operation_model("CreateFleet")
    body = _ICE_RESPONSE.format(request_id="r-1", fleet="f-1", lifecycle="on-demand").encode()
    parsed = create_parser(model.metadata["protocol"]).parse(
        {"body": body, "headers": {}, "status_code": 200}, op.output_shape
    )
    assert parsed["FleetId"] == "fleet-f-1"
    assert parsed.get("Instances", []) == []
    (err,) = parsed["Errors"]
    assert err["ErrorCode"] == "InsufficientInstanceCapacity"
    assert err["Lifecycle"] == "on-demand"
