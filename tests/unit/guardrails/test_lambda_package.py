"""`make lambda-package` must ship every third-party package the Lambda handler imports.

The Lambda runtime provides boto3/botocore only; anything else missing from the package is an
ImportError on the first scheduled run, long after `pulumi up` succeeded.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[3]
PROVIDED = {"boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six"}
# imported only when present: structlog's console niceties, botocore's CA bundle lookup
OPTIONAL = {
    "rich",
    "attr",
    "pygments",
    "colorama",
    "better_exceptions",
    "certifi",
    "cython_runtime",
}
DIST = {  # import name -> distribution name, where they differ
    "yaml": "PyYAML",
    "slack_sdk": "slack-sdk",
    "pydantic_settings": "pydantic-settings",
    "pydantic_core": "pydantic",  # installed with pydantic
    "annotated_types": "pydantic",
    "typing_extensions": "pydantic",
    "typing_inspection": "pydantic",
    "prometheus_client": "prometheus-client",
    "dotenv": "pydantic-settings",
}


def test_every_import_of_the_handler_is_packaged() -> None:
    code = (
        "import sys, guardrails.lambda_handler as h; h.handler.__code__; "
        "from guardrails import aws, daemon, budget_relay, state_dynamo; "
        "print('\\n'.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    third_party = {
        m
        for m in out
        if m not in sys.stdlib_module_names
        and not m.startswith("_")
        and m not in {"guardrails", "infra", *PROVIDED, *OPTIONAL}
    }
    recipe = (ROOT / "Makefile").read_text().split("lambda-package:")[1].split("\n\n")[0]
    packaged = {d.lower() for d in re.findall(r"'([A-Za-z0-9_.-]+)[<>=]", recipe)}
    missing = sorted(m for m in third_party if DIST.get(m, m).lower() not in packaged)
    assert "orjson" in third_party and "structlog" in third_party
    assert missing == [], f"imported by the Lambda handler but not packaged: {missing}"
