"""Every EC2 operation the power programs call, read from their source (the IAM policy and
the cut EC2 model, coreburst/burst/iam.py and ec2model.py, are checked against it)."""

from __future__ import annotations

import ast
from pathlib import Path

import botocore.session
from botocore import xform_name

import coreburst.burst.ec2io
import coreburst.burst.launch

EC2_MODEL = botocore.session.get_session().get_service_model("ec2")


def power_operations() -> set[str]:
    """Every EC2 operation the power programs call, read from the source of
    coreburst/burst/launch.py (``self.ec2.<op>(...)``, ``self.ec2.get_paginator("<op>")``) and
    coreburst/burst/ec2io.py (the same on its ``ec2`` argument), as botocore operation names."""
    by_method = {xform_name(op): op for op in EC2_MODEL.operation_names}
    found = set()
    for module in (coreburst.burst.launch, coreburst.burst.ec2io):
        tree = ast.parse(Path(str(module.__file__)).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            target = node.func.value
            on_self = (
                isinstance(target, ast.Attribute)
                and target.attr == "ec2"
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            )
            on_arg = isinstance(target, ast.Name) and target.id == "ec2"
            if not (on_self or on_arg):
                continue
            method = node.func.attr
            if method == "get_paginator":
                (arg,) = node.args
                assert isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                method = arg.value
            assert method in by_method, f"{module.__name__} calls ec2.{method}, not an EC2 op"
            found.add(by_method[method])
    return found
